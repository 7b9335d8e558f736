// The model API as a Keras user meets it: layer names and shapes, initial weights, fit /
// evaluate / predict, the progress output, callbacks, the custom-training-loop pieces, and the
// messages of the errors a user makes most. Small synthetic data only: every case runs in a
// fraction of a second.
// The callbacks and the errors are tested in model_callbacks_test.cpp and model_errors_test.cpp.
#include <catch2/catch.hpp>

#include "model_test_helpers.hpp"

// ---- model -------------------------------------------------------------------------------------

TEST_CASE("model: layer names, shapes, parameter counts and variable paths", "[model]") {
  using model_t =
      tessel::sequential<input<2, 4>, flatten<>, dense<16>, dense<8, {.activation = "relu"}>,
                         dropout<0.5>, dense<4, {.name = "head"}>, dense<2>>;
  STATIC_REQUIRE(model_t::layer_count == 6);
  STATIC_REQUIRE(model_t::input_shape == tessel::shape_value{2, 4});
  STATIC_REQUIRE(model_t::output_shape == tessel::shape_value{2});
  const std::vector<std::string> names{"flatten", "dense", "dense_1", "dropout", "head", "dense_2"};
  const std::vector<tessel::shape_value> outputs{tessel::shape_value{8}, tessel::shape_value{16},
                                                 tessel::shape_value{8}, tessel::shape_value{8},
                                                 tessel::shape_value{4}, tessel::shape_value{2}};
  for (std::size_t i = 0; i < names.size(); ++i) {
    INFO("layer " << i);
    CHECK(std::string(model_t::layer_infos[i].name.view()) == names[i]);
    CHECK(model_t::layer_infos[i].output == outputs[i]);
    CHECK(model_t::layer_infos[i].input == (i == 0 ? tessel::shape_value{2, 4} : outputs[i - 1]));
  }

  model_t model;
  CHECK(model.name() == "sequential");
  // 8*16+16, 16*8+8, 8*4+4, 4*2+2
  CHECK(model.count_params() == 144 + 136 + 36 + 10);
  std::vector<std::string> paths;
  std::vector<std::vector<std::size_t>> shapes;
  for (auto* v : model.trainable_variables()) {
    paths.push_back(v->path);
    shapes.push_back(v->shape);
    CHECK(v->trainable);
  }
  CHECK(paths == std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel",
                                          "dense_1/bias", "head/kernel", "head/bias",
                                          "dense_2/kernel", "dense_2/bias"});
  CHECK(shapes == std::vector<std::vector<std::size_t>>{
                      {8, 16}, {16}, {16, 8}, {8}, {8, 4}, {4}, {4, 2}, {2}});
  CHECK(model.variables().size() == 8);
  CHECK(model.non_trainable_variables().empty());
  CHECK(model.get_variable("head/kernel").size() == 32);
  CHECK_THROWS_WITH(model.get_variable("head/gamma"),
                    Contains("No variable named 'head/gamma' in model 'sequential'"));
  const auto weights = model.get_weights();
  REQUIRE(weights.size() == 8);
  CHECK(weights[0].size() == 128);
  CHECK(weights[1].size() == 16);

  const std::string summary = model.summary_text();
  for (const auto& n : names) CHECK_THAT(summary, Contains(n));
  CHECK_THAT(summary, Contains("Total params: 326"));
  CHECK_THAT(summary, !Contains("Memory plan"));  // nothing trained yet: no batch to plan for

  // Once trained, the memory plan of the last global batch closes the summary.
  model.compile("adam", "mse");
  model.train_on_batch(tessel::array<float>({6, 2, 4}), tessel::array<float>({6, 2}));
  const tessel::memory_plan m = model.memory(6);
  CHECK(m.optimizer_state == 2 * 326 * sizeof(float));
  CHECK_THAT(model.summary_text(),
             Catch::EndsWith(" Memory plan per device (global batch 6): weights 1304 B, gradients 1304 "
                      "B, optimizer state 2608 B, activations " +
                      std::to_string(m.activations) + " B, activation gradients " +
                      std::to_string(m.activation_gradients) +
                      " B, communication buffers 0 B; peak " + std::to_string(m.peak()) +
                      " B (largest: optimizer state)\n"));

  // A model's own name, and names given to every layer.
  tessel::sequential<input<3>, dense<2, {.name = "a"}>, dense<2, {.name = "b"}>> named("mlp");
  CHECK(named.name() == "mlp");
  CHECK(named.trainable_variables()[2]->path == "b/kernel");
}

