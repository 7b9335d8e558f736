// Keras's use_ema (ema_momentum, ema_overwrite_frequency) and gradient_accumulation_steps against
// Keras 3.15 (tests/golden/ema_accumulation.json): seven steps of an MLP under each case (with a
// schedule and clipnorm in one) take Keras's losses, weights and iteration counts; the moving
// averages and the weights finalize_variable_values leaves are Keras's, and fit ends with them;
// Keras's weights file (the averages and accumulators before the slots) loads and the next steps
// are Keras's; tessel's file and checkpoint the same; the `.keras` config is Keras's; Keras's
// refusals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"
#include "test_helpers.hpp"

namespace {

using json = nlohmann::json;
using B = tessel::backend::host;
using Catch::Contains;
using tessel::testing::temp_dir;
using tessel::testing::golden::check_close;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;
namespace optimizers = tessel::optimizers;

json load() { return tessel::testing::golden::load("ema_accumulation.json"); }

using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<5>,
                                            dense<8, {.activation = "relu"}>, dense<3>>;

// The cases, as make_golden.py makes them.
tessel::optimizer_spec case_optimizer(const std::string& name) {
  if (name == "sgd_accumulation")
    return optimizers::sgd{.learning_rate = 0.1, .momentum = 0.9, .gradient_accumulation_steps = 3};
  if (name == "adam_ema")
    return optimizers::adam{.learning_rate = 0.01, .use_ema = true, .ema_momentum = 0.9};
  if (name == "adam_ema_overwrite_accumulation")
    return optimizers::adam{.learning_rate = 0.01,
                            .use_ema = true,
                            .ema_momentum = 0.8,
                            .ema_overwrite_frequency = 2,
                            .gradient_accumulation_steps = 2};
  return optimizers::adamw{
      .learning_rate =
          optimizers::schedules::exponential_decay{
              .initial_learning_rate = 0.02, .decay_steps = 3, .decay_rate = 0.5},
      .clipnorm = 0.1,
      .gradient_accumulation_steps = 2};
}

void check_weights(regression& m, const json& expected, const std::string& what) {
  const auto now = m.get_weights();
  REQUIRE(now.size() == expected.size());
  for (std::size_t v = 0; v < now.size(); ++v)
    check_close(now[v].values, values(expected[v]["value"]),
                what + " " + expected[v]["path"].get<std::string>(), 2e-5, 1e-6);
}

}  // namespace

TEST_CASE("ema and accumulation: seven steps of each case as Keras's",
          "[optimizers][ema][accumulation]") {
  const json g = load();
  REQUIRE(g["cases"].size() == 4);
  const tessel::array<float> y = to_array(g["y"]);
  for (const json& c : g["cases"]) {
    const std::string name = c["case"].get<std::string>();
    INFO("case " << name);
    regression model;
    model.compile(case_optimizer(name), "mean_squared_error");
    model.set_weights(tessel::testing::golden::weight_arrays(c["initial_weights"]));
    for (std::size_t k = 0; k < 7; ++k) {
      const json& s = c["steps"][k];
      const std::string at = "step " + std::to_string(k + 1);
      const tessel::logs l = model.train_on_batch(to_array(g["xs"][k]), y);
      check_close({static_cast<float>(*tessel::find_log(l, "loss"))}, {s["loss"].get<float>()},
                  at + " loss", 2e-5, 1e-6);
      check_weights(model, s["weights"], at);
      CHECK(model.get_optimizer().iterations() == s["iterations"].get<std::size_t>());
    }
    // The optimizer's variables: Keras's, by name (Keras's paths name the model too).
    std::vector<std::string> ours, keras;
    for (const auto& v : model.get_state_tree().optimizer_variables) ours.push_back(v.path);
    for (const json& p : c["optimizer_variables"]) {
      std::string path = p.get<std::string>();
      if (const auto at = path.find("sequential_"); at != std::string::npos) path.erase(at, 11);
      if (path.starts_with("adam_w/")) path.replace(0, 6, "adamw");
      keras.push_back(path);
    }
    std::sort(ours.begin(), ours.end());
    std::sort(keras.begin(), keras.end());
    CHECK(ours == keras);
    // The moving averages, and the weights finalize_variable_values leaves.
    std::size_t a = 0;
    for (const auto& v : model.get_state_tree().optimizer_variables)
      if (v.path.ends_with("_average"))
        check_close(v.numpy(), values(c["averages"][a++]), v.path, 2e-5, 1e-6);
    CHECK(a == c["averages"].size());
    auto vars = model.trainable_variables();
    model.get_optimizer().finalize_variable_values(vars);
    check_weights(model, c["finalized"], "finalized");
    // The .keras config is Keras's.
    temp_dir dir;
    model.save((dir / "m.keras").string());
    tessel::saving::zip::reader z(dir / "m.keras");
    CHECK(json::parse(z.read("config.json", ""))["compile_config"]["optimizer"] == c["optimizer"]);
  }
}

