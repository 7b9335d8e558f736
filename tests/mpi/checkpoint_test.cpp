// Sharded checkpoints (saving/checkpoint.hpp): a model_parallel CNN on a 2x2 mesh ("data" x
// "model": a conv2d split over its filters, the next over its input channels, batch
// normalization's moving statistics, Adam's slots split as the kernels, dropout's random stream)
// trains 6 steps and is
// saved, every process writing its own blocks; it then trains 6 more. The checkpoint restores
// onto the same model on 4x1 and 1x4 meshes and onto one device (process 0 alone): right after
// the load each predicts as the saved model did, and 6 more steps give the losses and weights of
// the run that never stopped (1e-5). Damage is an error on every process, naming the file, and
// the model is left as it was: a truncated shard, a flipped byte, a missing manifest (an
// unfinished save), another model's checkpoint. Run on 4 processes. ("row" has no bias: a bias
// right before a batch normalization has a gradient that is zero up to rounding, which Adam
// scales to full steps, so its value would be rounding noise on any mesh.)
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/saving/checkpoint.hpp>
#include <tessel/tessel.hpp>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::data_set;
using tessel::testing::make_data;
using tessel::testing::rel;
namespace fs = std::filesystem;

template <std::size_t D, std::size_t M>
using pair_map = layout_map<device_mesh<axis<"data", D>, axis<"model", M>>,
                            rule<"col/kernel", none, none, none, "model">, rule<"col/bias", "model">,
                            rule<"row/kernel", none, none, "model", none>>;
template <class Dist>
using cnn = sequential<Dist, input<8, 8, 3>,
                       conv2d<8, 3, {.padding = "same", .activation = "relu", .name = "col"}>,
                       conv2d<6, 3, {.strides = 2, .use_bias = false, .name = "row"}>,
                       batch_normalization<>, relu<>,
                       global_average_pooling2d<>, dropout<0.25>,
                       dense<4, {.activation = "softmax", .name = "head"}>>;
template <class Dist>
using other = sequential<Dist, input<8, 8, 3>, conv2d<4, 3, {.name = "col"}>,
                         global_average_pooling2d<>, dense<4, {.name = "head"}>>;

constexpr std::size_t batch = 16, steps = 6;

template <class Model>
void compile(Model& m) {
  m.compile({.optimizer = "adam", .loss = "categorical_crossentropy", .metrics = {"accuracy"}});
}
template <class Model>
std::vector<double> train(Model& m, const array<float>& x, const array<float>& y, std::size_t from) {
  std::vector<double> losses;
  for (std::size_t s = from; s < from + steps; ++s) {
    const std::size_t first = (s * batch) % (x.rows() - batch + 1);
    losses.push_back(*find_log(m.train_on_batch(data::slice_rows(x, first, first + batch),
                                                 data::slice_rows(y, first, first + batch)),
                               "loss"));
  }
  return losses;
}
double worst(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, rel(a[i], b[i]));
  return w;
}
double worst(const std::vector<array<float>>& a, const std::vector<array<float>>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, rel(a[i].values, b[i].values));
  return w;
}

// Restores the checkpoint into `m`, then compares with the saved and the continued run.
template <class Model>
void resume(const char* what, Model& m, const fs::path& dir, const array<float>& x,
            const array<float>& y, const array<float>& saved_pred,
            const std::vector<double>& later_losses, const std::vector<array<float>>& later) {
  compile(m);
  const nlohmann::json meta = load_checkpoint(m, dir);
  check(meta.value("step", 0) == static_cast<int>(steps), std::string(what) + ": metadata");
  const array<float> xt = data::slice_rows(x, 0, 32);
  const double p = rel(m.predict(xt, 16).values, saved_pred.values);
  const double l = worst(train(m, x, y, steps), later_losses);
  const double w = worst(m.get_weights(), later);
  check(p <= 1e-5, std::string(what) + ": predictions after the load " + std::to_string(p));
  check(l <= 1e-5, std::string(what) + ": losses after the load " + std::to_string(l));
  check(w <= 1e-5, std::string(what) + ": weights after 6 more steps " + std::to_string(w));
  if (process_id() == 0)
    std::printf("restored on %s: predictions %.2e, losses %.2e, weights %.2e from the run that "
                "never stopped\n", what, p, l, w);
}