TEST_CASE("model: initial weights follow set_random_seed, glorot_uniform kernels and zero biases",
          "[model]") {
  using model_t = tessel::sequential<input<64>, dense<32>, dense<8, {.use_bias = false}>>;
  std::vector<tessel::array<float>> a, b, c;
  {
    seed_scope s(42);
    model_t m1, m2;
    a = m1.get_weights();
    b = m2.get_weights();
  }
  {
    seed_scope s(43);
    model_t m3;
    c = m3.get_weights();
  }
  REQUIRE(a.size() == 3);
  CHECK(a == b);
  CHECK(a[0] != c[0]);
  CHECK(a[2] != c[2]);
  CHECK(a[1] == c[1]);  // zeros whatever the seed

  // Two kernels of one model are different draws.
  CHECK(std::vector<float>(a[0].begin(), a[0].begin() + 256) != a[2].values);

  const double limit = std::sqrt(6.0 / (64 + 32));
  double sum = 0, sum_sq = 0, largest = 0;
  for (float w : a[0]) {
    sum += w;
    sum_sq += static_cast<double>(w) * w;
    largest = std::max(largest, std::fabs(static_cast<double>(w)));
  }
  const double n = static_cast<double>(a[0].size());
  CHECK(largest <= limit);
  CHECK(largest > 0.95 * limit);
  CHECK(std::fabs(sum / n) < 0.01);  // standard error 0.0032
  // Uniform(-limit, limit) has variance limit^2 / 3 = 2 / (fan_in + fan_out).
  CHECK(sum_sq / n == Approx(2.0 / (64 + 32)).epsilon(0.1));
  for (float w : a[1]) CHECK(w == 0.0f);
  const double limit2 = std::sqrt(6.0 / (32 + 8));
  for (float w : a[2]) CHECK(std::fabs(w) <= limit2);
}

TEST_CASE("model: fit learns a separable problem with adam, sgd with momentum and rmsprop",
          "[model]") {
  const auto train = blob_dataset(240, 1);
  const auto test = blob_dataset(120, 2);
  const std::vector<std::pair<std::string, tessel::optimizer_spec>> optimizers{
      {"adam", tessel::optimizers::adam{.learning_rate = 0.01}},
      {"sgd", tessel::optimizers::sgd{.learning_rate = 0.05, .momentum = 0.9}},
      {"rmsprop", tessel::optimizers::rmsprop{.learning_rate = 0.01}}};
  for (const auto& [name, opt] : optimizers) {
    INFO("optimizer " << name);
    seed_scope s(3);
    blob_model model;
    compile_blob(model, opt);
    const double before = log_value(model.evaluate(test, 0), "loss");
    const tessel::history h = model.fit(train, {.epochs = 8, .verbose = 0});
    CHECK(h.epoch == std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7});
    REQUIRE(h.history.at("loss").size() == 8);
    REQUIRE(h.history.at("accuracy").size() == 8);
    CHECK(h.history.size() == 2);
    CHECK(h.history.at("loss").back() < 0.5 * h.history.at("loss").front());
    CHECK(h.history.at("accuracy").back() >= 0.95);
    const tessel::logs result = model.evaluate(test, 0);
    CHECK(names_of(result) == std::vector<std::string>{"loss", "accuracy"});
    CHECK(log_value(result, "loss") < before);
    CHECK(log_value(result, "accuracy") >= 0.95);
    CHECK(model.get_optimizer().iterations() == 8 * 15);  // 240 / 16 batches a epoch
  }
}

