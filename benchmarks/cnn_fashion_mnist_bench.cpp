// The seeds/002 CNN on Fashion-MNIST through fit, beside benchmarks/keras_cnn_fashion_mnist.py
// (the same model, data, batch 64, shuffled, Adam(1e-3)): seconds per epoch and the test
// accuracy. Run as `mpiexec -n 2 cnn_fashion_mnist_bench [--seed S] [--epochs N]` (data_parallel,
// batch normalization synchronized over the processes) or alone. The last line is
//
//   RESULT tessel_cnn processes=<n> seconds_per_epoch=<mean> test_accuracy=<acc>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;
using bn = batch_normalization<{.center = true, .scale = false}>;
using cnn_t = tessel::sequential<
    tessel::data_parallel<>, input<28, 28, 1>, rescaling<1.0 / 255.0>,
    conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
    conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
    conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>, bn, relu<>,
    global_average_pooling2d<>, dense<256, {.activation = "relu"}>, dropout<0.5>, dense<10>>;
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t epochs = 3;
  std::int64_t seed = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--seed") == 0) seed = std::atoll(argv[++i]);
  }
  try {
    auto [train, test] = tessel::datasets::fashion_mnist::load_data();
    const std::size_t n = train.first.shape[0], m = test.first.shape[0];
    const auto x = tessel::data::reshape(tessel::data::to_float(train.first, 1.0f), {n, 28, 28, 1});
    const auto y = tessel::data::to_int32(train.second);
    const auto xt = tessel::data::reshape(tessel::data::to_float(test.first, 1.0f), {m, 28, 28, 1});
    const auto yt = tessel::data::to_int32(test.second);
    cnn_t model;
    model.compile(tessel::optimizers::adam{.learning_rate = 1e-3},
                  tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                  {"accuracy"});
    const auto start = std::chrono::steady_clock::now();
    model.fit(tessel::from_tensor_slices(x, y).shuffle(static_cast<std::int64_t>(n), seed)
                  .batch(64)
                  .prefetch(2),
              {.epochs = epochs, .verbose = 2});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
        static_cast<double>(epochs);
    const tessel::logs r = model.evaluate(xt, yt, 64, 0);
    if (tessel::process_id() == 0)
      std::printf("RESULT tessel_cnn processes=%d seconds_per_epoch=%.2f test_accuracy=%.4f\n",
                  tessel::num_processes(), seconds, *tessel::find_log(r, "accuracy"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", tessel::process_id(), e.what());
    return 1;
  }
  return 0;
}