// Runs `f`, which must throw on every process: a message containing `needle` where the damage
// was found (on one process at least), and on the others that it failed there.
template <class F>
void expect_error(const char* what, const std::string& needle, F&& f) {
  std::string message;
  try {
    f();
  } catch (const std::exception& e) {
    message = e.what();
  }
  const int found = message.find(needle) != std::string::npos;
  int anywhere = 0;
  MPI_Allreduce(&found, &anywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  check(found || message.find("failed on") != std::string::npos,
        std::string(what) + ": expected an error naming '" + needle + "', got '" + message + "'");
  check(anywhere > 0, std::string(what) + ": no process names '" + needle + "'");
  if (found) std::printf("%s (process %d): %s\n", what, process_id(), message.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() != 4) throw value_error("checkpoint_test runs on 4 processes");
    const data_set d = make_data(96, 8 * 8 * 3, 4);
    const array<float> x = data::reshape(d.x, {96, 8, 8, 3});
    const fs::path root = fs::temp_directory_path() / ("tessel_checkpoint_test_" +
                                                      std::to_string(getppid()));
    const fs::path dir = root / "ckpt";
    cnn<model_parallel<pair_map<2, 2>, "data">> a;
    compile(a);
    train(a, x, d.y, 0);
    const array<float> saved_pred = a.predict(data::slice_rows(x, 0, 32), 16);
    save_checkpoint(a, dir, {{"step", steps}});
    check(fs::exists(dir / "manifest.json") && !fs::exists(root / "ckpt.partial"),
          "the checkpoint is committed");
    const std::vector<double> later_losses = train(a, x, d.y, steps);
    const std::vector<array<float>> later = a.get_weights();

    { cnn<model_parallel<pair_map<2, 2>, "data">> m; resume("2x2", m, dir, x, d.y, saved_pred, later_losses, later); }
    { cnn<model_parallel<pair_map<4, 1>, "data">> m; resume("4x1", m, dir, x, d.y, saved_pred, later_losses, later); }
    { cnn<model_parallel<pair_map<1, 4>, "data">> m; resume("1x4", m, dir, x, d.y, saved_pred, later_losses, later); }
    MPI_Barrier(MPI_COMM_WORLD);
    if (process_id() == 0) {
      cnn<one_device> m;
      resume("one device", m, dir, x, d.y, saved_pred, later_losses, later);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    // Damage, each on a copy of the checkpoint; the model keeps its weights.
    cnn<model_parallel<pair_map<2, 2>, "data">> m;
    compile(m);
    const auto before = m.get_weights();
    const auto damaged = [&](const char* name, auto&& harm) {
      const fs::path copy = root / name;
      if (process_id() == 0) {
        fs::remove_all(copy);
        fs::copy(dir, copy);
        harm(copy);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      return copy;
    };
    const fs::path truncated = damaged("truncated", [](const fs::path& c) {
      fs::resize_file(c / "shard-00001.bin", fs::file_size(c / "shard-00001.bin") - 5);
    });
    expect_error("a truncated shard", "shard-00001.bin", [&] { load_checkpoint(m, truncated); });
    const fs::path flipped = damaged("flipped", [](const fs::path& c) {
      std::fstream f(c / "shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(10);
      f.put('\x5a');
    });
    expect_error("a flipped byte", "do not match their checksum", [&] { load_checkpoint(m, flipped); });
    const fs::path unfinished = damaged("unfinished", [](const fs::path& c) {
      fs::remove(c / "manifest.json");
    });
    expect_error("an unfinished save", "no manifest.json", [&] { load_checkpoint(m, unfinished); });
    {
      other<model_parallel<pair_map<2, 2>, "data">> o;
      compile(o);
      expect_error("another model", "another model", [&] { load_checkpoint(o, dir); });
    }
    check(worst(m.get_weights(), before) == 0, "a failed load leaves the model as it was");
    MPI_Barrier(MPI_COMM_WORLD);
    if (process_id() == 0) fs::remove_all(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", process_id(), e.what());
    return 1;
  }
  return tessel::testing::finish("checkpoint_test");
}
