// keras.optimizers.Nadam against Keras 3.15 (tests/golden/nadam.json): three steps of an MLP take
// Keras's losses and weights, the optimizer's own scalar (the product of momentum factors, Keras's
// "variable" after the slots) is Keras's, Keras's weights file loads and the next step is Keras's
// (the scalar follows from the iteration count), tessel's file and checkpoint the same, and the
// `.keras` config is Keras's.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"
#include "test_helpers.hpp"

namespace {

using json = nlohmann::json;
using B = tessel::backend::host;
using tessel::testing::temp_dir;
using tessel::testing::golden::check_close;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;

using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<5>,
                                            dense<8, {.activation = "relu"}>, dense<3>>;

const tessel::optimizers::nadam keras_nadam{.learning_rate = 0.01, .beta_1 = 0.85};

void check_step(regression& m, const json& s, const std::string& what) {
  const auto now = m.get_weights();
  for (std::size_t v = 0; v < now.size(); ++v)
    check_close(now[v].values, values(s["weights"][v]["value"]),
                what + " " + s["weights"][v]["path"].get<std::string>(), 1e-5, 1e-6);
  const auto state = m.get_state_tree().optimizer_variables;
  REQUIRE(state.back().path == "variable");
  CHECK(state.back().real() == Approx(s["product"].get<double>()).epsilon(1e-6));
}

}  // namespace

TEST_CASE("nadam: three steps as Keras's, its weights file and config", "[optimizers][nadam]") {
  const json g = tessel::testing::golden::load("nadam.json");
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  const std::vector<tessel::array<float>> initial =
      tessel::testing::golden::weight_arrays(g["initial_weights"]);
  regression model;
  model.compile(keras_nadam, "mean_squared_error");
  model.set_weights(initial);
  for (std::size_t step = 0; step < 3; ++step) {
    const tessel::logs l = model.train_on_batch(x, y);
    check_close({static_cast<float>(*tessel::find_log(l, "loss"))},
                {g["steps"][step]["loss"].get<float>()}, "step " + std::to_string(step + 1));
    check_step(model, g["steps"][step], "step " + std::to_string(step + 1));
  }
  CHECK(model.get_state_tree().optimizer_variables.size() == g["optimizer_variables"].size());

  regression loaded;
  loaded.compile(keras_nadam, "mean_squared_error");
  loaded.load_weights(tessel::testing::golden::golden_dir() + "/nadam.weights.h5");
  check_step(loaded, g["steps"][1], "Keras's file, after step 2");
  (void)loaded.train_on_batch(x, y);
  check_step(loaded, g["steps"][2], "step 3 after Keras's file");

  temp_dir dir;
  regression a;
  a.compile(keras_nadam, "mean_squared_error");
  a.set_weights(initial);
  (void)a.train_on_batch(x, y);
  (void)a.train_on_batch(x, y);
  a.save_weights((dir / "a.weights.h5").string());
  a.save((dir / "a.keras").string());
  tessel::save_checkpoint(a, (dir / "ckpt").string(), json{{"epoch", 1}});
  regression b, c;
  b.compile(keras_nadam, "mean_squared_error");
  c.compile(keras_nadam, "mean_squared_error");
  b.load_weights((dir / "a.weights.h5").string());
  (void)tessel::load_checkpoint(c, (dir / "ckpt").string());
  (void)b.train_on_batch(x, y);
  (void)c.train_on_batch(x, y);
  check_step(b, g["steps"][2], "step 3 after tessel's weights file");
  check_step(c, g["steps"][2], "step 3 after a checkpoint");
  tessel::saving::zip::reader z(dir / "a.keras");
  CHECK(json::parse(z.read("config.json", ""))["compile_config"]["optimizer"] == g["optimizer"]);
}
