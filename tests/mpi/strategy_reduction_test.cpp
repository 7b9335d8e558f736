// tf.distribute's reductions to one process, on 1, 2 and 4 processes:
//   - mirrored_strategy with reduction_to_one_device (a reduce, then a broadcast of each gradient)
//     and central_storage_strategy (the gradients reduced to the parameter device, the update
//     there once, the variables broadcast) equal one device (compare_models.hpp: 20 steps, the
//     collectives run are the plan's; a global batch of 10 split 3, 3, 2, 2; a first step that
//     leaves some processes no rows; fit), and explain() prints their steps and where the
//     optimizer state lives;
//   - under central storage only the parameter device holds optimizer state while training, a
//     state read gives every process the one state (equal to one device's), and a checkpoint
//     saved under it restores into a mirrored model; parameter device 1; a parameter device the
//     job has not is refused;
//   - TensorFlow's custom loop (strategy.run of compute_loss_and_gradients and apply_gradients on
//     each replica's rows, the losses reduced) equals one device, from a first step that leaves
//     some replicas no rows too, and run with arrays of different shapes on different replicas
//     is refused naming both;
//   - auto_shard_policy file: each replica reads only its own files, and the custom loop over
//     them equals one device on the global batches they make together.
// Built under ASan+UBSan too (sanitize.strategy_reduction_test.np2).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"
#include "strategy_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::error_of;
using tessel::testing::has;
using tessel::testing::mlp;
using tessel::testing::rel;
using to_one = mirrored_strategy<device_mesh<axis<"batch">>, reduction_to_one_device>;

