// An optimizer written outside the library (tests/support/user_optimizers.hpp: Signum), as a
// user writes one: compile() takes it as it takes the library's; three steps of a model under it
// agree with Keras 3's subclass of keras.optimizers.Optimizer (tests/golden/user_optimizer.json),
// a Keras `.weights.h5` with its slots loads and the next step agrees, its slots survive a
// save and a load of a weights file and of a checkpoint, the `.keras` config is Keras's, and the
// registry makes it by name and from a config, refusing unknown classes and values out of range by
// name.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"
#include "test_helpers.hpp"
#include "user_optimizers.hpp"

namespace {

using json = nlohmann::json;
using B = tessel::backend::host;
using Catch::Contains;
using tessel::testing::temp_dir;
using tessel::testing::golden::check_close;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;

json load() { return tessel::testing::golden::load("user_optimizer.json"); }

using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<5>,
                                            dense<8, {.activation = "relu"}>, dense<3>>;

const user::signum keras_signum{.learning_rate = 0.02, .beta = 0.8};

void set_initial(regression& m, const json& g) {
  m.set_weights(tessel::testing::golden::weight_arrays(g["initial_weights"]));
}

// The weights, and the optimizer's momentum slots in the variables' order, against step k's.
void check_step(regression& m, const json& s, const std::string& what) {
  const auto now = m.get_weights();
  for (std::size_t v = 0; v < now.size(); ++v)
    check_close(now[v].values, values(s["weights"][v]["value"]),
                what + " " + s["weights"][v]["path"].get<std::string>(), 1e-5, 1e-6);
  const auto state = m.get_state_tree().optimizer_variables;
  REQUIRE(state.size() == 2 + s["momentums"].size());
  CHECK(state[0].path == "signum/iteration");
  CHECK(state[0].integer() == s["iterations"].get<std::int64_t>());
  CHECK(state[2].path == "signum/dense_kernel_momentum");
  for (std::size_t v = 0; v < s["momentums"].size(); ++v)
    check_close(state[2 + v].numpy(), values(s["momentums"][v]), what + " " + state[2 + v].path,
                1e-5, 1e-6);
}

}  // namespace

TEST_CASE("user optimizer: three steps of a user's Signum as Keras's subclass",
          "[optimizers][user]") {
  const json g = load();
  regression model;
  model.compile(keras_signum, "mean_squared_error");
  set_initial(model, g);
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  for (std::size_t step = 0; step < 3; ++step) {
    const json& s = g["steps"][step];
    const tessel::logs l = model.train_on_batch(x, y);
    check_close({static_cast<float>(*tessel::find_log(l, "loss"))}, {s["loss"].get<float>()},
                "step " + std::to_string(step + 1) + " loss");
    check_step(model, s, "step " + std::to_string(step + 1));
  }
  CHECK(model.get_optimizer().spec().as<user::signum>() != nullptr);
  CHECK(model.get_optimizer().spec().as<user::signum>()->beta == 0.8);
  CHECK(model.get_optimizer().spec().as<tessel::optimizers::adam>() == nullptr);
}

TEST_CASE(
    "user optimizer: Keras's weights file with its slots loads, and the next step is "
    "Keras's",
    "[optimizers][user][saving]") {
  const json g = load();
  regression model;
  model.compile(keras_signum, "mean_squared_error");
  model.load_weights(tessel::testing::golden::golden_dir() + "/user_optimizer.weights.h5");
  CHECK(model.get_optimizer().iterations() == 2);
  check_step(model, g["steps"][1], "loaded after step 2");
  (void)model.train_on_batch(to_array(g["x"]), to_array(g["y"]));
  check_step(model, g["steps"][2], "step 3 after the load");
}

TEST_CASE(
    "user optimizer: its slots survive save_weights and load_weights, its config is "
    "Keras's in the .keras archive",
    "[optimizers][user][saving]") {
  const json g = load();
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  temp_dir dir;
  regression a;
  a.compile(keras_signum, "mean_squared_error");
  set_initial(a, g);
  (void)a.train_on_batch(x, y);
  (void)a.train_on_batch(x, y);
  a.save_weights((dir / "a.weights.h5").string());
  a.save((dir / "a.keras").string());
  regression b;
  b.compile(keras_signum, "mean_squared_error");
  b.load_weights((dir / "a.weights.h5").string());
  (void)b.train_on_batch(x, y);
  check_step(b, g["steps"][2], "step 3 after tessel's save and load");

  // And through a sharded checkpoint (the training state: variables, the slots, the counters).
  tessel::save_checkpoint(a, (dir / "ckpt").string(), json{{"epoch", 1}});
  regression d;
  d.compile(keras_signum, "mean_squared_error");
  (void)tessel::load_checkpoint(d, (dir / "ckpt").string());
  (void)d.train_on_batch(x, y);
  check_step(d, g["steps"][2], "step 3 after a checkpoint");

  tessel::saving::zip::reader z(dir / "a.keras");
  const auto config = json::parse(z.read("config.json", ""));
  json expected = g["config"];
  const json written = config["compile_config"]["optimizer"];
  CHECK(written == expected);

  // A file of another optimizer's state (1 slot per variable, Adam's are 2) is refused.
  regression c;
  c.compile("adam", "mean_squared_error");
  CHECK_THROWS_WITH(c.load_weights((dir / "a.weights.h5").string()),
                    Contains("the file's optimizer 'signum' has 6 variables, and this "
                             "model's ('adam') has 10") &&
                        Contains("Compile the model as the saved one was"));
}