TEST_CASE("model: validation_data, initial_epoch and metric names in the history", "[model]") {
  seed_scope s(5);
  blob_model model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  const auto train = blob_dataset(96, 7);
  const auto val = blob_dataset(48, 8);
  const tessel::history h = model.fit(train, {.epochs = 3, .verbose = 0, .validation_data = val});
  std::vector<std::string> keys;
  for (const auto& [k, v] : h.history) {
    keys.push_back(k);
    CHECK(v.size() == 3);
  }
  CHECK(keys == std::vector<std::string>{"loss", "sparse_categorical_accuracy", "val_loss",
                                         "val_sparse_categorical_accuracy"});
  // The last epoch's val_ entries are what evaluate gives on the validation data afterwards.
  const tessel::logs e = model.evaluate(val, 0);
  CHECK(h.history.at("val_loss").back() == Approx(log_value(e, "loss")).epsilon(1e-6));
  CHECK(h.history.at("val_sparse_categorical_accuracy").back() ==
        Approx(log_value(e, "sparse_categorical_accuracy")));

  // initial_epoch = 1 with epochs = 3 runs epochs 1 and 2.
  const tessel::history h2 = model.fit(train, {.epochs = 3, .verbose = 0, .initial_epoch = 1});
  CHECK(h2.epoch == std::vector<std::size_t>{1, 2});
  CHECK(h2.history.at("loss").size() == 2);
  CHECK(model.get_optimizer().iterations() == 5 * 6);
}

TEST_CASE("model: predict matches call() batch by batch, evaluate averages over samples",
          "[model]") {
  seed_scope s(9);
  tessel::sequential<input<4>, dense<8, {.activation = "tanh"}>, dropout<0.5>, dense<3>> model;
  const blobs data = make_blobs(10, 11);
  // predict needs no compile (as in Keras).
  const tessel::array<float> p = model.predict(data.x, 4);
  CHECK(p.shape == std::vector<std::size_t>{10, 3});
  REQUIRE(p.values.size() == 30);
  const std::vector<float> direct = host(model.call(data.x));
  REQUIRE(direct.size() == 30);
  for (std::size_t k = 0; k < 30; ++k) CHECK(p.values[k] == Approx(direct[k]).epsilon(1e-6));
  // Inference: dropout is off, so predicting again gives the same values (to rounding: another
  // batch size may take another GEMM kernel, as in any BLAS).
  const std::vector<float> whole_batch = model.predict(data.x).values;
  const std::vector<float> batches_of_3 = model.predict(data.x, 3).values;
  REQUIRE(whole_batch.size() == batches_of_3.size());
  for (std::size_t k = 0; k < whole_batch.size(); ++k)
    CHECK(whole_batch[k] == Approx(batches_of_3[k]).epsilon(1e-6));
  // Training mode is different (dropout on).
  CHECK(host(model.call(data.x, true)) != direct);

  model.compile(tessel::optimizers::sgd{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true}, {"accuracy"});
  const auto ds = tessel::from_tensor_slices(data.x, data.y);
  const tessel::logs whole = model.evaluate(ds.batch(10), 0);
  const tessel::logs pieces = model.evaluate(ds.batch(3), 0);  // 3 + 3 + 3 + 1
  CHECK(names_of(whole) == std::vector<std::string>{"loss", "accuracy"});
  CHECK(log_value(pieces, "loss") == Approx(log_value(whole, "loss")).epsilon(1e-6));
  CHECK(log_value(pieces, "accuracy") == Approx(log_value(whole, "accuracy")));
  // The accuracy is the share of samples whose largest output is the label; the loss is the
  // mean of -log softmax(output)[label].
  std::size_t hits = 0;
  double loss = 0;
  for (std::size_t i = 0; i < 10; ++i) {
    const float* row = &p.values[i * 3];
    const auto best = static_cast<std::int32_t>(std::max_element(row, row + 3) - row);
    hits += best == data.y.values[i] ? 1 : 0;
    double sum = 0;
    for (std::size_t j = 0; j < 3; ++j) sum += std::exp(static_cast<double>(row[j]));
    loss += std::log(sum) - row[data.y.values[i]];
  }
  CHECK(log_value(whole, "accuracy") == Approx(static_cast<double>(hits) / 10));
  CHECK(log_value(whole, "loss") == Approx(loss / 10).epsilon(1e-5));
  // evaluate changes no weights.
  const auto w = model.get_weights();
  model.evaluate(ds.batch(4), 0);
  CHECK(model.get_weights() == w);
}