// Central storage: the optimizer state lives on the parameter device only, until a state read
// copies it to the others; that state, and a checkpoint of it, are one device's.
template <int ParameterDevice>
void central_state(const testing::data_set& d) {
  using central = central_storage_strategy<device_mesh<axis<"batch">>, ParameterDevice>;
  const std::string what = "central_storage_strategy<..., " + std::to_string(ParameterDevice) + ">";
  central strategy;
  check(strategy.num_replicas_in_sync() == num_processes() &&
            strategy.name() == "CentralStorageStrategy",
        what + ": one replica per process");
  mlp<central> a;
  mlp<one_device> b;
  a.compile({.optimizer = "adam", .loss = "mse"});
  b.compile({.optimizer = "adam", .loss = "mse"});
  a.set_weights(b.get_weights());
  for (std::size_t step = 0; step < 5; ++step) {
    const auto x = data::slice_rows(d.x, step * 16, step * 16 + 16);
    const auto y = data::slice_rows(d.y, step * 16, step * 16 + 16);
    a.train_on_batch(x, y);
    b.train_on_batch(x, y);
  }
  const bool holder = process_id() == ParameterDevice;
  check(a.get_optimizer().variables().size() == (holder ? 4u * 2u : 0u),
        what + ": only the parameter device holds optimizer slots while training (" +
            std::to_string(a.get_optimizer().variables().size()) + " here)");
  const double worst = testing::worst_optimizer_state(a.get_state_tree(), b.get_state_tree());
  check(worst <= testing::adam_weight_tolerance,
        what + ": the optimizer state read on every process is one device's (" +
            std::to_string(worst) + ")");
  // A checkpoint of it restores into a mirrored model, which then trains as one device.
  // One directory every process names alike: process 0's pid, broadcast.
  std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
  runtime::world().broadcast(std::span<std::uint64_t>(&pid, 1), 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("tessel_central_" + std::to_string(ParameterDevice) + "_" + std::to_string(pid));
  save_checkpoint(a, dir);
  mlp<mirrored_strategy<>> m;
  m.compile({.optimizer = "adam", .loss = "mse"});
  load_checkpoint(m, dir);
  const auto x = data::slice_rows(d.x, 100, 116);
  const auto y = data::slice_rows(d.y, 100, 116);
  const double lm = *find_log(m.train_on_batch(x, y), "loss");
  const double lb = *find_log(b.train_on_batch(x, y), "loss");
  const double worst_weight = testing::worst_weights(m.get_weights(), b.get_weights());
  check(rel(lm, lb) <= 1e-5 && worst_weight <= testing::adam_weight_tolerance,
        what +
            ": its checkpoint restores into a mirrored model that trains as one device "
            "(loss " +
            std::to_string(rel(lm, lb)) + ", weights " + std::to_string(worst_weight) + ")");
  // A .weights.h5 file and a .keras archive saved under it (process 0 writes them, whichever
  // process holds the state) load into a mirrored model with one device's optimizer state.
  for (const char* name : {"central.weights.h5", "central.keras"}) {
    const std::string file = (dir / name).string();
    mlp<central> again;
    again.compile({.optimizer = "adam", .loss = "mse"});
    again.set_weights(b.get_weights());
    again.train_on_batch(x, y);
    std::filesystem::path(file).extension() == ".keras" ? again.save(file)
                                                        : again.save_weights(file);
    mlp<mirrored_strategy<>> loaded;
    loaded.compile({.optimizer = "adam", .loss = "mse"});
    loaded.load_weights(file);
    mlp<one_device> reference;
    reference.compile({.optimizer = "adam", .loss = "mse"});
    reference.set_weights(b.get_weights());
    reference.train_on_batch(x, y);
    const double worst_saved =
        testing::worst_optimizer_state(loaded.get_state_tree(), reference.get_state_tree());
    check(worst_saved <= testing::adam_weight_tolerance,
          what + ": " + name + " saved under it holds one device's optimizer state (" +
              std::to_string(worst_saved) + ")");
  }
  runtime::world().barrier();
  if (process_id() == 0) std::filesystem::remove_all(dir);
}

// TensorFlow's custom loop: strategy.run of a step on each replica's rows of every global batch
// of 10 (4 processes take 3, 3, 2, 2), the per-replica losses summed by strategy.reduce, against
// one device training on the global batches.
void custom_loop(const testing::data_set& d) {
  mirrored_strategy<> strategy;
  mlp<mirrored_strategy<>> a;
  mlp<one_device> b;
  a.compile({.optimizer = "adam", .loss = "mse"});
  b.compile({.optimizer = "adam", .loss = "mse"});
  a.set_weights(b.get_weights());
  const auto x = data::slice_rows(d.x, 0, 100), y = data::slice_rows(d.y, 0, 100);
  const auto global = from_tensor_slices(x, y).batch(10);
  double worst_loss = 0;
  std::size_t steps = 0;
  for (const auto& element : strategy.experimental_distribute_dataset(global)) {
    const float per_replica = strategy.run(
        [&](const auto& batch) {
          const double loss = a.compute_loss_and_gradients(batch.first, batch.second);
          a.apply_gradients();
          return static_cast<float>(loss);
        },
        element);
    const double loss = strategy.reduce(reduce_op::sum, per_replica);
    const auto xs = data::slice_rows(x, steps * 10, steps * 10 + 10);
    const auto ys = data::slice_rows(y, steps * 10, steps * 10 + 10);
    worst_loss = std::max(worst_loss, rel(loss, *find_log(b.train_on_batch(xs, ys), "loss")));
    ++steps;
  }
  const double worst_weight = testing::worst_weights(a.get_weights(), b.get_weights());
  check(steps == 10 && worst_loss <= 1e-5 && worst_weight <= testing::adam_weight_tolerance,
        "custom loop: strategy.run of compute_loss_and_gradients and apply_gradients on each "
        "replica's rows, the losses reduced, equals one device (loss " +
            std::to_string(worst_loss) + ", weights " + std::to_string(worst_weight) + ")");
  if (process_id() == 0)
    std::printf(
        "custom loop: worst relative difference from one device: loss %.2e, weights "
        "%.2e\n",
        worst_loss, worst_weight);
  // Arguments of different shapes on different replicas: named before any step runs.
  if (num_processes() > 1) {
    const std::size_t features = process_id() == 1 ? 5 : 3;
    const array<float> odd({4, features});
    const std::string e = error_of([&] { strategy.run([](const array<float>&) {}, odd); });
    check(has(e, "strategy.run: array argument 0 has shape (batch, " + std::to_string(features) +
                     ") on this replica but (batch, ") &&
              has(e, "per-replica values must agree in every dimension but the batch"),
          "run with arguments of different shapes on different replicas: " + e);
  }
}

// The custom loop on a fresh model whose first step leaves some replicas no rows: strategy.run
// over global batches of 1 (4 samples), and of 3 (7 samples: 3, 3, 1), against one device
// training on the global batches.
void empty_replica_loop(const testing::data_set& d) {
  mirrored_strategy<> strategy;
  double worst_loss = 0, worst_weight = 0;
  for (const std::size_t batch : {std::size_t{1}, std::size_t{3}}) {
    mlp<mirrored_strategy<>> a;
    mlp<one_device> b;
    a.compile({.optimizer = "adam", .loss = "mse"});
    b.compile({.optimizer = "adam", .loss = "mse"});
    const std::size_t samples = batch == 1 ? 4 : 7;
    const auto x = data::slice_rows(d.x, 0, samples), y = data::slice_rows(d.y, 0, samples);
    std::size_t at = 0;
    for (const auto& element :
         strategy.experimental_distribute_dataset(from_tensor_slices(x, y).batch(batch))) {
      const float per_replica = strategy.run(
          [&](const auto& rows) {
            const double loss = a.compute_loss_and_gradients(rows.first, rows.second);
            a.apply_gradients();
            return static_cast<float>(loss);
          },
          element);
      const double loss = strategy.reduce(reduce_op::sum, per_replica);
      const std::size_t end = std::min(at + batch, samples);
      const auto xs = data::slice_rows(x, at, end), ys = data::slice_rows(y, at, end);
      worst_loss = std::max(worst_loss, rel(loss, *find_log(b.train_on_batch(xs, ys), "loss")));
      at = end;
    }
    check(at == samples, "empty replicas: the custom loop ran every global batch");
    worst_weight = std::max(worst_weight, testing::worst_weights(a.get_weights(), b.get_weights()));
  }
  check(worst_loss <= 1e-5 && worst_weight <= testing::adam_weight_tolerance,
        "custom loop: a first strategy.run that leaves some replicas no rows equals one device "
        "(loss " +
            std::to_string(worst_loss) + ", weights " + std::to_string(worst_weight) + ")");
  if (process_id() == 0)
    std::printf(
        "custom loop, empty replicas: worst relative difference from one device: loss %.2e, "
        "weights %.2e\n",
        worst_loss, worst_weight);
}

// auto_shard_policy file: each replica opens only its own files (every n-th of 2n) and trains on
// its part of every global batch, read from them. One device trained on the global batches the
// replicas make together (strategy.gather of their rows) ends with the same weights, and the
// replicas' rows over the pass are the data set once. Replicas whose files hold fewer batches
// end the pass for all; too few files, or files on arrays, are refused.
void file_sharded_loop(const testing::data_set& d) {
  const int n = num_processes(), me = process_id();
  const auto un = static_cast<std::size_t>(n);
  std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
  runtime::world().broadcast(std::span<std::uint64_t>(&pid, 1), 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessel_files_" + std::to_string(pid));
  // File k: samples 10k .. 10k + rows - 1 of d, each 12 floats of x then 4 of y.
  const auto write = [&](const std::string& name, std::size_t first, std::size_t rows) {
    const std::filesystem::path path = dir / name;
    if (me == 0) {
      std::filesystem::create_directories(dir);
      std::FILE* f = std::fopen(path.c_str(), "wb");
      for (std::size_t r = first; r < first + rows; ++r) {
        std::fwrite(d.x.row(r).data(), sizeof(float), 12, f);
        std::fwrite(d.y.row(r).data(), sizeof(float), 4, f);
      }
      std::fclose(f);
    }
    return path;
  };
  auto opened = std::make_shared<std::vector<std::string>>();
  const auto reader = [opened](const std::filesystem::path& p) {
    opened->push_back(p.filename().string());
    const std::size_t rows = std::filesystem::file_size(p) / (16 * sizeof(float));
    array<float> x({rows, 12}), y({rows, 4});
    std::FILE* f = std::fopen(p.c_str(), "rb");
    for (std::size_t r = 0; r < rows; ++r)
      if (std::fread(x.row(r).data(), sizeof(float), 12, f) != 12 ||
          std::fread(y.row(r).data(), sizeof(float), 4, f) != 4)
        throw std::runtime_error("short read");
    std::fclose(f);
    return std::pair{std::move(x), std::move(y)};
  };
  std::vector<std::filesystem::path> files, uneven_files;
  for (std::size_t k = 0; k < 2 * un; ++k) {
    files.push_back(write("part-" + std::to_string(k), 10 * k, 10));
    uneven_files.push_back(write("short-" + std::to_string(k), 10 * k, k % un == un - 1 ? 5 : 10));
  }
  runtime::world().barrier();

  mirrored_strategy<> strategy;
  mlp<mirrored_strategy<>> a;
  mlp<one_device> b;
  a.compile({.optimizer = "adam", .loss = "mse"});
  b.compile({.optimizer = "adam", .loss = "mse"});
  a.set_weights(b.get_weights());
  const auto global = dataset<float, float>::from_files(files, reader).batch(4 * n);
  const auto dist = strategy.experimental_distribute_dataset(
      global, {.auto_shard_policy = auto_shard_policy::file});
  std::size_t steps = 0;
  bool per_replica_batch = true;
  std::vector<float> seen;
  for (const auto& element : dist) {
    per_replica_batch = per_replica_batch && element.first.shape[0] == 4;
    const array<float> gx = strategy.gather(element.first), gy = strategy.gather(element.second);
    for (std::size_t r = 0; r < gx.rows(); ++r) seen.push_back(gx.row(r)[0]);
    strategy.run(
        [&](const auto& batch) {
          (void)a.compute_loss_and_gradients(batch.first, batch.second);
          a.apply_gradients();
        },
        element);
    b.train_on_batch(gx, gy);
    ++steps;
  }
  bool own_files = opened->size() == 2;
  for (const std::string& f : *opened)
    own_files = own_files && std::stoul(f.substr(5)) % un == static_cast<std::size_t>(me);
  std::vector<float> all;
  for (std::size_t r = 0; r < 20 * un; ++r) all.push_back(d.x.row(r)[0]);
  std::sort(seen.begin(), seen.end());
  std::sort(all.begin(), all.end());
  const double worst_weight = testing::worst_weights(a.get_weights(), b.get_weights());
  check(dist.sharded_by_file() && own_files && per_replica_batch && steps == 5 && seen == all,
        "auto_shard_policy file: each replica opens only its 2 files and takes batches of 4 "
        "from them, together the data set once (" +
            std::to_string(opened->size()) + " files opened, " + std::to_string(steps) + " steps)");
  check(worst_weight <= testing::adam_weight_tolerance,
        "auto_shard_policy file: training on each replica's files equals one device on the "
        "gathered global batches (weights " +
            std::to_string(worst_weight) + ")");
  if (me == 0)
    std::printf("auto_shard_policy file: %zu steps, worst relative weight difference %.2e\n", steps,
                worst_weight);

  // auto: by file when every replica has a file, else by data.
  check(strategy.experimental_distribute_dataset(global).sharded_by_file(),
        "auto_shard_policy auto on a dataset of 2 files per replica shards by file");
  const auto one_file = dataset<float, float>::from_files({files[0]}, reader).batch(4 * n);
  check(strategy.experimental_distribute_dataset(one_file).sharded_by_file() == (n == 1),
        "auto_shard_policy auto on a dataset of 1 file shards by data on more replicas");
  if (n > 1) {
    const std::string e = error_of([&] {
      (void)strategy.experimental_distribute_dataset(
          one_file, {.auto_shard_policy = auto_shard_policy::file});
    });
    check(has(e, "the dataset reads 1 files, fewer than the " + std::to_string(n) + " replicas"),
          "auto_shard_policy file with fewer files than replicas: " + e);
    // The last replica's files hold 3 batches, the others' 5: every replica ends after 3.
    std::size_t batches = 0;
    for (const auto& element : strategy.experimental_distribute_dataset(
             dataset<float, float>::from_files(uneven_files, reader).batch(4 * n))) {
      (void)element;
      ++batches;
    }
    check(batches == 3, "replicas whose files hold more batches end with the one with fewest (" +
                            std::to_string(batches) + " batches)");
  }
  runtime::world().barrier();
  if (me == 0) std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const testing::data_set d = testing::make_data(512, 12, 4);
    empty_replica_loop(d);
    testing::empty_replicas<to_one>("mirrored_strategy, reduction_to_one_device", d);
    testing::empty_replicas<central_storage_strategy<>>("central_storage_strategy", d);
    testing::compare<mlp<to_one>, mlp<one_device>>("mirrored_strategy, reduction_to_one_device",
                                                   d.x, d.y, "adam", "categorical_crossentropy");
    testing::uneven<to_one>("mirrored_strategy, reduction_to_one_device", d);
    testing::compare<mlp<central_storage_strategy<>>, mlp<one_device>>(
        "central_storage_strategy", d.x, d.y, "adam", "categorical_crossentropy");
    testing::compare<mlp<central_storage_strategy<>>, mlp<one_device>>(
        "central_storage_strategy (sgd)", d.x, d.y, "sgd");
    testing::uneven<central_storage_strategy<>>("central_storage_strategy", d);
    testing::fit_equal<to_one>("mirrored_strategy, reduction_to_one_device", d);
    testing::fit_equal<central_storage_strategy<>>("central_storage_strategy", d);
    central_state<0>(d);
    if (num_processes() > 1) central_state<1>(d);
    {
      mlp<central_storage_strategy<>> c;
      c.compile({.optimizer = "adam", .loss = "mse"});
      const std::string text = c.explain(16);
      check(
          num_processes() == 1
              ? has(text, "optimizer state ") && has(text, "(adam, 2 slots per trainable variable)")
              : has(text, "reduce('batch', to 0)") && has(text, "broadcast('batch', from 0)") &&
                    has(text,
                        "on process 0, which holds the variables (central storage), 0 B "
                        "on the others"),
          "central storage's explain(): its reduce and broadcast, and where the optimizer "
          "state lives:\n" +
              text);
      if (process_id() == 0) std::printf("%s", text.c_str());
    }
    const std::string e =
        error_of([] { central_storage_strategy<device_mesh<axis<"batch">>, 4> s; });
    if (num_processes() <= 4)
      check(has(e, "central_storage_strategy: the parameter device is process 4, but the job has " +
                       std::to_string(num_processes()) + " processes; launch at least 5"),
            "a parameter device the job has not: " + e);
    custom_loop(d);
    file_sharded_loop(d);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return testing::finish("strategy_reduction_test");
}
