// Keras parity: layer outputs and gradients, losses and their gradients, three steps of each
// optimizer, metrics, whole training steps and the summary, against the values Keras 3 (JAX
// backend, CPU) wrote into tests/golden/ (see tests/golden/README.md). Tolerance: relative 1e-5
// per element, measured against |expected| + 0.1 * (the largest |expected| in the same array):
// an element that is a sum of cancelling terms (a bias gradient of -0.0018 summed from terms of
// size 0.5) cannot agree to 1e-5 of itself in float32, whatever order the sums run in.
#include <catch2/catch.hpp>

#include "golden_test_helpers.hpp"

TEST_CASE("golden: dense forward and gradients for every activation, with and without bias",
          "[golden][layers]") {
  using namespace tessel::layers;
  const json g = load("layers.json")["dense"];
  std::size_t checked = 0;
  for (const json& c : g["cases"]) {
    const std::string a = c["activation"];
    const bool bias = c["use_bias"];
    if (!bias && a == "relu")
      check_dense_case<dense<3, {.activation = "relu", .use_bias = false}>>(g, c);
    else if (a == "linear")
      check_dense_case<dense<3>>(g, c);
    else if (a == "relu")
      check_dense_case<dense<3, {.activation = "relu"}>>(g, c);
    else if (a == "softmax")
      check_dense_case<dense<3, {.activation = "softmax"}>>(g, c);
    else if (a == "sigmoid")
      check_dense_case<dense<3, {.activation = "sigmoid"}>>(g, c);
    else if (a == "tanh")
      check_dense_case<dense<3, {.activation = "tanh"}>>(g, c);
    else
      FAIL("unexpected golden case " << a);
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("golden: relu, softmax and activation layers", "[golden][layers]") {
  using namespace tessel::layers;
  const json g = load("layers.json")["activations"];
  std::size_t checked = 0;
  for (const json& c : g["cases"]) {
    const std::string layer = c["layer"];
    const std::string fn = c.contains("activation") ? c["activation"].get<std::string>() : "";
    if (layer == "ReLU")
      check_activation_case<relu<>>(g, c, "ReLU");
    else if (layer == "Softmax")
      check_activation_case<softmax<>>(g, c, "Softmax");
    else if (fn == "relu")
      check_activation_case<activation<"relu">>(g, c, "Activation(relu)");
    else if (fn == "softmax")
      check_activation_case<activation<"softmax">>(g, c, "Activation(softmax)");
    else if (fn == "sigmoid")
      check_activation_case<activation<"sigmoid">>(g, c, "Activation(sigmoid)");
    else if (fn == "tanh")
      check_activation_case<activation<"tanh">>(g, c, "Activation(tanh)");
    else if (fn == "linear")
      check_activation_case<activation<"linear">>(g, c, "Activation(linear)");
    else
      FAIL("unexpected golden case " << layer << " " << fn);
    ++checked;
  }
  CHECK(checked == 7);
}

TEST_CASE("golden: rescaling, flatten and dropout at inference", "[golden][layers]") {
  using namespace tessel::layers;
  const json all = load("layers.json");
  const json& r = all["rescaling"];
  REQUIRE(r["cases"].size() == 2);
  check_activation_case<rescaling<1.0 / 255>>(r, r["cases"][0], "Rescaling(1/255)");
  check_activation_case<rescaling<2.0, {.offset = -1.0}>>(r, r["cases"][1], "Rescaling(2, -1)");

  // Flatten keeps the values in row-major order: (2, 3, 4) -> (2, 12).
  const json& f = all["flatten"];
  lone_layer<flatten<>> fl(tessel::shape_value{3, 4}, tessel::shape_value{12});
  const matrix x = device(f["x"]);
  check_close(tessel::call_forward(fl.rt, tessel::batch_block<B>(x), {}).local(), f["y"],
              "Flatten y");
  CHECK(shape_of(f["y"]) == std::vector<std::size_t>{2, 12});

  const json& d = all["dropout"];
  lone_layer<dropout<0.4>> dr(tessel::shape_value{5}, tessel::shape_value{5});
  check_close(
      tessel::call_forward(dr.rt, tessel::batch_block<B>(device(d["x"])), {.training = false})
          .local(),
      d["y_training_false"], "Dropout(training=False)");
}

TEST_CASE("golden: losses and their gradients (sum_over_batch_size, probability clipping)",
          "[golden][losses]") {
  const json g = load("losses.json");
  REQUIRE(g["cases"].size() == 8);
  for (const json& c : g["cases"]) {
    const std::string name = c["name"];
    INFO("case " << name);
    const matrix pred = device(c["y_pred"]);
    const std::size_t rows = pred.extent(0), cols = pred.extent(1);
    const bool sparse = shape_of(c["y_true"]).size() == 1;
    B::index_vector labels;
    matrix targets;
    if (sparse) {
      const auto l = c["y_true"]["data"].get<std::vector<std::int32_t>>();
      labels = B::make_indices("labels", rows);
      B::upload(std::span<const std::int32_t>(l), labels);
    } else {
      targets = device(c["y_true"]);
    }
    const bool logits = c["from_logits"].is_boolean() && c["from_logits"].get<bool>();
    const tessel::loss_spec loss = loss_for(name, sparse, logits);
    matrix grad = B::make_matrix("grad", rows, cols);
    const double total = tessel::loss_and_gradient<B>(loss, pred, labels, targets, grad,
                                                      1.0f / static_cast<float>(rows));
    check_close({static_cast<float>(total / static_cast<double>(rows))},
                {c["loss_value"].get<float>()}, name + " loss");
    check_close(grad, c["grad_y_pred"], name + " gradient");
  }
}

// Each case's optimizer made from Keras's config by the registry (as a parameter server makes
// one from the chief's description): the class by name, every field of it from the config.
TEST_CASE("golden: three steps of each library optimizer in each configuration",
          "[golden][optimizers]") {
  const json g = load("optimizers.json");
  REQUIRE(g["cases"].size() == 23);
  for (const json& c : g["cases"]) {
    INFO("case " << c["case"].get<std::string>());
    tessel::optimizers::config config;
    config.class_name = c["class"].get<std::string>();
    for (const auto& [key, value] : c["config"].items()) {
      if (key == "name") continue;
      if (key == "weight_decay" || key == "clipvalue") {
        (key == "weight_decay" ? config.weight_decay : config.clipvalue) =
            value.is_null() ? 0.0 : value.get<double>();
        continue;
      }
      config.values.emplace_back(key, value.is_boolean()
                                          ? tessel::optimizers::value(value.get<bool>())
                                          : tessel::optimizers::value(value.get<double>()));
    }
    tessel::optimizer<B> opt(tessel::optimizers::make_optimizer<B>(config, "golden"));
    CHECK(opt.spec().class_name() == config.class_name);
    opt.exclude_from_weight_decay(c["exclude_from_weight_decay"].get<std::vector<std::string>>());
    tessel::variable_store<B> store;
    auto& w = tessel::add_variable(store, "w", {2, 3}, "zeros", 0);
    w.assign(values(g["w0"]));
    for (std::size_t step = 0; step < 3; ++step) {
      const std::string at = "step " + std::to_string(step + 1);
      B::upload(values(g["grads"][step]), w.gradient);
      opt.apply({&w});
      check_close(w.numpy(), values(c["steps"][step]["w"]), at + " w");
      // The slots, by Keras's names ("<optimizer>/w_<slot>").
      const tessel::state_list<B> state = opt.state();
      REQUIRE(state.size() ==
              2 + c["steps"][step]["slots"].size() + c["steps"][step]["scalars"].size());
      // The optimizer's own scalars (Nadam's product of momentum factors), after the slots.
      for (const auto& [name, expected] : c["steps"][step]["scalars"].items()) {
        const tessel::state_variable<B>* v = state.find(name);
        REQUIRE(v != nullptr);
        CHECK(v->real() == Approx(expected.get<double>()).epsilon(1e-6));
      }
      for (const auto& [slot, expected] : c["steps"][step]["slots"].items()) {
        const tessel::state_variable<B>* v = state.find(std::string(opt.name()) + "/w_" + slot);
        REQUIRE(v != nullptr);
        check_close(v->numpy(), values(expected), at + " " + slot);
      }
    }
    CHECK(opt.iterations() == 3);
  }
}

// clipnorm clips each variable's gradient by its own norm, global_clipnorm all of them by their
// joint norm: two variables tell the two apart.
TEST_CASE("golden: clipnorm and global_clipnorm over two variables", "[golden][optimizers]") {
  const json g = load("gradient_clipping.json");
  REQUIRE(g["cases"].size() == 4);
  for (const json& c : g["cases"]) {
    INFO("case " << c["case"].get<std::string>());
    tessel::optimizers::config config;
    config.class_name = c["class"].get<std::string>();
    for (const auto& [key, value] : c["config"].items()) {
      bool base = false;
      config.for_each_base([&](const char* k, auto& v) {
        if (key == k) {
          v = value.get<std::remove_cvref_t<decltype(v)>>();
          base = true;
        }
      });
      if (!base) config.values.emplace_back(key, value.get<double>());
    }
    tessel::optimizer<B> opt(tessel::optimizers::make_optimizer<B>(config, "golden"));
    CHECK(opt.spec().config().clips_norms());
    tessel::variable_store<B> store;
    auto& w = tessel::add_variable(store, "w", {2, 3}, "zeros", 0);
    auto& b = tessel::add_variable(store, "b", {3}, "zeros", 0);
    w.assign(values(g["w0"]));
    b.assign(values(g["b0"]));
    for (std::size_t step = 0; step < 3; ++step) {
      const std::string at = "step " + std::to_string(step + 1);
      B::upload(values(g["grads"][step][0]), w.gradient);
      B::upload(values(g["grads"][step][1]), b.gradient);
      opt.apply({&w, &b});
      check_close(w.numpy(), values(c["steps"][step]["w"]), at + " w");
      check_close(b.numpy(), values(c["steps"][step]["b"]), at + " b");
    }
  }
}

TEST_CASE("golden: sparse categorical and categorical accuracy, mean", "[golden][metrics]") {
  const json g = load("metrics.json");
  auto accuracy = [](const json& m, bool sparse) {
    const matrix pred = device(m["y_pred"]);
    B::index_vector labels;
    matrix targets;
    if (sparse) {
      const auto l = m["y_true"]["data"].get<std::vector<std::int32_t>>();
      labels = B::make_indices("labels", l.size());
      B::upload(std::span<const std::int32_t>(l), labels);
    } else {
      targets = device(m["y_true"]);
    }
    const B::sums hits = B::make_sums("hits", 1);
    B::count_argmax_equal(pred, labels, targets, hits, 0);
    double count = 0.0;
    B::download(hits, std::span<double>(&count, 1));
    return count / static_cast<double>(pred.extent(0));
  };
  CHECK(accuracy(g["sparse_categorical_accuracy"], true) ==
        Approx(g["sparse_categorical_accuracy"]["result"].get<double>()));
  CHECK(accuracy(g["sparse_categorical_accuracy_ties"], true) ==
        Approx(g["sparse_categorical_accuracy_ties"]["result"].get<double>()));
  CHECK(accuracy(g["categorical_accuracy"], false) ==
        Approx(g["categorical_accuracy"]["result"].get<double>()));
  tessel::metrics::mean m;
  for (const json& u : g["mean"]["updates"])
    for (float v : values(u)) m.update_state(v);
  CHECK(m.result() == Approx(g["mean"]["result"].get<double>()));
}
