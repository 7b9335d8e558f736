// fit/evaluate on arrays (Keras's fit(x, y, batch_size=...)), and dropout masks per training call.
#include <catch2/catch.hpp>

#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;

tessel::array<float> features(std::size_t n, std::size_t d) {
  tessel::array<float> x({n, d});
  tessel::random::stream s(3, 4);
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = s.normal(i);
  return x;
}
}  // namespace

TEST_CASE("model: fit and evaluate take arrays with a batch size, as Keras's fit(x, y)",
          "[model]") {
  tessel::sequential<input<4>, dense<8, {.activation = "relu"}>, dense<2>> model;
  model.compile("adam", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {"accuracy"});
  const auto x = features(40, 4);
  tessel::array<std::int32_t> y({40});
  for (std::size_t i = 0; i < 40; ++i) y.values[i] = x.values[i * 4] > 0 ? 1 : 0;
  const auto h = model.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
  REQUIRE(h.history.at("loss").size() == 3);
  CHECK(h.history.at("loss")[2] < h.history.at("loss")[0]);
  const auto r = model.evaluate(x, y, 8, 0);
  REQUIRE(tessel::find_log(r, "accuracy"));
  CHECK(*tessel::find_log(r, "accuracy") > 0.5);
}

TEST_CASE("model: each training call draws new dropout masks; a replayed step draws the same",
          "[model]") {
  tessel::sequential<input<16>, dropout<0.5>, dense<3>> model;
  model.compile("sgd", "mse");
  const auto x = features(8, 16);
  tessel::array<float> y({8, 3});
  const std::uint64_t step = model.training_step();
  const double first = model.compute_loss_and_gradients(x, y);
  const double second = model.compute_loss_and_gradients(x, y);
  CHECK(model.training_step() == step + 2);
  CHECK(first != second);  // no optimizer step between them: only the masks differ
  model.set_training_step(step);
  CHECK(model.compute_loss_and_gradients(x, y) == first);
}