TEST_CASE("model: a stateless layer before the first dense layer trains", "[model]") {
  // Nothing needs the gradient of a layer before the first layer with variables; its backward
  // must not run on the (absent) input gradient of the dense layer after it.
  seed_scope s(13);
  tessel::sequential<input<4>, activation<"tanh">, rescaling<2.0>, dense<3>> model;
  compile_blob(model, tessel::optimizers::adam{.learning_rate = 0.02});
  const tessel::history h = model.fit(blob_dataset(240, 1), {.epochs = 5, .verbose = 0});
  CHECK(h.history.at("loss").back() < 0.5 * h.history.at("loss").front());
  CHECK(h.history.at("accuracy").back() >= 0.9);
}

TEST_CASE("model: compute_loss_and_gradients + apply_gradients reproduce train_on_batch",
          "[model]") {
  // seeds/002's custom training loop: the pieces give exactly what train_on_batch does, dropout
  // masks included (both advance the step that keys them).
  using model_t =
      tessel::sequential<input<4>, dense<16, {.activation = "relu"}>, dropout<0.3>, dense<3>>;
  const blobs data = make_blobs(48, 17);
  std::vector<tessel::array<float>> xs;
  std::vector<tessel::array<std::int32_t>> ys;
  for (std::size_t b = 0; b < 3; ++b) {
    xs.push_back(tessel::data::slice_rows(data.x, b * 16, b * 16 + 16));
    ys.push_back(tessel::data::slice_rows(data.y, b * 16, b * 16 + 16));
  }
  seed_scope s(21);
  model_t a, b;
  REQUIRE(a.get_weights() == b.get_weights());
  compile_blob(a);
  compile_blob(b);
  for (std::size_t step = 0; step < 3; ++step) {
    INFO("step " << step);
    const tessel::logs l = a.train_on_batch(xs[step], ys[step]);
    b.reset_metrics();
    const double loss = b.compute_loss_and_gradients(xs[step], ys[step]);
    b.apply_gradients();
    CHECK(log_value(l, "loss") == loss);
    CHECK(names_of(b.metric_logs()) == names_of(l));
    CHECK(log_value(b.metric_logs(), "accuracy") == log_value(l, "accuracy"));
  }
  CHECK(a.get_weights() == b.get_weights());
  CHECK(a.get_optimizer().iterations() == 3);
  CHECK(b.get_optimizer().iterations() == 3);

  // The optimizer on its own: Keras 3's slot names, one step per apply.
  seed_scope s2(21);
  model_t c;
  compile_blob(c, tessel::optimizers::sgd{});  // for the loss; its optimizer stays unused
  tessel::optimizer<> adam(tessel::optimizers::adam{});
  CHECK(adam.iterations() == 0);
  for (std::size_t step = 0; step < 3; ++step) {
    c.compute_loss_and_gradients(xs[step], ys[step]);
    adam.apply(c.trainable_variables());
  }
  CHECK(adam.iterations() == 3);
  CHECK(c.get_optimizer().iterations() == 0);
  // Dropout's step advances in apply_gradients only, so c saw one mask three times: its weights
  // differ from a's. Without dropout they agree (below).
  std::vector<std::string> slot_names;
  for (auto* v : adam.variables()) {
    slot_names.push_back(v->path);
    CHECK_FALSE(v->trainable);
  }
  CHECK(slot_names ==
        std::vector<std::string>{"adam/dense_kernel_momentum", "adam/dense_kernel_velocity",
                                 "adam/dense_bias_momentum", "adam/dense_bias_velocity",
                                 "adam/dense_1_kernel_momentum", "adam/dense_1_kernel_velocity",
                                 "adam/dense_1_bias_momentum", "adam/dense_1_bias_velocity"});
  CHECK(adam.variables()[0]->shape == std::vector<std::size_t>{4, 16});

  {
    seed_scope s3(23);
    blob_model d, e;
    compile_blob(d);
    compile_blob(e, "sgd");
    tessel::optimizer<> standalone(tessel::optimizers::adam{});
    for (std::size_t step = 0; step < 3; ++step) {
      d.train_on_batch(xs[step], ys[step]);
      e.compute_loss_and_gradients(xs[step], ys[step]);
      standalone.apply(e.trainable_variables());
    }
    CHECK(d.get_weights() == e.get_weights());
  }

  tessel::optimizer<> sgd(tessel::optimizers::sgd{.momentum = 0.9});
  sgd.build(c.trainable_variables());
  CHECK(sgd.variables().size() == 4);
  CHECK(sgd.variables()[0]->path == "sgd/dense_kernel_momentum");
  tessel::optimizer<> plain_sgd(tessel::optimizers::sgd{});
  plain_sgd.build(c.trainable_variables());
  CHECK(plain_sgd.variables().empty());
  tessel::optimizer<> rms(tessel::optimizers::rmsprop{.momentum = 0.5, .centered = true});
  rms.build(c.trainable_variables());
  REQUIRE(rms.variables().size() == 12);
  CHECK(rms.variables()[0]->path == "rmsprop/dense_kernel_velocity");
  CHECK(rms.variables()[1]->path == "rmsprop/dense_kernel_momentum");
  CHECK(rms.variables()[2]->path == "rmsprop/dense_kernel_average_gradient");
}

