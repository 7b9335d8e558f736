// tf.distribute's synchronous strategies (strategy/strategy.hpp), on 1, 2 and 4 processes:
//   - models under mirrored_strategy<> and multi_worker_mirrored_strategy<> equal one device
//     (compare_models.hpp: 20 steps, losses, weights, predictions, evaluate, and the collectives
//     run are the plan's), and again with a global batch of 10 that 4 processes split 3, 3, 2, 2,
//     and with a first step that leaves some processes no rows (1 row, 3 rows on 4);
//     one_device_strategy's model trains alone on each process, bit for bit as one_device;
//   - the strategy object's members as TensorFlow's: num_replicas_in_sync, scope and
//     get_strategy, run with and without a replica context, reduce (sum, mean), gather,
//     experimental_local_results, experimental_distribute_dataset (each replica's rows of every
//     global batch, together the whole batch), distribute_datasets_from_function's input_context,
//     compute_average_loss, Keras 3's names, and the errors (a global batch the replicas do not
//     divide, values of different sizes to reduce);
//   - a TensorFlow-style loop of run / compute_average_loss / reduce over a distributed dataset
//     gives the global batch's mean loss, as one process computes it;
//   - TF_CONFIG read by multi_worker_mirrored_strategy, and refused where it disagrees with the
//     launcher (another process's index, more workers than processes), naming both;
//   - fit of both equals one device (losses, weights, optimizer state); multi_gpu_model<2>;
//     communication_options.
// The reductions to one device, central storage and the custom loop: strategy_reduction_test.cpp.
#include <unistd.h>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <tessel/tessel.hpp>
#include <type_traits>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"
#include "strategy_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::error_of;
using tessel::testing::fit_equal;
using tessel::testing::has;
using tessel::testing::mlp;
using tessel::testing::rel;
using tessel::testing::uneven;

