// The planner's fixed arrays hold every model of at most TESSEL_MAX_OPS layers: thirteen conv2d +
// batch_normalization pairs (78 variables, more than twice the layers) plan, build and train,
// their plan computed when the program runs (data_parallel's batch axis is sized then). The
// planner's bounds themselves: tests/static/model_plan_static.cpp.
#include <catch2/catch.hpp>

#include <cmath>

#include "model_test_helpers.hpp"

namespace {
// input, (conv2d, batch_normalization) x N, flatten, dense
template <std::size_t N, class... Layers>
struct pairs : pairs<N - 1, Layers..., conv2d<2, 3, {.padding = "same"}>, batch_normalization<>> {};
template <class... Layers>
struct pairs<0, Layers...> {
  using model = tessel::sequential<tessel::data_parallel<>, input<4, 4, 2>, Layers..., flatten<>,
                                   dense<3>>;
};
}  // namespace

TEST_CASE("planner: thirteen conv2d + batch_normalization pairs (78 variables) train",
          "[planner][convolution]") {
  typename pairs<13>::model model;
  REQUIRE(model.variables().size() == 13 * 6 + 2);
  CHECK(model.variables()[77]->path == "batch_normalization_12/moving_variance");
  CHECK(model.get_weights().size() == 80);
  model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<float> xs(8 * 32);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7) % 11) / 11.0f;
  const tessel::array<float> x({8, 4, 4, 2}, xs);
  const tessel::array<std::int32_t> y({8}, {0, 1, 2, 0, 1, 2, 0, 1});
  const double first = *tessel::find_log(model.train_on_batch(x, y), "loss");
  const double second = *tessel::find_log(model.train_on_batch(x, y), "loss");
  CHECK(std::isfinite(first));
  CHECK(second < first);
  CHECK(model.predict(x).values.size() == 8 * 3);
}
