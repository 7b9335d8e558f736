// The convolutional layers on the GPU (their kernel bodies through cuda_launch::for_each, their
// GEMMs through cuBLAS/cuBLASLt) train as on the host: a small CNN with every layer kind
// (conv2d valid and same with strides, max and average pooling, batch normalization, global
// average pooling), SGD with momentum. After one step every weight agrees within 1e-4 relative
// (nvcc fuses multiply-adds the host rounds twice). After 3 epochs more, the losses, each
// variable (moving statistics included) and the predictions agree within 1e-3 relative in norm:
// by then a pre-activation near zero that the fused rounding puts on the other side of a ReLU or
// of a max pool's comparison sends one element's gradient another way, which an element-wise
// bound would take for a defect.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
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
  auto require_close = [](const char* what, const std::vector<tessel::array<float>>& h,
                           const std::vector<tessel::array<float>>& d) {
    REQUIRE(h.size() == d.size());
    for (std::size_t v = 0; v < h.size(); ++v) {
      REQUIRE(h[v].size() == d[v].size());
      for (std::size_t i = 0; i < h[v].size(); ++i) {
        INFO(what << ": weight " << v << "[" << i << "]: host " << h[v].values[i] << ", cuda "
                  << d[v].values[i]);
        REQUIRE(std::fabs(h[v].values[i] - d[v].values[i]) <=
                1e-4 * std::fabs(h[v].values[i]) + 1e-5);
      }
    }
  };
  // ||a - b|| <= 1e-3 ||a|| + 1e-5, with the worst element named where it fails.
  auto require_near_in_norm = [](const std::string& what, const std::vector<float>& a,
                                 const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double diff = 0, norm = 0, worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double d = static_cast<double>(a[i]) - b[i];
      diff += d * d;
      norm += static_cast<double>(a[i]) * a[i];
      if (std::fabs(d) > worst) worst = std::fabs(d), at = i;
    }
    INFO(what << ": |host - cuda| = " << std::sqrt(diff) << ", |host| = " << std::sqrt(norm)
              << "; the largest difference at [" << at << "]: host " << a[at] << ", cuda "
              << b[at]);
    REQUIRE(std::sqrt(diff) <= 1e-3 * std::sqrt(norm) + 1e-5);
  };

  // One step on the first batch: element by element.
  tessel::array<float> x1({16, 12, 12, 2});
  std::copy_n(x.values.begin(), x1.values.size(), x1.values.begin());
  const tessel::array<std::int32_t> y1({16}, std::vector<std::int32_t>(labels.begin(),
                                                                       labels.begin() + 16));
  const double l1h = *tessel::find_log(host_model.train_on_batch(x1, y1), "loss");
  const double l1g = *tessel::find_log(gpu_model.train_on_batch(x1, y1), "loss");
  INFO("loss of the first step: host " << l1h << ", cuda " << l1g);
  REQUIRE(std::fabs(l1h - l1g) <= 1e-4 * std::fabs(l1h) + 1e-6);
  require_close("after one step", host_model.get_weights(), gpu_model.get_weights());

  // 3 epochs more: in norm.
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
    REQUIRE(std::fabs(a[e] - b[e]) <= 1e-3 * std::fabs(a[e]) + 1e-6);
  }
  const auto wh = host_model.get_weights(), wg = gpu_model.get_weights();
  REQUIRE(wh.size() == wg.size());
  for (std::size_t v = 0; v < wh.size(); ++v)
    require_near_in_norm("variable " + std::to_string(v), wh[v].values, wg[v].values);
  const auto ph = host_model.predict(x), pg = gpu_model.predict(x);
  require_near_in_norm("predictions", ph.values, pg.values);
}
