// seeds/001's model on Fashion-MNIST, trained asynchronously with parameter servers
// (TensorFlow's ParameterServerStrategy, seeds/003): the ps tasks hold the variables, the
// workers train on their own batches without waiting for each other, the chief hands out the
// batches (each exactly once), validates after each epoch and evaluates on the test set.
//
// Every task runs this program; TF_CONFIG gives its role. A local cluster:
//
//   scripts/ps_cluster.sh --workers 2 --ps 2 build/examples/parameter_server [--epochs N]
//       [--kill-worker-at B] [--backup DIR]
//
// --kill-worker-at B: worker 1 kills itself (SIGKILL) after its B-th batch, the first time it
// runs (with ps_cluster.sh --respawn it starts again and rejoins). --backup DIR: fit's
// backup_dir (BackupAndRestore).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tessel/ps.hpp>
#include <tessel/tessel.hpp>

namespace {

using namespace tessel::layers;
using model_t =
    tessel::sequential<tessel::one_device, input<784>, dense<256, {.activation = "relu"}>,
                       dense<256, {.activation = "relu"}>, dense<10>>;
using dataset_t = tessel::dataset<float, std::int32_t>;

struct data_sets {
  dataset_t train, val, test;
};
// x / 255 as (n, 784) floats; the last 10,000 training images for validation, as seeds/001.
data_sets load() {
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto prepare = [](const tessel::array<std::uint8_t>& images) {
    return tessel::data::reshape(tessel::data::to_float(images, 1.0f / 255.0f),
                                 {images.shape[0], 784});
  };
  const tessel::array<float> x_all = prepare(train.first), x_test = prepare(test.first);
  const auto y_all = tessel::data::to_int32(train.second);
  const std::size_t n = x_all.rows() - 10000;
  using tessel::data::slice_rows;
  return {tessel::from_tensor_slices(slice_rows(x_all, 0, n), slice_rows(y_all, 0, n))
              .shuffle(n, 1)
              .batch(32),
          tessel::from_tensor_slices(slice_rows(x_all, n, x_all.rows()),
                                     slice_rows(y_all, n, y_all.rows()))
              .batch(256),
          tessel::from_tensor_slices(x_test, tessel::data::to_int32(test.second)).batch(256)};
}

int run(int argc, char** argv) {
  std::size_t epochs = 2;
  long kill_at = 0;
  std::string backup;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0)
      epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--kill-worker-at") == 0)
      kill_at = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--backup") == 0)
      backup = argv[++i];
  }

  tessel::ps::parameter_server_strategy strategy(
      {.variable_partitioner = tessel::ps::min_size_partitioner{.max_shards = 2}});
  model_t model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {"sparse_categorical_accuracy"});
  tessel::ps::cluster_coordinator<model_t, dataset_t> coord(strategy, model);
  coord.create_per_worker_dataset([] { return load().train; });

  if (!strategy.is_chief()) {
    const char* again = std::getenv("TESSEL_RESTARTED");
    if (kill_at > 0 && strategy.task_type() == tessel::ps::role::worker &&
        strategy.task_index() == 1 && !(again && std::strcmp(again, "1") == 0)) {
      auto count = std::make_shared<long>(0);
      tessel::ps::worker_callbacks callbacks;
      callbacks.on_train_batch_end = [count, kill_at](std::uint64_t) {
        if (++*count == kill_at) ::raise(SIGKILL);
      };
      coord.set_worker_callbacks(callbacks);
    }
    return coord.serve();
  }

  std::printf("%s", coord.explain().c_str());
  const data_sets d = load();
  // The steps of an epoch from the chief's own copy of the training set (without them fit would
  // build the workers' dataset once more to count its batches).
  tessel::ps::ps_fit_options<dataset_t> options{
      .epochs = epochs, .steps_per_epoch = *d.train.cardinality(), .validation_data = d.val};
  if (!backup.empty()) options.backup_dir = backup;
  const auto history = coord.fit(options);
  const auto result = model.evaluate(d.test, 0);
  std::printf("test loss: %.4f - test accuracy: %.4f\n", *tessel::find_log(result, "loss"),
              *tessel::find_log(result, "sparse_categorical_accuracy"));

  // Every batch of every epoch trained exactly once, lost workers or not.
  const auto& s = coord.stats();
  auto trained = s.trained;
  std::sort(trained.begin(), trained.end());
  bool once = true;
  for (std::size_t i = 0; i < trained.size(); ++i) once = once && trained[i] == i;
  std::printf("batches trained: %zu (%s); workers lost %zu, rejoined %zu, batches reassigned %zu\n",
              trained.size(), once ? "each once" : "NOT each once", s.workers_lost,
              s.workers_rejoined, s.batches_reassigned);
  double staleness = 0;
  for (const double v : history.history.at("staleness")) staleness += v;
  std::printf("mean staleness per epoch: %.2f\n",
              staleness / static_cast<double>(history.history.at("staleness").size()));
  coord.shutdown();
  return once ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
