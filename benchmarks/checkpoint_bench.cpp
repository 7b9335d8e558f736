// Checkpoint saving and loading (saving/checkpoint.hpp, and Keras's .weights.h5 through
// save_weights/load_weights): how long a training step waits for a save, in the foreground and
// in the background, and the MB/s of whole saves and loads. A 4-layer 2048-wide MLP (16.8 M
// weights, 201 MB of state with Adam's two slots; --large: 5 layers 4096 wide, 84 M weights,
// 1007 MB) trains steps of batch 256; every `--every` steps it saves its whole state, either
// with save_checkpoint (the step waits for the files) or with an async_checkpointer (the step
// waits for the host copy; the files are written beside the next steps, and committed at the
// next save). Run alone or as `mpiexec -n 2` (model_parallel 1x2: each process writes half of
// every kernel). The lines it prints:
//
//   RESULT checkpoint mode=<foreground|background> processes=<n> state_mb=<MB>
//          blocking_ms=<median per save> first_blocking_ms=<the first save's> write_ms=<median>
//          total_ms=<median> step_ms=<median>
//
// (the first background save allocates the host buffer the later ones reuse).
//   RESULT checkpoint_io format=<sharded|weights_h5> processes=<n> state_mb=<MB>
//          save_mb_per_s=<median> load_mb_per_s=<median>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tessel/saving/checkpoint.hpp>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using namespace tessel;
using namespace tessel::layers;
using mesh_t = device_mesh<axis<"data", 1>, axis<"model">>;
using map_t = layout_map<mesh_t, rule<"h1/kernel", none, "model">, rule<"h2/kernel", "model", none>,
                         rule<"h3/kernel", none, "model">, rule<"h4/kernel", "model", none>>;
template <class Dist>
using mlp = sequential<Dist, input<2048>, dense<2048, {.activation = "relu", .name = "h1"}>,
                       dense<2048, {.activation = "relu", .name = "h2"}>,
                       dense<2048, {.activation = "relu", .name = "h3"}>,
                       dense<2048, {.name = "h4"}>>;
using large_map_t = layout_map<mesh_t, rule<"h1/kernel", none, "model">, rule<"h2/kernel", "model", none>,
                               rule<"h3/kernel", none, "model">, rule<"h4/kernel", "model", none>,
                               rule<"h5/kernel", none, "model">>;
template <class Dist>
using large_mlp = sequential<Dist, input<4096>, dense<4096, {.activation = "relu", .name = "h1"}>,
                             dense<4096, {.activation = "relu", .name = "h2"}>,
                             dense<4096, {.activation = "relu", .name = "h3"}>,
                             dense<4096, {.activation = "relu", .name = "h4"}>,
                             dense<4096, {.name = "h5"}>>;
using clock_t_ = std::chrono::steady_clock;
double ms(clock_t_::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

template <class Model>
void run(std::size_t width, std::size_t saves, std::size_t every, const std::string& dir) {
  Model model;
  model.compile({.optimizer = "adam", .loss = "mse"});
  const std::size_t batch = 256;
  array<float> x({batch, width}), y({batch, width});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 97) / 97.0f;
  for (std::size_t i = 0; i < y.size(); ++i) y.values[i] = static_cast<float>(i % 89) / 89.0f;
  model.train_on_batch(x, y);  // builds Adam's slots
  const double state_mb = 3.0 * static_cast<double>(model.count_params()) * 4 / 1e6;
  for (const bool background : {false, true}) {
    std::vector<double> blocking, writes, totals, steps;
    async_checkpointer<Model> saver(model);
    for (std::size_t s = 0; s < saves; ++s) {
      const std::string path = dir + "/ckpt-" + std::to_string(s % 2);
      const auto start = clock_t_::now();
      if (background) saver.save(path);
      else save_checkpoint(model, path);
      const auto saved = clock_t_::now();
      for (std::size_t k = 0; k < every; ++k) {
        const auto t0 = clock_t_::now();
        model.train_on_batch(x, y);
        steps.push_back(ms(clock_t_::now() - t0));
      }
      if (background) {
        saver.wait();  // what the next save would wait for first
        blocking.push_back(saver.blocking_seconds() * 1e3);
        writes.push_back(saver.write_seconds() * 1e3);
        totals.push_back(saver.total_seconds() * 1e3);
      } else {
        blocking.push_back(ms(saved - start));
        totals.push_back(ms(saved - start));
      }
    }
    if (process_id() == 0)
      std::printf("RESULT checkpoint mode=%s processes=%d state_mb=%.0f blocking_ms=%.1f "
                  "first_blocking_ms=%.1f write_ms=%.1f total_ms=%.1f step_ms=%.1f\n",
                  background ? "background" : "foreground", num_processes(), state_mb,
                  median(blocking), blocking.empty() ? 0.0 : blocking.front(), median(writes),
                  median(totals), median(steps));
  }
  // Whole saves and loads, each format.
  for (const bool h5 : {false, true}) {
    std::vector<double> save_rate, load_rate;
    for (std::size_t s = 0; s < saves; ++s) {
      const std::string path = dir + (h5 ? "/m.weights.h5" : "/sharded");
      auto t0 = clock_t_::now();
      if (h5) model.save_weights(path);
      else save_checkpoint(model, path);
      save_rate.push_back(state_mb / (ms(clock_t_::now() - t0) / 1e3));
      t0 = clock_t_::now();
      if (h5) model.load_weights(path);
      else load_checkpoint(model, path);
      load_rate.push_back(state_mb / (ms(clock_t_::now() - t0) / 1e3));
    }
    if (process_id() == 0)
      std::printf("RESULT checkpoint_io format=%s processes=%d state_mb=%.0f save_mb_per_s=%.0f "
                  "load_mb_per_s=%.0f\n",
                  h5 ? "weights_h5" : "sharded", num_processes(), state_mb, median(save_rate),
                  median(load_rate));
  }
}

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  std::size_t saves = 4, every = 5;
  bool large = false;
  std::string dir = (std::filesystem::temp_directory_path() / "tessel_checkpoint_bench").string();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--large") == 0) large = true;
    else if (i + 1 < argc && std::strcmp(argv[i], "--saves") == 0)
      saves = std::strtoul(argv[++i], nullptr, 10);
    else if (i + 1 < argc && std::strcmp(argv[i], "--every") == 0)
      every = std::strtoul(argv[++i], nullptr, 10);
    else if (i + 1 < argc && std::strcmp(argv[i], "--dir") == 0)
      dir = argv[++i];
  }
  if (large) run<large_mlp<model_parallel<large_map_t, "data">>>(4096, saves, every, dir);
  else run<mlp<model_parallel<map_t, "data">>>(2048, saves, every, dir);
  if (process_id() == 0) std::filesystem::remove_all(dir);
  return 0;
}
