// The convolutional layers on the GPU (their kernel bodies through cuda_launch::for_each, their
// GEMMs through cuBLAS/cuBLASLt) train as on the host: a small CNN with every layer kind
// (conv2d valid and same with strides, max and average pooling, batch normalization, global
// average pooling), SGD with momentum for 3 epochs: losses, weights (moving statistics included)
// and predictions within 1e-4 relative (nvcc fuses multiply-adds the host rounds twice).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <tessel/backend/cuda.hpp>
#include <tessel/tessel.hpp>
#include <vector>

TEST_CASE("cuda: a CNN with every convolutional layer trains on the GPU as on the host",
          "[gpu]") {
  using namespace tessel::layers;
  using H = tessel::backend::host;
  using D = tessel::backend::cuda;
  auto make = []<class Backend>(std::type_identity<Backend>) {
    return tessel::basic_sequential<
        Backend, tessel::one_device, input<12, 12, 2>,
        conv2d<6, 3, {.padding = "same", .use_bias = false}>, batch_normalization<>, relu<>,
        max_pooling2d<2>, conv2d<8, {2, 3}, {.strides = {1, 2}, .activation = "relu"}>,
        average_pooling2d<2, {.strides = 1, .padding = "same"}>,
        batch_normalization<{.center = true, .scale = false}>, global_average_pooling2d<>,
        dense<4>>();
  };
  auto host_model = make(std::type_identity<H>{});
  auto gpu_model = make(std::type_identity<D>{});
  gpu_model.set_weights(host_model.get_weights());
  host_model.compile(tessel::optimizers::sgd{.learning_rate = 0.05, .momentum = 0.9},
                     tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  gpu_model.compile(tessel::optimizers::sgd{.learning_rate = 0.05, .momentum = 0.9},
                    tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  tessel::array<float> x({64, 12, 12, 2});
  for (auto& v : x.values) v = u(g);
  std::vector<std::int32_t> labels(64);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 4);
  const tessel::array<std::int32_t> y({64}, labels);
  const auto hh = host_model.fit(x, y, {.batch_size = 16, .epochs = 3, .verbose = 0,
                                        .shuffle = false});
  const auto hg = gpu_model.fit(x, y, {.batch_size = 16, .epochs = 3, .verbose = 0,
                                       .shuffle = false});
  const auto& a = hh.history.at("loss");
  const auto& b = hg.history.at("loss");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (std::size_t e = 0; e < a.size(); ++e) {
    INFO("loss epoch " << e << ": host " << a[e] << ", cuda " << b[e]);
    REQUIRE(std::fabs(a[e] - b[e]) <= 1e-4 * std::fabs(a[e]) + 1e-6);
  }
  const auto wh = host_model.get_weights(), wg = gpu_model.get_weights();
  REQUIRE(wh.size() == wg.size());
  for (std::size_t v = 0; v < wh.size(); ++v)
    for (std::size_t i = 0; i < wh[v].size(); ++i) {
      INFO("weight " << v << "[" << i << "]: host " << wh[v].values[i] << ", cuda "
                     << wg[v].values[i]);
      REQUIRE(std::fabs(wh[v].values[i] - wg[v].values[i]) <=
              1e-4 * std::fabs(wh[v].values[i]) + 1e-5);
    }
  const auto ph = host_model.predict(x), pg = gpu_model.predict(x);
  REQUIRE(ph.values.size() == pg.values.size());
  for (std::size_t i = 0; i < ph.values.size(); ++i) {
    INFO("prediction " << i << ": host " << ph.values[i] << ", cuda " << pg.values[i]);
    REQUIRE(std::fabs(ph.values[i] - pg.values[i]) <= 1e-4 * std::fabs(ph.values[i]) + 1e-5);
  }
}
