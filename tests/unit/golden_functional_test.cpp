// Keras parity of whole models, against tests/golden/ as golden_test.cpp (its tolerance):
// functional graphs, layer normalization, binary cross-entropy and mean absolute error. (The
// seeds' MLPs and summary(): golden_models_test.cpp; a file of its own, so that each compiles in
// a fraction of the time the two took together.)
#include <catch2/catch.hpp>

#include "golden_test_helpers.hpp"

namespace {
// A functional model of functional.json: its summary, then three Adam steps from the recorded
// weights (loss, accuracy, every weight), and the predictions after them.
template <class Model>
void check_functional(Model& model, const json& m) {
  CHECK(without_layout_column(model.summary_text(), true) ==
        read_text(m["summary_file"].get<std::string>()));
  std::vector<tessel::array<float>> w;
  std::size_t v = 0;
  for (const json& e : m["initial_weights"]) {
    w.push_back(to_array(e["value"]));
    CHECK(model.variables()[v++]->path == e["path"].get<std::string>());
  }
  model.set_weights(w);
  const tessel::array<float> x = to_array(m["x"]);
  const auto labels = m["y"]["data"].get<std::vector<std::int32_t>>();
  const tessel::array<std::int32_t> y({labels.size()}, labels);
  check_close(model.predict(x).values, values(m["initial_outputs"]), "initial outputs", 1e-5, 1e-6);
  model.compile(tessel::optimizers::adam{.learning_rate = 0.01},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{.name = "accuracy"}});
  for (const json& s : m["steps"]) {
    const std::string step = "step " + std::to_string(s["step"].get<int>());
    const tessel::logs l = model.train_on_batch(x, y);
    check_close({static_cast<float>(*tessel::find_log(l, "loss"))}, {s["loss"].get<float>()},
                step + " loss");
    check_close({static_cast<float>(*tessel::find_log(l, "accuracy"))},
                {s["accuracy"].get<float>()}, step + " accuracy");
    const auto now = model.get_weights();
    REQUIRE(now.size() == s["weights"].size());
    for (std::size_t k = 0; k < now.size(); ++k)
      check_close(now[k].values, values(s["weights"][k]["value"]),
                  step + " " + s["weights"][k]["path"].get<std::string>(), 1e-5, 1e-6);
  }
  // After three Adam steps each weight agrees within 1e-5; the outputs compound those
  // differences through three or four layers (in check_close's measure: 1.2e-5 on the residual
  // block, 1.3e-5 on the two branches, 3.3e-5 on the inner residual block, whose smallest
  // outputs are near 0.1).
  check_close(model.predict(x).values, values(m["predictions"]), "predictions", 5e-5, 1e-6);
}
}  // namespace

TEST_CASE("golden: a residual block (functional: dense, dense, add with the input, relu, dense)",
          "[golden][functional]") {
  using namespace tessel::layers;
  const json m = load("functional.json")["models"][0];
  REQUIRE(m["name"] == "residual");
  using x = input<16>;
  using h = dense<16, {.name = "d2"}>::on<dense<32, {.activation = "relu", .name = "d1"}>::on<x>>;
  using y = dense<4, {.name = "head"}>::on<relu<"relu">::on<add<"add">::on<x, h>>>;
  tessel::basic_functional<B, tessel::one_device, x, y> model("residual");
  check_functional(model, m);
}

TEST_CASE("golden: two branches joined by concatenate (functional)", "[golden][functional]") {
  using namespace tessel::layers;
  const json m = load("functional.json")["models"][1];
  REQUIRE(m["name"] == "two_branch");
  using x = input<12>;
  using a = dense<8, {.activation = "relu", .name = "a"}>::on<x>;
  using b = dense<6, {.activation = "tanh", .name = "b"}>::on<x>;
  using y = dense<3, {.name = "out"}>::on<concatenate<"concat">::on<a, b>>;
  tessel::basic_functional<B, tessel::one_device, x, y> model("two_branch");
  check_functional(model, m);
}

