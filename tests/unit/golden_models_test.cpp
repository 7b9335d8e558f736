// Keras parity of whole models, against tests/golden/ as golden_test.cpp (its tolerance): the
// seeds' MLPs through fit, evaluate and predict, summary(), functional graphs, layer
// normalization, binary cross-entropy and mean absolute error.
#include <catch2/catch.hpp>

#include "golden_test_helpers.hpp"

namespace {

template <class Model, class Y>
void check_training_steps(Model& model, const json& m, const tessel::array<Y>& y) {
  std::vector<tessel::array<float>> w;
  for (const json& v : m["initial_weights"]) w.push_back(to_array(v["value"]));
  model.set_weights(w);
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

namespace {
// Splits UTF-8 text into code points (each box character is one).
std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}
// tessel's summary without its layout column: Keras's table (three columns, or four with a
// functional graph's "Connected to").
std::string without_layout_column(const std::string& text, bool connections = false) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string line;
  // Cells up to the border before the layout column.
  const std::size_t cut =
      connections ? 1 + 31 + 1 + 27 + 1 + 17 + 1 + 28 : 1 + 38 + 1 + 29 + 1 + 17;
  while (std::getline(in, line)) {
    auto cps = code_points(line);
    if (cps.size() > cut && (cps[0] == "┏" || cps[0] == "┃" || cps[0] == "┡" || cps[0] == "│" ||
                             cps[0] == "├" || cps[0] == "└")) {
      std::string first3;
      for (std::size_t i = 1; i < cut; ++i) first3 += cps[i];
      if (cps[0] == "│" && first3.find_first_not_of(" │") == std::string::npos) continue;
      const std::string& sep = cps[cut];
      const std::string close = sep == "┳"   ? "┓"
                                : sep == "╇" ? "┩"
                                : sep == "┼" ? "┤"
                                : sep == "┴" ? "┘"
                                             : sep;
      line.clear();
      for (std::size_t i = 0; i < cut; ++i) line += cps[i];
      line += close;
    }
    out << line << "\n";
  }
  return out.str();
}
std::string read_text(const std::string& name) {
  std::ifstream in(golden_dir() + "/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

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
  CHECK(tessel::loss_spec("BinaryCrossentropy").plan_kind() == tessel::loss_kind::elementwise);
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
