// keras.callbacks.ReduceLROnPlateau and LearningRateScheduler against Keras 3
// (tests/golden/learning_rate_callbacks.json): the learning rate of each epoch, the losses, and
// what fit(verbose=2) prints, byte for byte with the step times masked; and the refusals.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"
#include "model_test_helpers.hpp"

namespace {

using json = nlohmann::json;
using B = tessel::backend::host;
using tessel::testing::golden::to_array;
using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<4>, dense<2>>;

// fit(verbose=2)'s text with the step times as the golden file writes them.
std::string masked(const std::string& text) {
  const std::string per_step =
      std::regex_replace(text, std::regex(R"(\d+(ms|us|s)/step)"), "<time>/step");
  return std::regex_replace(per_step, std::regex(R"( - \d+s - )"), " - <time> - ");
}

struct run {
  tessel::history history;
  std::string printed;
};

run fit_case(const json& g, const json& c, tessel::optimizer_spec optimizer,
             tessel::callback_ref callback) {
  regression model;
  model.compile(std::move(optimizer), "mean_squared_error");
  model.set_weights({to_array(g["initial_weights"][0]), to_array(g["initial_weights"][1])});
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  run r;
  capture out;
  r.history = model.fit(x, y,
                        {.batch_size = 16,
                         .epochs = c["epochs"].get<std::size_t>(),
                         .verbose = c["verbose"].get<int>(),
                         .callbacks = {callback},
                         .shuffle = false});
  r.printed = out.text();
  return r;
}

void check_case(const run& r, const json& c) {
  INFO("case " << c["case"].get<std::string>());
  const auto expected_lr = c["learning_rate"].get<std::vector<double>>();
  REQUIRE(r.history.history.count("learning_rate") == 1);
  const std::vector<double>& lr = r.history.history.at("learning_rate");
  REQUIRE(lr.size() == expected_lr.size());
  for (std::size_t e = 0; e < lr.size(); ++e) CHECK(lr[e] == expected_lr[e]);  // float32 values
  const auto expected_loss = c["loss"].get<std::vector<double>>();
  const std::vector<double>& loss = r.history.history.at("loss");
  REQUIRE(loss.size() == expected_loss.size());
  for (std::size_t e = 0; e < loss.size(); ++e)
    CHECK(loss[e] == Approx(expected_loss[e]).epsilon(1e-5));
  CHECK(masked(r.printed) == c["printed"].get<std::string>());
}

json load() { return tessel::testing::golden::load("learning_rate_callbacks.json"); }

}  // namespace

TEST_CASE("learning rate callbacks: ReduceLROnPlateau as Keras's, printed and recorded",
          "[callbacks][learning_rate][golden]") {
  const json g = load();
  const json& reduce = g["cases"][0];
  REQUIRE(reduce["case"] == "reduce");
  tessel::callbacks::reduce_lr_on_plateau plateau({.monitor = "loss",
                                                   .factor = 0.5,
                                                   .patience = 1,
                                                   .verbose = 1,
                                                   .min_delta = 10.0,
                                                   .min_lr = 0.002});
  check_case(fit_case(g, reduce, tessel::optimizers::sgd{.learning_rate = 0.01}, plateau), reduce);

  const json& cooldown = g["cases"][1];
  REQUIRE(cooldown["case"] == "reduce_cooldown");
  check_case(fit_case(g, cooldown, tessel::optimizers::sgd{.learning_rate = 0.05},
                      tessel::callbacks::reduce_lr_on_plateau({.monitor = "loss",
                                                               .factor = 0.1,
                                                               .patience = 1,
                                                               .mode = "min",
                                                               .min_delta = 10.0,
                                                               .cooldown = 2})),
             cooldown);
}

TEST_CASE("learning rate callbacks: LearningRateScheduler as Keras's, printed and recorded",
          "[callbacks][learning_rate][golden]") {
  const json g = load();
  const json& c = g["cases"][2];
  REQUIRE(c["case"] == "scheduler");
  tessel::callbacks::learning_rate_scheduler scheduler(
      [](std::size_t epoch, double lr) { return epoch < 2 ? lr : lr * 0.5; }, 1);
  check_case(fit_case(g, c, tessel::optimizers::adam{.learning_rate = 0.01}, scheduler), c);
}

TEST_CASE("learning rate callbacks: refusals name what is wrong", "[callbacks][learning_rate]") {
  CHECK_THROWS_WITH(tessel::callbacks::reduce_lr_on_plateau({.factor = 1.0}),
                    Catch::Contains("ReduceLROnPlateau does not support a factor >= 1.0. "
                                    "Received factor=1.0"));
  CHECK_THROWS_WITH(tessel::callbacks::learning_rate_scheduler(nullptr),
                    Catch::Contains("`schedule` is empty"));
  const json g = load();
  regression model;
  model.compile("sgd", "mean_squared_error");
  tessel::callbacks::learning_rate_scheduler nan_schedule(
      [](std::size_t, double) { return std::nan(""); });
  CHECK_THROWS_WITH(model.fit(to_array(g["x"]), to_array(g["y"]),
                              {.epochs = 1, .verbose = 0, .callbacks = {nan_schedule}}),
                    Catch::Contains("The output of the `schedule` function should be a float. "
                                    "Got: nan"));
  CHECK_THROWS_WITH(model.set_learning_rate(-1.0),
                    Catch::Contains("learning_rate: -1.000000 is not a learning rate; give a "
                                    "finite number of at least 0."));
  CHECK_THROWS_WITH(model.set_learning_rate(std::nan("")),
                    Catch::Contains("is not a learning rate"));
  CHECK(model.learning_rate() == static_cast<double>(0.01f));  // unchanged by the refusals
  // A monitor the logs lack: a warning, the learning rate kept.
  tessel::callbacks::reduce_lr_on_plateau absent({.monitor = "val_loss", .patience = 0});
  std::string warned;
  {
    capture err(std::cerr);
    (void)model.fit(to_array(g["x"]), to_array(g["y"]),
                    {.epochs = 2, .verbose = 0, .callbacks = {absent}});
    warned = err.text();
  }
  CHECK(warned.find("Learning rate reduction is conditioned on metric `val_loss` which is not "
                    "available. Available metrics are: loss,learning_rate.") != std::string::npos);
  CHECK(model.learning_rate() == static_cast<double>(0.01f));
}