TEST_CASE("golden: a residual join of a layer's output that another layer reads too (functional)",
          "[golden][functional]") {
  using namespace tessel::layers;
  const json m = load("functional.json")["models"][2];
  REQUIRE(m["name"] == "inner_residual");
  using x = input<10>;
  using p = dense<16, {.activation = "tanh", .name = "pre"}>::on<x>;
  using h = dense<16, {.name = "d2"}>::on<dense<24, {.activation = "relu", .name = "d1"}>::on<p>>;
  using y = dense<4, {.name = "head"}>::on<add<"add">::on<p, h>>;
  tessel::basic_functional<B, tessel::one_device, x, y> model("inner_residual");
  check_functional(model, m);
}

// Branches of unequal depth joined by an add, each operand order: Keras orders the layers by
// depth (the longest path to the output), ties broken by the order a depth-first walk from the
// output first reaches them (trunk, p1a, p1b, p2, p1c with the short branch first). Its summary,
// its variables' order and set_weights(keras_model.get_weights()) follow that order; p2, p1a,
// p1b and p1c have kernels of one shape, so weights loaded in another order would be taken
// silently and only the values would show it.
template <bool short_first>
void check_unequal_branches(std::size_t index, const std::string& name) {
  using namespace tessel::layers;
  const json m = load("functional.json")["models"][index];
  REQUIRE(m["name"] == name);
  using x = input<8>;
  using trunk = dense<6, {.activation = "relu", .name = "trunk"}>::on<x>;
  using p2 = dense<6, {.name = "p2"}>::on<trunk>;
  using p1a = dense<6, {.activation = "tanh", .name = "p1a"}>::on<trunk>;
  using p1b = dense<6, {.activation = "relu", .name = "p1b"}>::on<p1a>;
  using p1c = dense<6, {.name = "p1c"}>::on<p1b>;
  using joined = std::conditional_t<short_first, add<"add">::on<p2, p1c>, add<"add">::on<p1c, p2>>;
  using y = dense<3, {.name = "head"}>::on<joined>;
  tessel::basic_functional<B, tessel::one_device, x, y> model(name);
  std::vector<std::string> order;
  for (const json& l : m["layers"]) order.push_back(l["name"].get<std::string>());
  std::vector<std::string> ours{"input_layer"};
  for (std::size_t i = 0; i < model.layer_count; ++i) ours.emplace_back(model.layer_name(i));
  CHECK(ours == order);
  check_functional(model, m);
}

TEST_CASE("golden: branches of unequal depth joined by add, in Keras's layer order (functional)",
          "[golden][functional]") {
  check_unequal_branches<true>(3, "unequal_branches");
  check_unequal_branches<false>(4, "unequal_branches_long_first");
}

TEST_CASE("golden: layer normalization forward and gradients, 2-D and 3-D inputs",
          "[golden][layers]") {
  using namespace tessel::layers;
  const json all = load("layer_normalization.json");
  CHECK(all["keras_default_epsilon"].get<double>() == layer_normalization_args{}.epsilon);
  REQUIRE(all["cases"].size() == 2);
  for (const json& c : all["cases"]) {
    const std::string name = "LayerNormalization " + c["name"].get<std::string>();
    REQUIRE(c["epsilon"].get<double>() == layer_normalization_args{}.epsilon);
    const auto xs = shape_of(c["x"]);
    tessel::shape_value in{};
    in.rank = xs.size() - 1;
    for (std::size_t d = 0; d + 1 < xs.size(); ++d) in.extents[d] = xs[d + 1];
    lone_layer<layer_normalization<>> ln(in, in);
    REQUIRE(ln.vars.size() == 2);
    CHECK(ln.vars[0].path.ends_with("/gamma"));
    CHECK(ln.vars[1].path.ends_with("/beta"));
    CHECK(ln.vars[0].numpy() == std::vector<float>(xs.back(), 1.0f));  // Keras's initializers
    CHECK(ln.vars[1].numpy() == std::vector<float>(xs.back(), 0.0f));
    ln.vars[0].assign(values(c["gamma"]));
    ln.vars[1].assign(values(c["beta"]));
    const matrix x = device(c["x"]);
    tessel::pass_context ctx{.training = true};
    check_close(tessel::call_forward(ln.rt, tessel::batch_block<B>(x), ctx).local(), c["y"],
                name + " y");
    // The gradients of sum(y * w): dy = w.
    const matrix dy = device(c["w"]);
    check_close(tessel::call_backward(ln.rt, tessel::batch_block<B>(x), dy, true, ctx), c["dx"],
                name + " dx");
    check_close(ln.vars[0].gradient, c["dgamma"], name + " dgamma");
    check_close(ln.vars[1].gradient, c["dbeta"], name + " dbeta");
  }
}

