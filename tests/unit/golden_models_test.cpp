// Keras parity of whole models, against tests/golden/ as golden_test.cpp (its tolerance): the
// seeds' MLPs through fit, evaluate and predict, and summary() (functional graphs, layer
// normalization and the losses: golden_functional_test.cpp).
#include <catch2/catch.hpp>

#include "golden_test_helpers.hpp"

namespace {

template <class Model, class Y>
void check_training_steps(Model& model, const json& m, const tessel::array<Y>& y) {
  model.set_weights(tessel::testing::golden::weight_arrays(m["initial_weights"]));
  const tessel::array<float> x = to_array(m["x"]);
  const auto names = m["returned_names"].get<std::vector<std::string>>();
  for (std::size_t step = 0; step < m["steps"].size(); ++step) {
    const json& s = m["steps"][step];
    const tessel::logs l = model.train_on_batch(x, y);
    for (std::size_t k = 0; k < names.size(); ++k)
      check_close({static_cast<float>(*tessel::find_log(l, names[k]))},
                  {s["returned"][k].get<float>()},
                  "step " + std::to_string(step + 1) + " " + names[k]);
    const auto now = model.get_weights();
    for (std::size_t v = 0; v < now.size(); ++v)
      check_close(
          now[v].values, values(s["weights"][v]["value"]),
          "step " + std::to_string(step + 1) + " " + s["weights"][v]["path"].get<std::string>(),
          1e-5, 1e-6);
  }
  const tessel::logs e = model.evaluate(tessel::from_tensor_slices(x, y).batch(32), 0);
  for (const auto& [k, v] : m["evaluate"].items())
    check_close({static_cast<float>(*tessel::find_log(e, k))}, {v.template get<float>()},
                "evaluate " + k);
  check_close(model.predict(x).values, values(m["predict"]), "predict", 1e-5, 1e-6);
}

}  // namespace

TEST_CASE("golden: seeds/001 MLP (scaled down), three Adam steps, evaluate and predict",
          "[golden][model]") {
  using namespace tessel::layers;
  const json m = load("model_step.json")["models"][0];
  REQUIRE(m["name"] == "mlp_adam_scce");
  model_on<input<12>, dense<16, {.activation = "relu"}>, dense<16, {.activation = "relu"}>,
           dense<5>>
      model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  const auto labels = m["y"]["data"].get<std::vector<std::int32_t>>();
  check_training_steps(model, m, tessel::array<std::int32_t>({labels.size()}, labels));
}

TEST_CASE("golden: seeds/000 model (scaled down) with SGD and with the default optimizer",
          "[golden][model]") {
  using namespace tessel::layers;
  using model_t = model_on<input<6, 4>, flatten<>,
                           dense<7, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                           dense<3, {.activation = "softmax", .name = "d2"}>>;
  const json all = load("model_step.json")["models"];
  {
    const json& m = all[1];
    REQUIRE(m["name"] == "seed000_small_sgd_mse");
    model_t model;
    model.compile(tessel::optimizers::sgd{}, tessel::losses::mean_squared_error{});
    check_training_steps(model, m, to_array(m["y"]));
  }
  {
    const json& m = all[2];
    REQUIRE(m["name"] == "seed000_small_default_optimizer_mse");
    model_t model;
    model.compile({.loss = "mse"});  // Keras's default optimizer: rmsprop
    check_training_steps(model, m, to_array(m["y"]));
  }
}

TEST_CASE("golden: summary() is Keras's table plus a layout column", "[golden][summary]") {
  using namespace tessel::layers;
  model_on<input<784>, dense<256, {.activation = "relu"}>, dense<256, {.activation = "relu"}>,
           dense<10>>
      seed001;
  CHECK(without_layout_column(seed001.summary_text()) == read_text("summary_seed001.txt"));
  CHECK(seed001.count_params() == 269322);
  model_on<input<28, 28, 1>, flatten<>,
           dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>, dropout<0.4>,
           dense<10, {.activation = "softmax", .name = "d2"}>>
      seed000;
  CHECK(without_layout_column(seed000.summary_text()) ==
        read_text("summary_seed000_sequential.txt"));
  CHECK(seed000.count_params() == 158810);
  CHECK_THAT(seed000.summary_text(), Catch::Contains("kernel (None, None)"));
}
