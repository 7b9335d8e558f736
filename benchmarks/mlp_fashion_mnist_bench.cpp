// tessel's side of the Keras comparison (run both with benchmarks/compare_keras.sh): the
// seeds/001 MLP on Fashion-MNIST exactly as examples/mlp_fashion_mnist trains it, with each
// epoch timed (validation included, as Keras's epoch time includes it).
//   mlp_fashion_mnist_bench [--epochs N] [--batch B]   (B: 32, as seeds/001, by default)
// Prints: RESULT tessel seconds_per_epoch=<mean of epochs after the first> first_epoch=<s>
//         test_accuracy=<acc> steps_per_epoch=<n>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using namespace tessel::layers;
using model_t = tessel::sequential<input<784>, dense<256, {.activation = "relu"}>,
                                   dense<256, {.activation = "relu"}>, dense<10>>;
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t epochs = 2;
  std::int64_t batch = 32;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--batch") == 0) batch = std::strtol(argv[++i], nullptr, 10);
  }

  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto prepare = [](const tessel::array<std::uint8_t>& images) {
    return tessel::data::reshape(tessel::data::to_float(images, 1.0f / 255.0f),
                                 {images.shape[0], 784});
  };
  const auto x_all = prepare(train.first), x_test = prepare(test.first);
  const auto y_all = tessel::data::to_int32(train.second), y_test = tessel::data::to_int32(test.second);
  const std::size_t n_train = x_all.rows() - 10000;
  auto train_ds = tessel::from_tensor_slices(tessel::data::slice_rows(x_all, 0, n_train),
                                             tessel::data::slice_rows(y_all, 0, n_train))
                      .shuffle(n_train, 1)
                      .batch(batch)
                      .prefetch(2);
  auto val_ds = tessel::from_tensor_slices(tessel::data::slice_rows(x_all, n_train, x_all.rows()),
                                           tessel::data::slice_rows(y_all, n_train, y_all.rows()))
                    .batch(batch);

  model_t model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  std::vector<double> seconds;
  double start = 0;
  tessel::callbacks::lambda_callback timer({
      .on_epoch_begin = [&](std::size_t, const tessel::logs&) { start = now(); },
      .on_epoch_end = [&](std::size_t, const tessel::logs&) { seconds.push_back(now() - start); },
  });
  model.fit(train_ds, {.epochs = epochs, .verbose = 2, .callbacks = {timer},
                       .validation_data = val_ds});
  const auto result =
      model.evaluate(tessel::from_tensor_slices(x_test, y_test).batch(batch), 0);
  double later = 0;
  for (std::size_t i = 1; i < seconds.size(); ++i) later += seconds[i];
  const double per_epoch = seconds.size() > 1 ? later / static_cast<double>(seconds.size() - 1)
                                              : seconds[0];
  std::printf("RESULT tessel seconds_per_epoch=%.3f first_epoch=%.3f test_accuracy=%.4f "
              "steps_per_epoch=%zu\n",
              per_epoch, seconds[0], *tessel::find_log(result, "sparse_categorical_accuracy"),
              (n_train + 31) / 32);
}