TEST_CASE("golden: binary cross-entropy on probabilities (clipped) and on logits",
          "[golden][losses]") {
  const json g = load("binary_crossentropy.json");
  REQUIRE(g["cases"].size() == 5);
  for (const json& c : g["cases"]) {
    const std::string name = c["name"];
    INFO("case " << name);
    REQUIRE(c["label_smoothing"].get<double>() == 0.0);
    const matrix pred = device(c["y_pred"]);
    const matrix targets = device(c["y_true"]);
    const std::size_t rows = pred.extent(0), cols = pred.extent(1);
    const tessel::loss_spec loss =
        tessel::losses::binary_crossentropy{.from_logits = c["from_logits"].get<bool>()};
    matrix grad = B::make_matrix("grad", rows, cols);
    const double total = tessel::loss_and_gradient<B>(loss, pred, B::index_vector(), targets,
                                                      grad, 1.0f / static_cast<float>(rows));
    check_close({static_cast<float>(total / static_cast<double>(rows))},
                {c["loss_value"].get<float>()}, name + " loss");
    check_close(grad, c["grad_y_pred"], name + " gradient");
  }
  CHECK(tessel::loss_spec("binary_crossentropy").name() == "binary_crossentropy");
  CHECK(tessel::loss_spec("BinaryCrossentropy").plan_rule() == &tessel::loss_rules::elementwise);
}

TEST_CASE("golden: mean absolute error, a metric that is not an accuracy", "[golden][metrics]") {
  const json g = load("mean_absolute_error.json")["metric"];
  const tessel::metrics::metric_function<B> m = tessel::metrics::mean_absolute_error{};
  CHECK(!m.takes_argmax());
  CHECK(m.increases() == false);
  CHECK(tessel::metrics::resolve_metric<B>("mae", false)
            .is<tessel::metrics::mean_absolute_error>());
  REQUIRE(g["batches"].size() == 2);
  tessel::testing::golden::check_running_metric(m, g, "MeanAbsoluteError");
  // Compiled in a model: its logs, from the model's own predictions, and early stopping's mode.
  using namespace tessel::layers;
  model_on<input<3>, dense<3>> model;
  model.compile("sgd", "mse", {"mae"});
  const json& b = g["batches"][0];
  const tessel::array<float> x = to_array(b["y_pred"]), y = to_array(b["y_true"]);
  const tessel::array<float> p = model.predict(x);
  double expected = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) expected += std::fabs(p.values[i] - y.values[i]);
  expected /= static_cast<double>(p.size());
  const tessel::logs l = model.evaluate(x, y, 32, 0);
  check_close({static_cast<float>(*tessel::find_log(l, "mae"))}, {static_cast<float>(expected)},
              "evaluate mae");
  CHECK(model.metric_increases("mae") == std::optional<bool>(false));
  CHECK(model.metric_increases("missing") == std::nullopt);
  // With a loss on integer labels there are no target vectors to compare with.
  model_on<input<3>, dense<3>> sparse_model;
  sparse_model.compile("sgd", "sparse_categorical_crossentropy", {"mae"});
  const tessel::array<std::int32_t> labels({4}, {0, 1, 2, 1});
  CHECK_THROWS_WITH(sparse_model.train_on_batch(x, labels),
                    Catch::Contains("Metric mae takes target vectors of the output's shape, but "
                                    "the loss sparse_categorical_crossentropy takes integer labels"));
}