void strategy_object() {
  const int n = num_processes(), me = process_id();
  mirrored_strategy<> strategy;
  check(strategy.num_replicas_in_sync() == n, "num_replicas_in_sync is the processes");
  check(strategy.name() == "MirroredStrategy", "the name is TensorFlow's");
  check(strategy.num_processes() == n && strategy.num_model_replicas() == n &&
            strategy.num_data_shards() == n && strategy.data_shard_id() == me &&
            strategy.auto_shard_dataset,
        "Keras 3's names on the strategy");

  // scope and get_strategy.
  check(get_strategy().num_replicas_in_sync() == 1 &&
            get_strategy().name() == "_DefaultDistributionStrategy",
        "outside any scope, get_strategy() is the default strategy");
  {
    const auto scope = strategy.scope();
    check(&get_strategy() == &strategy, "inside strategy.scope(), get_strategy() is the strategy");
  }
  check(&get_strategy() != &strategy, "the scope ends with its guard");

  // run, with and without a replica context; reduce.
  const int id =
      strategy.run([](const replica_context& ctx) { return ctx.replica_id_in_sync_group(); });
  check(id == me, "run: the replica id is the process");
  const float doubled = strategy.run([](float v) { return 2 * v; }, 1.5f);
  check(doubled == 3.0f, "run: fn(args...) without a context");
  const float total = strategy.run([&](const replica_context& ctx) {
    return ctx.all_reduce(reduce_op::sum, static_cast<float>(ctx.replica_id_in_sync_group() + 1));
  });
  check(total == static_cast<float>(n * (n + 1) / 2), "replica_context.all_reduce sums");
  check(strategy.reduce(reduce_op::sum, static_cast<double>(me)) == n * (n - 1) / 2.0,
        "reduce(sum)");
  check(strategy.reduce(reduce_op::mean, static_cast<double>(me)) == (n - 1) / 2.0, "reduce(mean)");
  const std::vector<float> v = strategy.reduce(reduce_op::mean, std::vector<float>{1.0f, 2.0f});
  check(v == std::vector<float>{1.0f, 2.0f}, "reduce(mean) of equal vectors");
  const auto results = strategy.experimental_local_results(7);
  check(results.size() == 1 && results[0] == 7, "experimental_local_results: one replica here");
  if (n > 1) {
    const std::string e = error_of([&] {
      (void)strategy.reduce(reduce_op::sum, std::vector<float>(static_cast<std::size_t>(me + 1)));
    });
    check(has(e, "strategy.reduce: the replicas hold values of different sizes") &&
              has(e, "reduce values of one shape"),
          "reduce of different sizes is an error on every process: " + e);
  }

  // experimental_distribute_dataset: each replica's rows of every global batch of 10; gathered,
  // the whole batch.
  array<float> x({25, 3}), y({25, 1});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i);
  for (std::size_t i = 0; i < y.size(); ++i) y.values[i] = static_cast<float>(i);
  const auto global = from_tensor_slices(x, y).batch(10);
  const auto dist = strategy.experimental_distribute_dataset(global);
  std::size_t batches = 0;
  bool whole = true;
  auto g = global.begin();
  for (auto it = dist.begin(); it != dist.end(); ++it, ++g) {
    const auto& [xs, ys] = *it;
    const std::size_t rows = (*g).first.shape[0];
    const auto replicas = static_cast<std::size_t>(n);
    const std::size_t expected =
        rows / replicas + (static_cast<std::size_t>(me) < rows % replicas ? 1 : 0);
    whole = whole && xs.shape[0] == expected && ys.shape[0] == expected;
    const array<float> gathered = strategy.gather(xs);
    whole = whole && gathered.shape == (*g).first.shape && gathered.values == (*g).first.values;
    ++batches;
  }
  check(batches == 3 && whole,
        "experimental_distribute_dataset: each replica's rows, together every global batch");
  const input_context ctx =
      strategy.distribute_datasets_from_function([](const input_context& c) { return c; });
  // Keras 3's auto_shard_dataset false, and TF's auto_shard_policy off: the dataset is this
  // replica's own, not split; data splits it as auto does; file is refused on arrays.
  {
    mirrored_strategy<> own;
    own.auto_shard_dataset = false;
    const auto rows_of = [](const auto& distributed) {
      std::size_t rows = 0;
      for (const auto& [xs, ys] : distributed) rows += xs.shape[0];
      return rows;
    };
    check(rows_of(own.experimental_distribute_dataset(global)) == 25 &&
              rows_of(strategy.experimental_distribute_dataset(
                  global, {.auto_shard_policy = auto_shard_policy::off})) == 25,
          "auto_shard_dataset false, auto_shard_policy off: each replica iterates the whole "
          "dataset");
    const std::size_t mine = rows_of(strategy.experimental_distribute_dataset(global));
    check(rows_of(strategy.experimental_distribute_dataset(
              global, {.auto_shard_policy = auto_shard_policy::data})) == mine &&
              strategy.reduce(reduce_op::sum, static_cast<double>(mine)) == 25.0,
          "auto_shard_policy data: the replicas' rows together, the dataset once");
    const std::string e = error_of([&] {
      (void)strategy.experimental_distribute_dataset(
          global, {.auto_shard_policy = auto_shard_policy::file});
    });
    check(has(e,
              "auto_shard_policy file shards a dataset by the files it reads, and this "
              "dataset reads none"),
          "auto_shard_policy file on a dataset of arrays: " + e);
  }
  check(get_device_count() == n && get_device_count("cpu") == n,
        "get_device_count: one device per process");
  check(num_model_replicas<data_parallel<>>() == n && num_data_shards<data_parallel<>>() == n &&
            data_shard_id<data_parallel<>>() == me && num_model_replicas<one_device>() == 1 &&
            data_shard_id<one_device>() == 0,
        "num_model_replicas, num_data_shards, data_shard_id of data_parallel and one_device");
  if (n == 4) {
    // model_parallel on 2 (data) x 2 (model): 2 replicas, processes 0, 1 read shard 0.
    using mesh_2x2 = device_mesh<axis<"data", 2>, axis<"model", 2>>;
    using mp = model_parallel<layout_map<mesh_2x2, rule<"d1/kernel", none, "model">>, "data">;
    check(num_model_replicas<mp>() == 2 && data_shard_id<mp>() == me / 2,
          "model_parallel's num_model_replicas is its batch axis, data_shard_id as Keras's");
  }
  check(
      ctx.num_input_pipelines == n && ctx.input_pipeline_id == me && ctx.num_replicas_in_sync == n,
      "distribute_datasets_from_function: the input_context");
  check(ctx.get_per_replica_batch_size(8 * static_cast<std::size_t>(n)) == 8,
        "get_per_replica_batch_size");
  {
    const std::string e = error_of([&] { (void)ctx.get_per_replica_batch_size(0); });
    check(has(e, "a per-replica batch of 0; give a global batch of at least " + std::to_string(n)),
          "a per-replica batch of 0: " + e);
  }
  if (n > 1) {
    const std::string e = error_of([&] { (void)ctx.get_per_replica_batch_size(9 * 4 + 1); });
    check(has(e, "The `global_batch_size` 37 is not divisible by `num_replicas_in_sync`"),
          "a global batch the replicas do not divide: " + e);
  }

  // A TensorFlow-style loop: each replica's per-example losses over the global batch size,
  // summed over the replicas, is the global batch's mean loss.
  double distributed = 0, single = 0;
  for (const auto& [xs, ys] : dist) {
    const float loss = strategy.run(
        [&](const array<float>& a, const array<float>& b) {
          std::vector<float> per_example;
          for (std::size_t r = 0; r < a.shape[0]; ++r)
            per_example.push_back(std::pow(a.values[r * 3] * 0.01f - b.values[r], 2.0f));
          return strategy.compute_average_loss(per_example, 10);
        },
        xs, ys);
    distributed += strategy.reduce(reduce_op::sum, loss);
  }
  for (std::size_t r = 0; r < 25; ++r)
    single += std::pow(x.values[r * 3] * 0.01f - y.values[r], 2.0f) / 10.0;
  check(rel(distributed, single) <= 1e-5,
        "run / compute_average_loss / reduce: the global mean loss (" +
            std::to_string(distributed) + " against " + std::to_string(single) + ")");
  check(strategy.compute_average_loss(std::vector<float>{2.0f, 4.0f}) ==
            6.0f / static_cast<float>(2 * n),
        "compute_average_loss without a global batch size: this replica's examples times the "
        "replicas");
}