// ---- progress output ---------------------------------------------------------------------------

TEST_CASE("model: fit's output at verbose 2, 1 and 0 is Keras's", "[model]") {
  const std::regex line(
      R"(^\d+/\d+ - \d+s - \d+(us|ms|s)/step - accuracy: \d\.\d{4} - loss: \d\.\d{4}( - val_accuracy: \d\.\d{4} - val_loss: \d\.\d{4})?$)");
  const auto train = blob_dataset(240, 1);
  const auto val = blob_dataset(48, 2);
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  std::string text;
  {
    capture out;
    model.fit(train, {.epochs = 2, .verbose = 2, .validation_data = val});
    text = out.text();
  }
  INFO("output:\n" << text);
  CHECK(text.starts_with("Epoch 1/2\n"));
  auto lines = lines_of(text);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "Epoch 1/2");
  CHECK(lines[2] == "Epoch 2/2");
  for (std::size_t i : {1, 3}) {
    INFO("line " << lines[i]);
    CHECK(std::regex_match(lines[i], line));
    CHECK(lines[i].starts_with("15/15 - "));
    CHECK_THAT(lines[i], Contains(" - val_accuracy: "));
  }

  // Without validation, and with one epoch: no "Epoch" header.
  {
    capture out;
    model.fit(train, {.epochs = 1, .verbose = 2});
    text = out.text();
  }
  lines = lines_of(text);
  REQUIRE(lines.size() == 1);
  CHECK(std::regex_match(lines[0], line));
  CHECK_THAT(text, !Contains("Epoch"));
  CHECK_THAT(text, !Contains("val_"));

  // verbose 1: a bar redrawn in place, ending with the finished bar and a newline.
  {
    capture out;
    model.fit(train, {.epochs = 2, .verbose = 1});
    text = out.text();
  }
  CHECK(text.starts_with("Epoch 1/2\n"));
  CHECK_THAT(text, Contains("\nEpoch 2/2\n"));
  CHECK_THAT(text, Contains("\x1b[1m15/15\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m"));
  CHECK_THAT(text, Contains(" - accuracy: "));
  CHECK(text.ends_with("\n"));

  // verbose 0 prints nothing, in fit and in evaluate.
  {
    capture out;
    model.fit(train, {.epochs = 2, .verbose = 0, .validation_data = val});
    model.evaluate(val, 0);
    text = out.text();
  }
  CHECK(text.empty());

  // evaluate at verbose 2: one line.
  {
    capture out;
    model.evaluate(val, 2);
    text = out.text();
  }
  lines = lines_of(text);
  REQUIRE(lines.size() == 1);
  CHECK(std::regex_match(lines[0], line));
  CHECK(lines[0].starts_with("3/3 - "));

  // Other metric names are shown as given, in sorted order.
  blob_model other;
  other.compile("adam", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  {
    capture out;
    other.fit(train, {.epochs = 1, .verbose = 2});
    text = out.text();
  }
  CHECK(std::regex_match(
      text,
      std::regex(
          R"(15/15 - \d+s - \d+(us|ms|s)/step - loss: \d\.\d{4} - sparse_categorical_accuracy: \d\.\d{4}\n)")));
}

// ---- callbacks ---------------------------------------------------------------------------------
