// tessel's side of the Keras comparison (run both with benchmarks/compare_keras.sh): the
// seeds/001 MLP on Fashion-MNIST exactly as examples/mlp_fashion_mnist trains it, with each
// epoch timed (validation included, as Keras's epoch time includes it).
//   mlp_fashion_mnist_bench [--epochs N] [--batch B]   (B: 32, as seeds/001, by default)
// Prints: RESULT tessel seconds_per_epoch=<mean of epochs after the first> first_epoch=<s>
//         test_accuracy=<acc> steps_per_epoch=<n>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

#include "bench_common.hpp"

namespace {
using namespace tessel::layers;
using model_t = tessel::sequential<input<784>, dense<256, {.activation = "relu"}>,
                                   dense<256, {.activation = "relu"}>, dense<10>>;
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t epochs = 2;
  std::int64_t batch = 32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--batch") == 0) batch = std::strtol(argv[++i], nullptr, 10);
  }

  const bench::seed001_data d = bench::load_seed001();
  auto train_ds = tessel::from_tensor_slices(d.x_train, d.y_train)
                      .shuffle(static_cast<std::int64_t>(d.x_train.rows()), 1)
                      .batch(batch)
                      .prefetch(2);
  auto val_ds = tessel::from_tensor_slices(d.x_val, d.y_val).batch(batch);

  model_t model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  bench::epoch_timer timer;
  auto timing = timer.callback();
  model.fit(train_ds, {.epochs = epochs, .verbose = 2, .callbacks = {timing},
                       .validation_data = val_ds});
  const auto result = model.evaluate(tessel::from_tensor_slices(d.x_test, d.y_test).batch(batch), 0);
  std::printf("RESULT tessel seconds_per_epoch=%.3f first_epoch=%.3f test_accuracy=%.4f "
              "steps_per_epoch=%zu\n",
              timer.after_first(), timer.seconds[0],
              *tessel::find_log(result, "sparse_categorical_accuracy"),
              (d.x_train.rows() + 31) / 32);
}