// TF_CONFIG read by multi_worker_mirrored_strategy and checked against the launcher.
std::string tf_config(int workers, int index) {
  std::string list;
  for (int i = 0; i < workers; ++i)
    list += (i == 0 ? "\"" : ", \"") + ("localhost:" + std::to_string(20000 + i)) + "\"";
  return "{\"cluster\": {\"worker\": [" + list + "]}, \"task\": {\"type\": \"worker\", " +
         "\"index\": " + std::to_string(index) + "}}";
}
void tf_config_checked() {
  const int n = num_processes(), me = process_id();
  ::setenv("TF_CONFIG", tf_config(n, me).c_str(), 1);
  {
    multi_worker_mirrored_strategy<> s;
    check(s.cluster && s.cluster->num_workers() == n && s.cluster->task_id() == me &&
              s.cluster->worker[static_cast<std::size_t>(me)] ==
                  "localhost:" + std::to_string(20000 + me),
          "TF_CONFIG: the cluster and this process's task, read");
  }
  if (n > 1) {
    const int other = (me + 1) % n;
    ::setenv("TF_CONFIG", tf_config(n, other).c_str(), 1);
    const std::string e = error_of([] { multi_worker_mirrored_strategy<> s; });
    check(has(e, "TF_CONFIG says this process is worker " + std::to_string(other)) &&
              has(e, "the MPI launcher made it process " + std::to_string(me)),
          "TF_CONFIG with another process's index names both views: " + e);
  }
  ::setenv("TF_CONFIG", tf_config(n + 1, me).c_str(), 1);
  const std::string e = error_of([] { multi_worker_mirrored_strategy<> s; });
  check(has(e, "TF_CONFIG lists " + std::to_string(n + 1) + " workers") &&
            has(e, "the MPI launcher started " + std::to_string(n) + " processes"),
        "TF_CONFIG with more workers than processes names both counts: " + e);
  ::unsetenv("TF_CONFIG");
}

// Keras 2's multi_gpu_model: the model's layers under mirrored_strategy of that many processes,
// its weights copied in; on another process count, the mesh's error.
void multi_gpu(const testing::data_set& d) {
  mlp<one_device> model, single;
  single.set_weights(model.get_weights());
  if (num_processes() != 2) {
    const std::string e = error_of([&] { (void)multi_gpu_model<2>(model); });
    check(has(e, "has 2 devices but the job has " + std::to_string(num_processes())) &&
              has(e, "launch with `mpiexec -n 2`"),
          "multi_gpu_model<2> on another process count: " + e);
    return;
  }
  auto parallel = multi_gpu_model<2>(model);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(*parallel)>,
                               mlp<mirrored_strategy<device_mesh<axis<"batch", 2>>>>>);
  parallel->compile({.optimizer = "rmsprop", .loss = "mse"});
  single.compile({.optimizer = "rmsprop", .loss = "mse"});
  double worst = 0;
  for (std::size_t step = 0; step < 10; ++step) {
    const auto x = data::slice_rows(d.x, step * 16, step * 16 + 16);
    const auto y = data::slice_rows(d.y, step * 16, step * 16 + 16);
    worst = std::max(worst, rel(*find_log(parallel->train_on_batch(x, y), "loss"),
                                *find_log(single.train_on_batch(x, y), "loss")));
  }
  worst = std::max(worst, testing::worst_weights(parallel->get_weights(), single.get_weights()));
  check(worst <= 1e-5, "multi_gpu_model<2> trains as one device (" + std::to_string(worst) + ")");
}

