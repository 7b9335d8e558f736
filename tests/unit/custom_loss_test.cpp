// A loss and a metric written outside the library, as a user writes them: Keras's Huber loss and
// MeanSquaredError metric, which tessel does not have, each a type of the protocols in
// losses.hpp and metrics.hpp with its own host kernel (Kokkos). compile() takes them as it takes
// the library's; their values, a model's three Adam steps with them, evaluate and predict agree
// with Keras 3 (tests/golden/custom_loss.json). Also what every process must hold alike, and the
// refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"
#include "user_losses.hpp"

namespace {

using json = nlohmann::json;
using B = tessel::backend::host;
using tessel::testing::golden::check_close;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;

json load() { return tessel::testing::golden::load("custom_loss.json"); }
B::matrix device(const json& a) { return tessel::testing::golden::device<B>(a); }
double log_of(const tessel::logs& l, const std::string& key) {
  const auto v = tessel::find_log(l, key);
  REQUIRE(v.has_value());
  return *v;
}

using namespace tessel::layers;
using regression = tessel::basic_sequential<B, tessel::one_device, input<5>,
                                            dense<8, {.activation = "relu"}>, dense<3>>;

}  // namespace

TEST_CASE("custom loss: a user's Huber loss, its value and gradient as Keras's",
          "[custom][losses]") {
  const json g = load()["loss"];
  const B::matrix pred = device(g["y_pred"]), targets = device(g["y_true"]);
  const std::size_t rows = pred.extent(0), cols = pred.extent(1);
  B::matrix grad = B::make_matrix("grad", rows, cols);
  const tessel::loss_function<B> loss = user::huber{.delta = g["delta"].get<float>()};
  CHECK(loss.name() == "huber_loss");
  CHECK(loss.plan_rule() == &tessel::loss_rules::elementwise);
  CHECK(!loss.sparse_labels());
  CHECK(loss.is<user::huber>());
  const double total = tessel::loss_and_gradient<B>(loss, pred, B::index_vector(), targets, grad,
                                                    1.0f / static_cast<float>(rows));
  check_close({static_cast<float>(total / static_cast<double>(rows))},
              {g["loss_value"].get<float>()}, "Huber loss");
  std::vector<float> host(rows * cols);
  B::download(grad, host);
  check_close(host, values(g["grad_y_pred"]), "Huber gradient");
}

TEST_CASE("custom metric: a user's MeanSquaredError, its running value as Keras's",
          "[custom][metrics]") {
  const json g = load()["metric"];
  const tessel::metrics::metric_function<B> m = user::mean_squared_error_metric{};
  CHECK(m.name() == "mean_squared_error");
  CHECK(m.increases() == false);
  CHECK(!m.takes_argmax());
  CHECK(!m.sparse_labels());
  REQUIRE(g["batches"].size() == 2);
  tessel::testing::golden::check_running_metric(m, g, "MeanSquaredError");
}

TEST_CASE("custom loss and metric: compiled in a model, three Adam steps as Keras's",
          "[custom][model]") {
  const json g = load()["model"];
  regression model;
  model.compile(tessel::optimizers::adam{.learning_rate = 0.01}, user::huber{},
                {user::mean_squared_error_metric{}});
  model.set_weights(tessel::testing::golden::weight_arrays(g["initial_weights"]));
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  const auto names = g["returned_names"].get<std::vector<std::string>>();
  REQUIRE(names == std::vector<std::string>{"loss", "mean_squared_error"});
  for (std::size_t step = 0; step < 3; ++step) {
    const json& s = g["steps"][step];
    const tessel::logs l = model.train_on_batch(x, y);
    for (std::size_t k = 0; k < names.size(); ++k)
      check_close({static_cast<float>(log_of(l, names[k]))}, {s["returned"][k].get<float>()},
                  "step " + std::to_string(step + 1) + " " + names[k]);
    const auto now = model.get_weights();
    for (std::size_t v = 0; v < now.size(); ++v)
      check_close(now[v].values, values(s["weights"][v]["value"]),
                  "step " + std::to_string(step + 1) + " " +
                      s["weights"][v]["path"].get<std::string>(),
                  1e-5, 1e-6);
  }
  const tessel::logs e = model.evaluate(x, y, 32, 0);
  for (const auto& [k, v] : g["evaluate"].items())
    check_close({static_cast<float>(log_of(e, k))}, {v.get<float>()}, "evaluate " + k);
  // The weights agree within 1e-6 (above); through inputs up to 2.1 and two layers that is
  // up to about 6e-6 in an output, hence the floor of 2e-6 beside the relative 1e-5.
  check_close(model.predict(x).values, values(g["predict"]), "predict", 1e-5, 2e-6);
  // Early stopping's mode "auto" follows the metric's own direction.
  CHECK(model.metric_increases("mean_squared_error") == std::optional<bool>(false));
  // The state tree names the metric's accumulators by its name.
  bool found = false;
  for (const auto& v : model.get_state_tree().metrics_variables)
    found = found || v.path == "mean_squared_error/total";
  CHECK(found);
}

TEST_CASE("custom loss: its arguments and type are what the processes compare",
          "[custom][losses]") {
  const tessel::loss_function<B> a = user::huber{.delta = 1.0f}, b = user::huber{.delta = 2.0f},
                                  c = user::huber{.delta = 1.0f};
  CHECK(a.fingerprint() == c.fingerprint());
  CHECK(a.fingerprint() != b.fingerprint());
  // The same name, another type: the library's squared error renamed is not the user's loss.
  const tessel::loss_function<B> mse = tessel::losses::mean_squared_error{};
  CHECK(mse.fingerprint() != a.fingerprint());
  const tessel::loss_function<B> logits = tessel::losses::binary_crossentropy{.from_logits = true},
                                  probabilities = tessel::losses::binary_crossentropy{};
  CHECK(logits.fingerprint() != probabilities.fingerprint());
  CHECK(tessel::loss_function<B>("mse").is<tessel::losses::mean_squared_error>());
  const tessel::metrics::metric_function<B> m = user::mean_squared_error_metric{},
                                           n = user::undirected_metric{};
  CHECK(m.fingerprint() != n.fingerprint());
}

TEST_CASE("custom metric: one that does not say which way is better leaves early stopping's "
          "mode to the user",
          "[custom][metrics]") {
  regression model;
  model.compile("adam", user::huber{}, {user::undirected_metric{}});
  CHECK(model.metric_increases("undirected") == std::nullopt);
  const json g = load()["model"];
  const tessel::array<float> x = to_array(g["x"]), y = to_array(g["y"]);
  tessel::callbacks::early_stopping stop({.monitor = "undirected"});
  CHECK_THROWS_WITH(model.fit(x, y, {.epochs = 2, .verbose = 0, .callbacks = {stop}}),
                    Catch::Contains("EarlyStopping callback received monitor=undirected") &&
                        Catch::Contains("Pass `mode='max'`"));
  tessel::callbacks::early_stopping by_min({.monitor = "undirected", .mode = "min"});
  CHECK_NOTHROW(model.fit(x, y, {.epochs = 2, .verbose = 0, .callbacks = {by_min}}));
}
