// seeds/000's model, trained on Fashion-MNIST with one-hot labels:
//   Input(28, 28, 1) -> Flatten -> Dense(200, relu, no bias, "d1") -> Dropout(0.4)
//   -> Dense(10, softmax, "d2"); compile(loss="mse") (Keras's default optimizer, RMSprop);
//   batch 16; 3 epochs; then the test set.
//
//   seed_000_mlp [--epochs N] [--verbose 0|1|2]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

namespace {

using namespace tessel::layers;
using model_t =
    tessel::sequential<input<28, 28, 1>, flatten<>,
                       dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                       dropout<0.4>, dense<10, {.activation = "softmax", .name = "d2"}>>;

int run(int argc, char** argv) {
  std::size_t epochs = 3;
  int verbose = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--verbose") == 0) verbose = std::atoi(argv[++i]);
  }

  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto images = [](const tessel::array<std::uint8_t>& x) {
    return tessel::data::reshape(tessel::data::to_float(x, 1.0f / 255.0f),
                                 {x.shape[0], 28, 28, 1});
  };
  auto one_hot = [](const tessel::array<std::uint8_t>& y) {
    return tessel::data::to_categorical(y, 10);
  };
  auto train_ds = tessel::from_tensor_slices(images(train.first), one_hot(train.second))
                      .shuffle(train.first.shape[0], 1)
                      .batch(16)
                      .prefetch(2);
  auto test_ds = tessel::from_tensor_slices(images(test.first), one_hot(test.second)).batch(16);

  model_t model;
  model.compile({.loss = "mse", .metrics = {"accuracy"}});
  if (verbose) model.summary();
  model.fit(train_ds, {.epochs = epochs, .verbose = verbose});
  const tessel::logs result = model.evaluate(test_ds, verbose);
  std::printf("test loss: %.4f - test accuracy: %.4f\n", *tessel::find_log(result, "loss"),
              *tessel::find_log(result, "accuracy"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