// communication_options: bytes_per_pack sizes the gradient buckets of a model compiled in the
// strategy's scope; timeout_seconds is the collective timeout; the implementation is printed.
void communication(const testing::data_set& d) {
  multi_worker_mirrored_strategy<> strategy({.bytes_per_pack = 300,
                                             .timeout_seconds = 120.0,
                                             .implementation = communication_implementation::ring});
  mlp<multi_worker_mirrored_strategy<>> a;
  {
    const auto scope = strategy.scope();
    a.compile({.optimizer = "sgd", .loss = "mse"});
  }
  mlp<multi_worker_mirrored_strategy<>> outside;
  outside.compile({.optimizer = "sgd", .loss = "mse"});
  check(a.get_gradient_options().bucket_cap_mb == 0.0003 &&
            outside.get_gradient_options().bucket_cap_mb == 25.0,
        "communication_options.bytes_per_pack: the buckets of a model compiled in the scope");
  a.train_on_batch(data::slice_rows(d.x, 0, 16), data::slice_rows(d.y, 0, 16));
  if (num_processes() > 1)
    check(a.gradient_bucket_count() > outside.gradient_bucket_count(),
          "communication_options.bytes_per_pack: smaller packs, more buckets (" +
              std::to_string(a.gradient_bucket_count()) + ")");
  const std::string e =
      error_of([] { multi_worker_mirrored_strategy<> s({.timeout_seconds = -1.0}); });
  check(has(e, "timeout_seconds must be a positive number of seconds"),
        "communication_options: a negative timeout: " + e);
  set_collective_timeout(std::chrono::duration<double>(600.0));
}

void one_device_strategy_trains_alone(const testing::data_set& d) {
  one_device_strategy strategy;
  check(strategy.num_replicas_in_sync() == 1 && strategy.replica_id() == 0,
        "one_device_strategy: one replica");
  mlp<one_device_strategy> a;
  mlp<one_device> b;
  a.compile({.optimizer = "adam", .loss = "mse"});
  b.compile({.optimizer = "adam", .loss = "mse"});
  a.set_weights(b.get_weights());
  // Each process its own data: nothing is communicated.
  const std::size_t first = static_cast<std::size_t>(process_id()) * 8;
  const auto x = data::slice_rows(d.x, first, first + 8);
  const auto y = data::slice_rows(d.y, first, first + 8);
  for (int step = 0; step < 5; ++step) {
    a.train_on_batch(x, y);
    b.train_on_batch(x, y);
  }
  check(a.get_weights() == b.get_weights(),
        "one_device_strategy trains as one_device, bit for bit, on each process's own data");
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const testing::data_set d = testing::make_data(512, 12, 4);
    testing::empty_replicas<mirrored_strategy<>>("mirrored_strategy", d);
    testing::empty_replicas<multi_worker_mirrored_strategy<>>("multi_worker_mirrored_strategy", d);
    testing::compare<mlp<mirrored_strategy<>>, mlp<one_device>>("mirrored_strategy", d.x, d.y);
    testing::compare<mlp<multi_worker_mirrored_strategy<>>, mlp<one_device>>(
        "multi_worker_mirrored_strategy", d.x, d.y, "adam", "categorical_crossentropy");
    uneven<mirrored_strategy<>>("mirrored_strategy", d);
    uneven<multi_worker_mirrored_strategy<>>("multi_worker_mirrored_strategy", d);
    fit_equal<mirrored_strategy<>>("mirrored_strategy", d);
    fit_equal<multi_worker_mirrored_strategy<>>("multi_worker_mirrored_strategy", d);
    multi_gpu(d);
    communication(d);
    one_device_strategy_trains_alone(d);
    strategy_object();
    tf_config_checked();
    multi_worker_mirrored_strategy<> workers;
    check(workers.num_replicas_in_sync() == num_processes() &&
              workers.name() == "MultiWorkerMirroredStrategy",
          "multi_worker_mirrored_strategy: one replica per worker process");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return testing::finish("strategy_test");
}