TEST_CASE("ema and accumulation: fit ends with the moving averages, as Keras's fit",
          "[optimizers][ema]") {
  const json g = load();
  const json& c = g["cases"][1];  // adam_ema
  REQUIRE(c["case"] == "adam_ema");
  // The seven batches as one array of 56 rows, trained in order in one epoch.
  tessel::array<float> x({56, 5}), y({56, 3});
  const tessel::array<float> y8 = to_array(g["y"]);
  for (std::size_t k = 0; k < 7; ++k) {
    const tessel::array<float> xk = to_array(g["xs"][k]);
    std::copy(xk.values.begin(), xk.values.end(), x.values.begin() + k * 40);
    std::copy(y8.values.begin(), y8.values.end(), y.values.begin() + k * 24);
  }
  regression model;
  model.compile(case_optimizer("adam_ema"), "mean_squared_error");
  model.set_weights(tessel::testing::golden::weight_arrays(c["initial_weights"]));
  (void)model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  check_weights(model, c["finalized"], "after fit");
}

TEST_CASE("ema and accumulation: Keras's weights file loads, and the next steps are Keras's",
          "[optimizers][ema][accumulation][saving]") {
  const json g = load();
  const json& c = g["cases"][2];  // adam_ema_overwrite_accumulation, saved after step 3
  const tessel::array<float> y = to_array(g["y"]);
  regression loaded;
  loaded.compile(case_optimizer(c["case"].get<std::string>()), "mean_squared_error");
  loaded.load_weights(tessel::testing::golden::golden_dir() + "/ema_accumulation.weights.h5");
  check_weights(loaded, c["steps"][2]["weights"], "loaded after step 3");
  CHECK(loaded.get_optimizer().iterations() == 3);
  for (std::size_t k = 3; k < 7; ++k) {
    (void)loaded.train_on_batch(to_array(g["xs"][k]), y);
    check_weights(loaded, c["steps"][k]["weights"], "step " + std::to_string(k + 1));
  }
  // tessel's own weights file and checkpoint, mid-accumulation (after step 3 of 2-step groups).
  temp_dir dir;
  regression a;
  a.compile(case_optimizer(c["case"].get<std::string>()), "mean_squared_error");
  a.set_weights(tessel::testing::golden::weight_arrays(c["initial_weights"]));
  for (std::size_t k = 0; k < 3; ++k) (void)a.train_on_batch(to_array(g["xs"][k]), y);
  a.save_weights((dir / "a.weights.h5").string());
  tessel::save_checkpoint(a, (dir / "ckpt").string(), json{{"epoch", 1}});
  regression b, d;
  b.compile(case_optimizer(c["case"].get<std::string>()), "mean_squared_error");
  d.compile(case_optimizer(c["case"].get<std::string>()), "mean_squared_error");
  b.load_weights((dir / "a.weights.h5").string());
  (void)tessel::load_checkpoint(d, (dir / "ckpt").string());
  for (std::size_t k = 3; k < 7; ++k) {
    (void)b.train_on_batch(to_array(g["xs"][k]), y);
    (void)d.train_on_batch(to_array(g["xs"][k]), y);
  }
  check_weights(b, c["steps"][6]["weights"], "step 7 after tessel's weights file");
  check_weights(d, c["steps"][6]["weights"], "step 7 after a checkpoint");
}

TEST_CASE("ema and accumulation: Keras's refusals", "[optimizers][ema][accumulation]") {
  CHECK_THROWS_WITH(
      tessel::optimizer_function<B>(optimizers::sgd{.gradient_accumulation_steps = 1}),
      Contains("`gradient_accumulation_steps` must be an integer >= 2. Received: "
               "gradient_accumulation_steps=1"));
  CHECK_THROWS_WITH(
      tessel::optimizer_function<B>(optimizers::adam{.use_ema = true, .ema_momentum = 1.5}),
      Contains("`ema_momentum` must be in the range [0, 1]. Received: ema_momentum=1.5"));
  regression model;
  model.compile(optimizers::adam{.use_ema = true}, "mean_squared_error");
  const auto tree = model.get_state_tree();
  CHECK_THROWS_WITH(
      model.get_optimizer().stateless_apply(tree.optimizer_variables, tree.trainable_variables,
                                            tree.trainable_variables),
      Contains("stateless_apply: an optimizer with use_ema"));
}
