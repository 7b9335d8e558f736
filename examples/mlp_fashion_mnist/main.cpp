// seeds/001's model on Fashion-MNIST: Input(784) -> Dense(256, relu) -> Dense(256, relu) ->
// Dense(10) logits; Adam, sparse categorical crossentropy from logits, sparse categorical
// accuracy; batch 32, 2 epochs, validation on the last 10,000 training images, then evaluation
// on the test set. The Keras program it mirrors is in benchmarks/keras_mlp_fashion_mnist.py.
//
// seeds/001's tf.distribute.MirroredStrategy (tessel::mirrored_strategy<>): run alone it trains on
// one device; run as `mpiexec -n N mlp_fashion_mnist` each of the N processes (replicas) takes
// 32/N samples of every global batch of 32, and the gradients are summed across them, so the
// result is one device's.
//
//   [mpiexec -n N] mlp_fashion_mnist [--epochs N] [--verbose 0|1|2]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

namespace {

using namespace tessel::layers;
using model_t =
    tessel::sequential<tessel::mirrored_strategy<>, input<784>, dense<256, {.activation = "relu"}>,
                       dense<256, {.activation = "relu"}>, dense<10>>;

int run(int argc, char** argv) {
  std::size_t epochs = 2;
  int verbose = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--verbose") == 0) verbose = std::atoi(argv[++i]);
  }

  // x: (60000, 28, 28) uint8 -> (60000, 784) float32 / 255, as the Keras guide does in NumPy.
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto prepare = [](const tessel::array<std::uint8_t>& images) {
    return tessel::data::reshape(tessel::data::to_float(images, 1.0f / 255.0f),
                                 {images.shape[0], 784});
  };
  const tessel::array<float> x_all = prepare(train.first), x_test = prepare(test.first);
  const auto y_all = tessel::data::to_int32(train.second);
  const auto y_test = tessel::data::to_int32(test.second);
  constexpr std::size_t num_val_samples = 10000;
  const std::size_t n_train = x_all.rows() - num_val_samples;
  const auto x_train = tessel::data::slice_rows(x_all, 0, n_train);
  const auto y_train = tessel::data::slice_rows(y_all, 0, n_train);
  const auto x_val = tessel::data::slice_rows(x_all, n_train, x_all.rows());
  const auto y_val = tessel::data::slice_rows(y_all, n_train, y_all.rows());

  constexpr std::size_t batch_size = 32;
  auto train_ds = tessel::from_tensor_slices(x_train, y_train).shuffle(n_train, 1).batch(batch_size).prefetch(2);
  auto val_ds = tessel::from_tensor_slices(x_val, y_val).batch(batch_size);
  auto test_ds = tessel::from_tensor_slices(x_test, y_test).batch(batch_size);

  // seeds/001: the strategy, then the model made and compiled in its scope.
  tessel::mirrored_strategy<> strategy;
  if (tessel::process_id() == 0)
    std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());
  const auto scope = strategy.scope();
  model_t model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  if (verbose) model.summary();

  model.fit(train_ds, {.epochs = epochs, .verbose = verbose, .validation_data = val_ds});
  const tessel::logs result = model.evaluate(test_ds, verbose);
  const double accuracy = *tessel::find_log(result, "sparse_categorical_accuracy");
  if (tessel::process_id() == 0)
    std::printf("test loss: %.4f - test accuracy: %.4f (%d process%s)\n",
                *tessel::find_log(result, "loss"), accuracy, tessel::num_processes(),
                tessel::num_processes() == 1 ? "" : "es");
  return 0;
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