TEST_CASE("user optimizer: the protocol's description, fingerprint and registry",
          "[optimizers][user]") {
  const tessel::optimizer_function<B> a = keras_signum, same = keras_signum,
                                      other = user::signum{.beta = 0.5};
  CHECK(a.class_name() == "Signum");
  CHECK(a.name() == "signum");
  CHECK(a.learning_rate() == 0.02);
  CHECK(a.fingerprint() == same.fingerprint());
  CHECK(a.fingerprint() != other.fingerprint());
  const tessel::optimizers::config c = a.config();
  REQUIRE(c.values.size() == 2);
  CHECK(c.values[1].first == "beta");
  CHECK(std::get<double>(c.values[1].second) == 0.8);
  CHECK(c.module.empty());
  CHECK(c.registered_name == "user>Signum");

  // Registered (user_optimizers.hpp): by its name, its class name, and from a config.
  CHECK(tessel::optimizer_function<B>("signum").as<user::signum>() != nullptr);
  CHECK(tessel::optimizer_function<B>("Signum").as<user::signum>() != nullptr);
  const auto made = tessel::optimizers::make_optimizer<B>(c, "test");
  REQUIRE(made.as<user::signum>() != nullptr);
  CHECK(made.as<user::signum>()->beta == 0.8);
  CHECK(made.fingerprint() == a.fingerprint());
  // The library's, from their configs, each as it was.
  for (const tessel::optimizer_function<B>& lib :
       {tessel::optimizer_function<B>(
            tessel::optimizers::sgd{.learning_rate = 0.5, .momentum = 0.9}),
        tessel::optimizer_function<B>(tessel::optimizers::adam{.beta_1 = 0.8}),
        tessel::optimizer_function<B>(tessel::optimizers::rmsprop{.centered = true})})
    CHECK(tessel::optimizers::make_optimizer<B>(lib.config(), "test").fingerprint() ==
          lib.fingerprint());

  // Refusals name what is wrong.
  tessel::optimizers::config unknown = c;
  unknown.class_name = "Lamb";
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(unknown, "create"),
                    Contains("create: the optimizer 'Lamb' is not one this program knows") &&
                        Contains("register_optimizer"));
  tessel::optimizers::config out_of_range = c;
  out_of_range.values[1].second = 1.5;
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(out_of_range, "create"),
                    Contains("create: Signum's beta is 1.5; it must be in [0, 1]"));
  tessel::optimizers::config wrong_type = c;
  wrong_type.values[1].second = true;
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(wrong_type, "create"),
                    Contains("Signum's beta must be a number"));
  tessel::optimizers::config extra = c;
  extra.values.emplace_back("nesterov", true);
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(extra, "create"),
                    Contains("Signum has no argument 'nesterov'"));
  CHECK_THROWS_WITH(tessel::optimizer_function<B>("lamb"),
                    Contains("Could not interpret optimizer identifier: lamb"));
  // A base argument the type does not have (Signum has no clipnorm member) is refused by name.
  tessel::optimizers::config clipped = c;
  clipped.clipnorm = 1.0;
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(clipped, "create"),
                    Contains("create: Signum has no argument 'clipnorm'"));
}

// Keras's constructors refuse two clip arguments and a field out of range; so does an
// optimizer given to compile (the library's and from a config alike).
TEST_CASE("user optimizer: the base arguments' rules, as Keras's", "[optimizers]") {
  using tessel::optimizers::adam;
  CHECK_THROWS_WITH(tessel::optimizer_function<B>(adam{.clipnorm = 1.0, .clipvalue = 0.5}),
                    Contains("Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be "
                             "set. Received: clipnorm=1, clipvalue=0.5, global_clipnorm=0"));
  CHECK_THROWS_WITH(tessel::optimizer_function<B>(adam{.global_clipnorm = -1.0}),
                    Contains("Adam's global_clipnorm is -1; it must be 0 (none) or more."));
  CHECK_THROWS_WITH(tessel::optimizer_function<B>(adam{.beta_1 = 1.5}),
                    Contains("the optimizer: Adam's beta_1 is 1.5; it must be in [0, 1]."));
  tessel::optimizers::config both = tessel::optimizers::config_of(adam{.clipnorm = 1.0});
  CHECK(both.clipnorm == 1.0);
  both.global_clipnorm = 2.0;
  CHECK_THROWS_WITH(tessel::optimizers::make_optimizer<B>(both, "create"),
                    Contains("create: Only one of `clipnorm`"));
  // The clip arguments are part of what every process must hold alike.
  CHECK(tessel::optimizer_function<B>(adam{.clipnorm = 1.0}).fingerprint() !=
        tessel::optimizer_function<B>(adam{.global_clipnorm = 1.0}).fingerprint());
}
