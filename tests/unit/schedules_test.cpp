// keras.optimizers.schedules against Keras 3.15 (tests/golden/schedules.json): each of the
// library's schedules, made from Keras's serialized config by the registry, gives Keras's value at
// steps 0..40; an MLP trained under Adam with a warmup CosineDecay takes Keras's steps, holds no
// learning-rate variable (Keras's optimizer.variables), reads Keras's weights file and goes on as
// Keras (the schedule's step is the iteration count), writes Keras's `.keras` config, survives a
// checkpoint, and refuses set_learning_rate with Keras's words; a user's schedule is registered
// and made by name.
#include <catch2/catch.hpp>

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
namespace schedules = tessel::optimizers::schedules;

json load() { return tessel::testing::golden::load("schedules.json"); }

// Keras's serialized schedule as tessel's config (its "name" apart).
tessel::optimizers::schedule_config config_of(const json& serialized) {
  tessel::optimizers::schedule_config c;
  c.class_name = serialized["class_name"].get<std::string>();
  for (const auto& [key, v] : serialized["config"].items()) {
    if (key == "name") {
      c.name = v.get<std::string>();
      continue;
    }
    tessel::optimizers::schedule_value value;
    if (v.is_null())
      value = std::monostate{};
    else if (v.is_boolean())
      value = v.get<bool>();
    else if (v.is_number_integer())
      value = v.get<std::int64_t>();
    else if (v.is_array())
      value = v.get<std::vector<double>>();
    else
      value = v.get<double>();
    c.values.emplace_back(key, value);
  }
  return c;
}

using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<5>,
                                            dense<8, {.activation = "relu"}>, dense<3>>;

const tessel::optimizers::adam keras_adam{
    .learning_rate = schedules::cosine_decay{.initial_learning_rate = 0.001,
                                             .decay_steps = 4,
                                             .alpha = 0.1,
                                             .warmup_target = 0.01,
                                             .warmup_steps = 2}};

void set_initial(regression& m, const json& g) {
  m.set_weights(tessel::testing::golden::weight_arrays(g["initial_weights"]));
}

void check_step(regression& m, const json& s, const std::string& what) {
  const auto now = m.get_weights();
  for (std::size_t v = 0; v < now.size(); ++v)
    check_close(now[v].values, values(s["weights"][v]["value"]),
                what + " " + s["weights"][v]["path"].get<std::string>(), 1e-5, 1e-6);
  CHECK(m.get_optimizer().iterations() == s["iterations"].get<std::size_t>());
  check_close({static_cast<float>(m.get_optimizer().learning_rate())},
              {s["learning_rate"].get<float>()}, what + " learning rate");
}

// A user's schedule: the learning rate halved every `every` steps.
struct halving {
  double initial_learning_rate = 0.1;
  std::int64_t every = 2;
  static constexpr std::string_view class_name = "Halving";
  static constexpr std::string_view name = "halving";
  static constexpr auto fields() {
    return std::tuple{
        tessel::optimizers::field{"initial_learning_rate", &halving::initial_learning_rate},
        tessel::optimizers::field{"every", &halving::every, 1.0, 1e9}};
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    return static_cast<float>(initial_learning_rate) /
           static_cast<float>(std::int64_t{1} << (step / every));
  }
};

}  // namespace

TEST_CASE("schedules: each library schedule from Keras's config, its values at steps 0..40",
          "[optimizers][schedules]") {
  const json g = load();
  REQUIRE(g["cases"].size() == 9);
  for (const json& c : g["cases"]) {
    INFO("case " << c["case"].get<std::string>());
    const tessel::optimizers::schedule_config config = config_of(c["serialized"]);
    const tessel::optimizers::learning_rate_schedule s =
        tessel::optimizers::make_schedule(config, "golden");
    // Made back into Keras's description, the same (the registry reads every field).
    CHECK(s.config().class_name == config.class_name);
    CHECK(s.config().name == config.name);
    std::vector<float> ours;
    for (std::int64_t step = 0; step <= 40; ++step) ours.push_back(s(step));
    check_close(ours, c["values"].get<std::vector<float>>(), "values", 2e-6, 1e-9);
  }
}

TEST_CASE("schedules: Adam with a warmup CosineDecay takes Keras's steps and keeps its state",
          "[optimizers][schedules][saving]") {
  const json g = load();
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  regression model;
  model.compile(keras_adam, "mean_squared_error");
  set_initial(model, g);
  check_close({static_cast<float>(model.get_optimizer().learning_rate())}, {0.001f},
              "the first learning rate");
  for (std::size_t step = 0; step < 5; ++step) {
    const json& s = g["steps"][step];
    const tessel::logs l = model.train_on_batch(x, y);
    check_close({static_cast<float>(*tessel::find_log(l, "loss"))}, {s["loss"].get<float>()},
                "step " + std::to_string(step + 1) + " loss");
    check_step(model, s, "step " + std::to_string(step + 1));
  }
  // Keras's optimizer.variables: the iteration count and the slots, no learning rate.
  const auto state = model.get_state_tree().optimizer_variables;
  REQUIRE(state.size() == g["optimizer_variables"].size());
  CHECK(state[0].path == "adam/iteration");
  for (const auto& v : state) CHECK(v.path != "adam/learning_rate");

  // Keras's weights file (after its second step) loads, and the next steps are Keras's: the
  // schedule goes on from the file's iteration count.
  regression loaded;
  loaded.compile(keras_adam, "mean_squared_error");
  loaded.load_weights(tessel::testing::golden::golden_dir() + "/schedules.weights.h5");
  check_step(loaded, g["steps"][1], "loaded after step 2");
  for (std::size_t step = 2; step < 5; ++step) {
    (void)loaded.train_on_batch(x, y);
    check_step(loaded, g["steps"][step], "step " + std::to_string(step + 1) + " after the load");
  }

  // tessel's own weights file and checkpoint, the same; the .keras config is Keras's.
  temp_dir dir;
  regression a;
  a.compile(keras_adam, "mean_squared_error");
  set_initial(a, g);
  (void)a.train_on_batch(x, y);
  (void)a.train_on_batch(x, y);
  a.save_weights((dir / "a.weights.h5").string());
  a.save((dir / "a.keras").string());
  tessel::save_checkpoint(a, (dir / "ckpt").string(), json{{"epoch", 1}});
  regression b, c;
  b.compile(keras_adam, "mean_squared_error");
  c.compile(keras_adam, "mean_squared_error");
  b.load_weights((dir / "a.weights.h5").string());
  (void)tessel::load_checkpoint(c, (dir / "ckpt").string());
  (void)b.train_on_batch(x, y);
  (void)c.train_on_batch(x, y);
  check_step(b, g["steps"][2], "step 3 after tessel's weights file");
  check_step(c, g["steps"][2], "step 3 after a checkpoint");
  tessel::saving::zip::reader z(dir / "a.keras");
  const auto config = json::parse(z.read("config.json", ""));
  CHECK(config["compile_config"]["optimizer"] == g["optimizer"]);

  // A model whose learning rate is a number reads no schedule's file (it has one variable
  // fewer), and says why.
  regression plain;
  plain.compile("adam", "mean_squared_error");
  CHECK_THROWS_WITH(plain.load_weights((dir / "a.weights.h5").string()),
                    Contains("the file's optimizer 'adam' has 9 variables, and this model's "
                             "('adam') has 10 (the iteration count, the learning rate and 8 "
                             "slots)"));
}

TEST_CASE("schedules: what Keras refuses, and a user's schedule", "[optimizers][schedules]") {
  regression model;
  model.compile(keras_adam, "mean_squared_error");
  CHECK_THROWS_WITH(model.get_optimizer().set_learning_rate(0.1),
                    Contains("This optimizer was created with a `LearningRateSchedule` object as "
                             "its `learning_rate` constructor argument, hence its learning rate "
                             "is not settable."));
  CHECK_THROWS_WITH(
      tessel::optimizers::learning_rate_value(
          schedules::piecewise_constant_decay{.boundaries = {5, 10}, .values = {0.1, 0.01}}),
      Contains("The length of boundaries should be 1 less than the length of values"));
  CHECK_THROWS_WITH(tessel::optimizers::learning_rate_value(schedules::exponential_decay{
                        .initial_learning_rate = 0.1, .decay_steps = 0, .decay_rate = 0.9}),
                    Contains("ExponentialDecay's decay_steps is 0; it must be in [1, "));
  tessel::optimizers::schedule_config unknown;
  unknown.class_name = "WarmupRsqrt";
  CHECK_THROWS_WITH(tessel::optimizers::make_schedule(unknown, "create"),
                    Contains("create: the learning-rate schedule 'WarmupRsqrt' is not one this "
                             "program knows") &&
                        Contains("register_schedule"));
  // The optimizer's description carries its schedule, and the registry makes the same back.
  const tessel::optimizer_function<B> f(keras_adam);
  REQUIRE(f.config().schedule.has_value());
  const auto again = tessel::optimizers::make_optimizer<B>(f.config(), "test");
  REQUIRE(again.schedule());
  CHECK(again.schedule()(3) == f.schedule()(3));
  CHECK(again.fingerprint() == f.fingerprint());
  // A user's schedule (Keras: a LearningRateSchedule subclass), registered and made by name.
  (void)tessel::optimizers::register_schedule<halving>();
  const tessel::optimizers::learning_rate_value lr = halving{.initial_learning_rate = 0.4};
  CHECK(lr.schedule().config().registered_name == "Custom>Halving");
  const auto made = tessel::optimizers::make_schedule(lr.schedule().config(), "create");
  CHECK(made(0) == 0.4f);
  CHECK(made(5) == 0.1f);
  regression m;
  m.compile(tessel::optimizers::sgd{.learning_rate = halving{.initial_learning_rate = 0.4}},
            "mean_squared_error");
  const json g = load();
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  for (int i = 0; i < 3; ++i) (void)m.train_on_batch(x, y);
  CHECK(m.get_optimizer().learning_rate() == Approx(0.2));
}
