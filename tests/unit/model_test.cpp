// The model API as a Keras user meets it: layer names and shapes, initial weights, fit /
// evaluate / predict, the progress output, callbacks, the custom-training-loop pieces, and the
// messages of the errors a user makes most. Small synthetic data only: every case runs in a
// fraction of a second.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

namespace {

using B = tessel::default_backend;
using namespace tessel::layers;
using Catch::Contains;

// A fixed pseudo-random source (mt19937's raw output is specified, <random>'s distributions
// are not).
class rng {
 public:
  explicit rng(std::uint32_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(gen_() >> 8) / 16777216.0);
  }
  std::uint32_t below(std::uint32_t n) { return gen_() % n; }

 private:
  std::mt19937 gen_;
};

// Three well separated classes in four dimensions.
struct blobs {
  tessel::array<float> x;
  tessel::array<std::int32_t> y;
};
blobs make_blobs(std::size_t n, std::uint32_t seed, float noise = 0.8f) {
  static constexpr float centers[3][4] = {
      {1.5f, 0.0f, 0.0f, -1.0f}, {-1.5f, 1.0f, 0.0f, 0.0f}, {0.0f, -1.5f, 1.5f, 1.0f}};
  rng gen(seed);
  blobs b{tessel::array<float>({n, 4}), tessel::array<std::int32_t>({n})};
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t c = gen.below(3);
    b.y.values[i] = static_cast<std::int32_t>(c);
    for (std::size_t k = 0; k < 4; ++k)
      b.x.values[i * 4 + k] = centers[c][k] + gen.uniform(-noise, noise);
  }
  return b;
}
auto blob_dataset(std::size_t n, std::uint32_t seed, std::int64_t batch = 16) {
  blobs b = make_blobs(n, seed);
  return tessel::from_tensor_slices(std::move(b.x), std::move(b.y)).batch(batch);
}

using blob_model = tessel::sequential<input<4>, dense<16, {.activation = "relu"}>, dense<3>>;

template <class Model>
void compile_blob(Model& m, tessel::optimizer_spec opt = tessel::optimizers::adam{}) {
  m.compile(std::move(opt), tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
            {"accuracy"});
}

// Sets the global seed for the scope and puts the previous one back.
class seed_scope {
 public:
  explicit seed_scope(std::uint64_t s) : old_(tessel::utils::random_seed()) {
    tessel::utils::set_random_seed(s);
  }
  ~seed_scope() { tessel::utils::set_random_seed(old_); }

 private:
  std::uint64_t old_;
};

// What a stream receives while this lives (std::cout by default).
class capture {
 public:
  explicit capture(std::ostream& s = std::cout) : stream_(s), old_(s.rdbuf(buffer_.rdbuf())) {}
  ~capture() { stream_.rdbuf(old_); }
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;
  std::string text() const { return buffer_.str(); }

 private:
  std::ostream& stream_;
  std::ostringstream buffer_;
  std::streambuf* old_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A file in the temporary directory, removed at the end of the scope.
class temp_path {
 public:
  explicit temp_path(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("tessel_model_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path_);
  }
  ~temp_path() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::vector<float> host(const B::matrix& m) {
  std::vector<float> out(B::rows(m) * B::cols(m));
  B::download(m, out);
  return out;
}

double log_value(const tessel::logs& l, std::string_view name) {
  const auto v = tessel::find_log(l, name);
  INFO("log " << name);
  REQUIRE(v.has_value());
  return *v;
}

std::vector<std::string> names_of(const tessel::logs& l) {
  std::vector<std::string> out;
  for (const auto& [k, v] : l) out.push_back(k);
  return out;
}

}  // namespace

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

TEST_CASE("callbacks: lambda_callback hooks run in Keras's order", "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  std::vector<std::string> events;
  tessel::callbacks::lambda_callback recorder({
      .on_epoch_begin =
          [&](std::size_t e, const tessel::logs&) {
            events.push_back("epoch_begin " + std::to_string(e));
          },
      .on_epoch_end =
          [&](std::size_t e, const tessel::logs& l) {
            events.push_back("epoch_end " + std::to_string(e));
            CHECK(names_of(l) ==
                  std::vector<std::string>{"accuracy", "loss", "val_accuracy", "val_loss"});
          },
      .on_batch_begin =
          [&](std::size_t b, const tessel::logs&) {
            events.push_back("batch_begin " + std::to_string(b));
          },
      .on_batch_end =
          [&](std::size_t b, const tessel::logs& l) {
            events.push_back("batch_end " + std::to_string(b));
            CHECK(tessel::find_log(l, "loss").has_value());
          },
      .on_train_begin = [&](const tessel::logs&) { events.push_back("train_begin"); },
      .on_train_end = [&](const tessel::logs&) { events.push_back("train_end"); },
  });
  // 20 samples in batches of 8: batches 0, 1, 2 each epoch.
  model.fit(
      blob_dataset(20, 1, 8),
      {.epochs = 2, .verbose = 0, .callbacks = {recorder}, .validation_data = blob_dataset(8, 2)});
  std::vector<std::string> expected{"train_begin"};
  for (std::size_t e = 0; e < 2; ++e) {
    expected.push_back("epoch_begin " + std::to_string(e));
    for (std::size_t b = 0; b < 3; ++b) {
      expected.push_back("batch_begin " + std::to_string(b));
      expected.push_back("batch_end " + std::to_string(b));
    }
    expected.push_back("epoch_end " + std::to_string(e));
  }
  expected.push_back("train_end");
  CHECK(events == expected);

  // A temporary callback is owned by the list; hooks left empty are skipped.
  std::size_t ends = 0;
  model.fit(blob_dataset(20, 1, 8),
            {.epochs = 3,
             .verbose = 0,
             .callbacks = {tessel::callbacks::lambda_callback(
                 {.on_epoch_end = [&](std::size_t, const tessel::logs&) { ++ends; }})}});
  CHECK(ends == 3);
}

namespace {
// A user's callback: every hook counted, training stopped after `stop_after` batches.
class counting_callback : public tessel::callback {
 public:
  explicit counting_callback(std::size_t stop_after) : stop_after_(stop_after) {}
  std::map<std::string, std::size_t> calls;
  void on_train_begin(const tessel::logs&) override { ++calls["train_begin"]; }
  void on_train_end(const tessel::logs&) override { ++calls["train_end"]; }
  void on_epoch_begin(std::size_t, const tessel::logs&) override { ++calls["epoch_begin"]; }
  void on_epoch_end(std::size_t, const tessel::logs&) override { ++calls["epoch_end"]; }
  void on_train_batch_begin(std::size_t, const tessel::logs&) override { ++calls["batch_begin"]; }
  void on_train_batch_end(std::size_t, const tessel::logs&) override {
    if (++calls["batch_end"] == stop_after_) model->stop_training = true;
  }
  void on_test_begin(const tessel::logs&) override { ++calls["test_begin"]; }
  void on_test_end(const tessel::logs&) override { ++calls["test_end"]; }
  void on_test_batch_begin(std::size_t, const tessel::logs&) override {
    ++calls["test_batch_begin"];
  }
  void on_test_batch_end(std::size_t, const tessel::logs&) override { ++calls["test_batch_end"]; }

 private:
  std::size_t stop_after_;
};
}  // namespace

TEST_CASE("callbacks: a callback subclass sees every hook and can set stop_training",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1, 8);  // 6 batches an epoch
  const auto val = blob_dataset(24, 2, 8);    // 3 batches
  counting_callback all(1000);
  model.fit(train, {.epochs = 2, .verbose = 0, .callbacks = {all}, .validation_data = val});
  CHECK(all.calls == std::map<std::string, std::size_t>{{"batch_begin", 12},
                                                        {"batch_end", 12},
                                                        {"epoch_begin", 2},
                                                        {"epoch_end", 2},
                                                        {"test_batch_begin", 6},
                                                        {"test_batch_end", 6},
                                                        {"test_begin", 2},
                                                        {"test_end", 2},
                                                        {"train_begin", 1},
                                                        {"train_end", 1}});
  CHECK_FALSE(model.stop_training);

  // Stopping in the eighth batch ends the second epoch there; the epoch still ends (history
  // and validation included), and no third epoch starts.
  counting_callback stopper(8);
  const tessel::history h =
      model.fit(train, {.epochs = 5, .verbose = 0, .callbacks = {stopper}, .validation_data = val});
  CHECK(model.stop_training);
  CHECK(stopper.calls["batch_end"] == 8);
  CHECK(stopper.calls["epoch_begin"] == 2);
  CHECK(stopper.calls["epoch_end"] == 2);
  CHECK(stopper.calls["test_begin"] == 2);
  CHECK(stopper.calls["train_end"] == 1);
  CHECK(h.epoch == std::vector<std::size_t>{0, 1});
  // The next fit starts again.
  model.fit(train, {.epochs = 1, .verbose = 0});
  CHECK_FALSE(model.stop_training);
}

TEST_CASE("callbacks: early_stopping stops, and restores the best epoch's weights", "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model, tessel::optimizers::adam{.learning_rate = 0.01});
  const auto train = blob_dataset(96, 1);
  // From epoch 2 on, each epoch starts from weights 30 times too large: its loss is far worse
  // than epoch 1's, and a few Adam steps do not repair that.
  std::vector<tessel::array<float>> bad = model.get_weights();
  for (auto& w : bad)
    for (float& v : w) v = v * 30.0f + 0.5f;
  std::vector<std::vector<tessel::array<float>>> at_epoch_end;
  tessel::callbacks::lambda_callback sabotage({
      .on_epoch_begin =
          [&](std::size_t e, const tessel::logs&) {
            if (e >= 2) model.set_weights(bad);
          },
      .on_epoch_end = [&](std::size_t,
                          const tessel::logs&) { at_epoch_end.push_back(model.get_weights()); },
  });
  tessel::callbacks::early_stopping stop(
      {.monitor = "loss", .patience = 2, .restore_best_weights = true});
  const tessel::history h =
      model.fit(train, {.epochs = 10, .verbose = 0, .callbacks = {sabotage, stop}});
  const auto& loss = h.history.at("loss");
  INFO("losses " << Catch::Detail::stringify(loss));
  REQUIRE(loss.size() == 4);
  CHECK(loss[1] < loss[0]);
  CHECK(loss[2] > loss[1]);
  CHECK(loss[3] > loss[1]);
  CHECK(stop.stopped_epoch == 3);
  CHECK(stop.best_epoch == 1);
  REQUIRE(stop.best.has_value());
  CHECK(*stop.best == loss[1]);
  REQUIRE(at_epoch_end.size() == 4);
  CHECK(model.get_weights() == at_epoch_end[1]);
  CHECK(model.get_weights() != at_epoch_end[3]);

  // Without restore_best_weights the weights stay those of the last epoch.
  at_epoch_end.clear();
  tessel::callbacks::early_stopping keep({.monitor = "loss", .patience = 2});
  model.fit(train, {.epochs = 10, .verbose = 0, .callbacks = {sabotage, keep}});
  REQUIRE_FALSE(at_epoch_end.empty());
  CHECK(model.get_weights() == at_epoch_end.back());
}

TEST_CASE("callbacks: early_stopping on val_loss, min_delta, verbose, a missing monitor",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1);
  const auto val = blob_dataset(24, 2);
  // No epoch improves val_loss by 100: the first is the best, and with patience 1 the second
  // stops training.
  tessel::callbacks::early_stopping stop({.min_delta = 100, .patience = 1, .verbose = 1});
  std::string text;
  tessel::history h;
  {
    capture out;
    h = model.fit(train, {.epochs = 6, .verbose = 0, .callbacks = {stop}, .validation_data = val});
    text = out.text();
  }
  CHECK(h.history.at("val_loss").size() == 2);
  CHECK(stop.stopped_epoch == 1);
  CHECK(stop.best_epoch == 0);
  CHECK(text == "Epoch 2: early stopping\n");

  // patience 0 still lets the first epoch pass (Keras stops only after epoch 0).
  tessel::callbacks::early_stopping eager({.monitor = "val_loss", .min_delta = 100});
  h = model.fit(train, {.epochs = 6, .verbose = 0, .callbacks = {eager}, .validation_data = val});
  CHECK(h.epoch == std::vector<std::size_t>{0, 1});

  // A metric that is larger when better is detected from the compiled metrics.
  tessel::callbacks::early_stopping acc({.monitor = "val_accuracy", .patience = 1});
  h = model.fit(train, {.epochs = 4, .verbose = 0, .callbacks = {acc}, .validation_data = val});
  REQUIRE(acc.best.has_value());
  const auto& va = h.history.at("val_accuracy");
  CHECK(*acc.best == *std::max_element(va.begin(), va.end()));

  // Monitoring a log that is not there warns, and training goes on.
  tessel::callbacks::early_stopping missing({.monitor = "val_loss", .patience = 0});
  {
    capture err(std::cerr);
    h = model.fit(train, {.epochs = 3, .verbose = 0, .callbacks = {missing}});
    text = err.text();
  }
  CHECK(h.epoch.size() == 3);
  CHECK_THAT(text, Contains("Early stopping conditioned on metric `val_loss` which is not "
                            "available. Available metrics are: accuracy,loss"));

  CHECK_THROWS_WITH(tessel::callbacks::early_stopping({.mode = "up"}),
                    Contains("EarlyStopping mode up is unknown"));
}

TEST_CASE("callbacks: terminate_on_nan stops after the first bad batch", "[callbacks]") {
  seed_scope s(3);
  {
    // NaN in the first batch's inputs: the loss of batch 0 is NaN (relu passes NaN on, as in
    // Keras).
    blob_model model;
    compile_blob(model);
    blobs data = make_blobs(48, 1);
    data.x.values[5] = std::nanf("");
    std::size_t batches = 0;
    tessel::callbacks::lambda_callback count(
        {.on_batch_end = [&](std::size_t, const tessel::logs&) { ++batches; }});
    std::string text;
    tessel::history h;
    {
      capture out;
      h = model.fit(
          tessel::from_tensor_slices(data.x, data.y).batch(8),
          {.epochs = 3, .verbose = 0, .callbacks = {tessel::callbacks::terminate_on_nan(), count}});
      text = out.text();
    }
    CHECK(text == "Batch 0: Invalid loss, terminating training\n");
    CHECK(batches == 1);
    REQUIRE(h.history.at("loss").size() == 1);
    CHECK(std::isnan(h.history.at("loss")[0]));
  }
  {
    // A learning rate of 1e30 on mean squared error: the loss overflows a few batches in.
    tessel::sequential<input<4>, dense<3>> model;
    model.compile(tessel::optimizers::sgd{.learning_rate = 1e30},
                  tessel::losses::mean_squared_error{});
    const blobs data = make_blobs(160, 1);
    const auto ds =
        tessel::from_tensor_slices(data.x, tessel::data::to_categorical(data.y, 3)).batch(8);
    std::string text;
    tessel::history h;
    {
      capture out;
      h = model.fit(
          ds, {.epochs = 2, .verbose = 0, .callbacks = {tessel::callbacks::terminate_on_nan()}});
      text = out.text();
    }
    std::smatch m;
    REQUIRE(std::regex_match(text, m,
                             std::regex(R"(Batch (\d+): Invalid loss, terminating training\n)")));
    CHECK(std::stoul(m[1]) < 20);  // within the first epoch
    CHECK(h.epoch.size() == 1);
    CHECK_FALSE(std::isfinite(h.history.at("loss")[0]));
  }
}

TEST_CASE("callbacks: csv_logger writes a header and one row per epoch, and appends",
          "[callbacks]") {
  seed_scope s(3);
  blob_model model;
  compile_blob(model);
  const auto train = blob_dataset(48, 1);
  const auto val = blob_dataset(24, 2);
  const temp_path file("log.csv");
  auto read_lines = [&] {
    std::ifstream in(file.path());
    REQUIRE(in.good());
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const tessel::history h =
      model.fit(train, {.epochs = 3,
                        .verbose = 0,
                        .callbacks = {tessel::callbacks::csv_logger(file.str())},
                        .validation_data = val});
  auto lines = read_lines();
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "epoch,accuracy,loss,val_accuracy,val_loss");
  const std::vector<std::string> keys{"accuracy", "loss", "val_accuracy", "val_loss"};
  for (std::size_t e = 0; e < 3; ++e) {
    INFO("row " << lines[e + 1]);
    std::istringstream row(lines[e + 1]);
    std::string cell;
    std::getline(row, cell, ',');
    CHECK(cell == std::to_string(e));
    for (const auto& k : keys) {
      REQUIRE(std::getline(row, cell, ','));
      // Python's repr of a float: reads back to the same double.
      CHECK(std::stod(cell) == h.history.at(k)[e]);
    }
    CHECK_FALSE(std::getline(row, cell, ','));
  }

  // append: more rows, no second header; epochs count from 0 again, as in Keras.
  model.fit(train, {.epochs = 2,
                    .verbose = 0,
                    .callbacks = {tessel::callbacks::csv_logger(file.str(), ",", true)},
                    .validation_data = val});
  lines = read_lines();
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "epoch,accuracy,loss,val_accuracy,val_loss");
  CHECK(lines[4].starts_with("0,"));
  CHECK(lines[5].starts_with("1,"));

  // Without append the file starts over; another separator.
  model.fit(
      train,
      {.epochs = 1, .verbose = 0, .callbacks = {tessel::callbacks::csv_logger(file.str(), ";")}});
  lines = read_lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "epoch;accuracy;loss");
  CHECK(lines[1].starts_with("0;"));

  // append to a file that does not exist yet writes the header.
  const temp_path fresh("fresh.csv");
  model.fit(train, {.epochs = 1,
                    .verbose = 0,
                    .callbacks = {tessel::callbacks::csv_logger(fresh.str(), ",", true)}});
  std::ifstream in(fresh.path());
  std::string first;
  std::getline(in, first);
  CHECK(first == "epoch,accuracy,loss");

  const temp_path nowhere("no_such_dir/log.csv");
  CHECK_THROWS_WITH(model.fit(train, {.epochs = 1,
                                      .verbose = 0,
                                      .callbacks = {tessel::callbacks::csv_logger(nowhere.str())}}),
                    Contains("CSVLogger: cannot open"));
}

// ---- errors ------------------------------------------------------------------------------------

TEST_CASE("errors: inputs whose per-sample shape is not the model's", "[errors]") {
  blob_model model;
  compile_blob(model);
  const tessel::array<float> x({8, 5});
  const tessel::array<std::int32_t> y({8});
  REQUIRE_THROWS_WITH(model.fit(tessel::from_tensor_slices(x, y).batch(8), {.verbose = 0}),
                      Contains("Input 0 of layer \"dense\" is incompatible with the layer") &&
                          Contains("expected shape=(None, 4)") && Contains("found shape=(8, 5)"));
  REQUIRE_THROWS_WITH(model.predict(tessel::array<float>({3, 2, 2})),
                      Contains("layer \"dense\"") && Contains("expected shape=(None, 4)") &&
                          Contains("found shape=(3, 2, 2)"));
  REQUIRE_THROWS_WITH(model.train_on_batch(x, y), Contains("found shape=(8, 5)"));

  tessel::sequential<input<28, 28>, flatten<>, dense<10>> images;
  REQUIRE_THROWS_WITH(images.predict(tessel::array<float>({2, 784})),
                      Contains("layer \"flatten\"") && Contains("expected shape=(None, 28, 28)") &&
                          Contains("found shape=(2, 784)"));

  // x and y with different numbers of samples.
  REQUIRE_THROWS_WITH(
      model.train_on_batch(tessel::array<float>({8, 4}), tessel::array<std::int32_t>({6})),
      Contains("x sizes: 8, y sizes: 6"));
}

TEST_CASE("errors: labels out of range, one-hot targets of the wrong width", "[errors]") {
  tessel::sequential<input<4>, dense<10>> model;
  model.compile("adam", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {"accuracy"});
  const tessel::array<float> x({4, 4});
  REQUIRE_THROWS_WITH(
      model.fit(
          tessel::from_tensor_slices(x, tessel::array<std::int32_t>({4}, {1, 2, 10, 3})).batch(4),
          {.verbose = 0}),
      Contains("Received a label value of 10 which is outside the valid range of [0, 10)"));
  REQUIRE_THROWS_WITH(model.train_on_batch(x, tessel::array<std::int32_t>({4}, {0, -1, 0, 0})),
                      Contains("label value of -1") && Contains("[0, 10)"));
  REQUIRE_THROWS_WITH(model.train_on_batch(x, tessel::array<float>({4}, {0, 1.5f, 0, 0})),
                      Contains("label value of 1.5"));
  // One-hot targets given to a sparse loss.
  REQUIRE_THROWS_WITH(
      model.train_on_batch(x, tessel::array<float>({4, 10})),
      Contains("takes one integer label per sample") && Contains("categorical_crossentropy"));

  model.compile("adam", tessel::losses::categorical_crossentropy{.from_logits = true},
                {"accuracy"});
  REQUIRE_THROWS_WITH(
      model.fit(tessel::from_tensor_slices(x, tessel::array<float>({4, 5})).batch(4),
                {.verbose = 0}),
      Contains("Arguments `target` and `output` must have the same shape") &&
          Contains("target.shape=(4, 5)") && Contains("output.shape=(4, 10)"));
  // A metric for integer labels with a loss for one-hot targets.
  model.compile("adam", tessel::losses::categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  REQUIRE_THROWS_WITH(model.train_on_batch(x, tessel::array<float>({4, 10})),
                      Contains("Metric sparse_categorical_accuracy takes integer labels"));
}

TEST_CASE("errors: fit before compile, unknown optimizer, loss and metric names", "[errors]") {
  blob_model model;
  const auto ds = blob_dataset(16, 1);
  REQUIRE_THROWS_WITH(model.fit(ds, {.verbose = 0}),
                      Contains("You must call `compile()` before calling `fit()`"));
  REQUIRE_THROWS_WITH(model.evaluate(ds, 0), Contains("You must call `compile()`"));
  REQUIRE_THROWS_WITH(model.get_optimizer(), Contains("You must call `compile()`"));
  const blobs b = make_blobs(4, 1);
  REQUIRE_THROWS_WITH(model.compute_loss_and_gradients(b.x, b.y),
                      Contains("before calling `compute_loss_and_gradients()`"));

  REQUIRE_THROWS_WITH(model.compile("adamw", "mse"),
                      Contains("Could not interpret optimizer identifier: adamw"));
  REQUIRE_THROWS_WITH(model.compile("adam", "hinge"),
                      Contains("Could not interpret loss identifier: hinge"));
  REQUIRE_THROWS_WITH(model.compile("adam", "sparse_categorical_crossentropy", {"f1_score"}),
                      Contains("Could not interpret metric identifier: f1_score"));
  REQUIRE_THROWS_AS(tessel::optimizer_spec("Nadam"), tessel::value_error);
  // Keras's spellings are accepted.
  CHECK_NOTHROW(model.compile({.optimizer = "RMSprop", .loss = "MeanSquaredError"}));
  CHECK_NOTHROW(model.compile("SGD", "SparseCategoricalCrossentropy", {"acc"}));
  CHECK_NOTHROW(model.fit(ds, {.verbose = 0}));
}

TEST_CASE("errors: set_weights with the wrong count or size", "[errors]") {
  blob_model model;
  auto w = model.get_weights();
  REQUIRE(w.size() == 4);
  REQUIRE_THROWS_WITH(model.set_weights({w[0]}),
                      Contains("with 1 arrays, but the model has 4 variables"));
  w[0].values.pop_back();
  REQUIRE_THROWS_WITH(model.set_weights(w),
                      Contains("Variable 'dense/kernel' has 64 values; cannot assign 63."));
  // A correct set round-trips.
  auto good = model.get_weights();
  for (auto& v : good)
    for (float& e : v) e += 1.0f;
  model.set_weights(good);
  CHECK(model.get_weights() == good);
}

TEST_CASE("model: get_weights gives each variable's shape, and set_weights checks it as Keras",
          "[model][errors]") {
  tessel::sequential<input<8>, dense<16, {.name = "d1"}>, dense<4, {.name = "d2"}>> model;
  const std::vector<tessel::array<float>> w = model.get_weights();
  // Keras's order and shapes: d1/kernel (in, out), d1/bias (out,), ...
  REQUIRE(w.size() == 4);
  CHECK(w[0].shape == std::vector<std::size_t>{8, 16});
  CHECK(w[1].shape == std::vector<std::size_t>{16});
  CHECK(w[2].shape == std::vector<std::size_t>{16, 4});
  CHECK(w[3].shape == std::vector<std::size_t>{4});
  const auto vars = model.variables();
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO("weights[" << i << "], variable " << vars[i]->path);
    CHECK(w[i].shape == vars[i]->shape);
    CHECK(w[i].size() == vars[i]->size());
  }

  // A transposed kernel has the right number of values and the wrong shape.
  auto transposed = w;
  transposed[0] = tessel::array<float>({16, 8}, w[0].values);
  CHECK_THROWS_WITH(model.set_weights(transposed),
                    Contains("Layer sequential weight shape (8, 16) is not compatible with "
                             "provided weight shape (16, 8). The variable is 'd1/kernel' "
                             "(weights[0]); pass the arrays get_weights() returns, in its order "
                             "and with its shapes."));
  auto row_bias = w;
  row_bias[3] = tessel::array<float>({1, 4}, w[3].values);
  CHECK_THROWS_WITH(model.set_weights(row_bias),
                    Contains("weight shape (4,) is not compatible with provided weight shape "
                             "(1, 4). The variable is 'd2/bias' (weights[3])"));
  CHECK(model.get_weights() == w);  // nothing was assigned

  // get, set, get: the same arrays back; another model of the same structure takes them too.
  auto shifted = w;
  for (auto& a : shifted)
    for (float& v : a) v += 0.5f;
  model.set_weights(shifted);
  CHECK(model.get_weights() == shifted);
  decltype(model) other;
  other.set_weights(model.get_weights());
  CHECK(other.get_weights() == shifted);
}

TEST_CASE("errors: Fashion-MNIST files that are not there", "[errors]") {
  namespace fm = tessel::datasets::fashion_mnist;
  REQUIRE_THROWS_WITH(fm::load_data("/nonexistent/fashion"),
                      Contains("'/nonexistent/fashion/train-images-idx3-ubyte.gz'") &&
                          Contains("t10k-labels-idx1-ubyte.gz") &&
                          Contains("which does not exist") &&
                          Contains("apt-get install dataset-fashion-mnist") &&
                          Contains("TESSEL_FASHION_MNIST_DIR"));
  REQUIRE_THROWS_AS(fm::load_data("/nonexistent/fashion"), tessel::value_error);

  // An empty directory named by the environment variable.
  const temp_path dir("empty_fashion_mnist");
  std::filesystem::create_directories(dir.path());
  const char* old = std::getenv(fm::directory_variable);
  const std::string saved = old ? old : "";
  ::setenv(fm::directory_variable, dir.str().c_str(), 1);
  CHECK(fm::data_directory() == dir.path());
  std::string message;
  try {
    fm::load_data();
  } catch (const tessel::value_error& e) {
    message = e.what();
  }
  if (old)
    ::setenv(fm::directory_variable, saved.c_str(), 1);
  else
    ::unsetenv(fm::directory_variable);
  CHECK_THAT(message, Contains("Fashion-MNIST files '" +
                               (dir.path() / "train-images-idx3-ubyte.gz").string()));
  CHECK_THAT(message, Contains("from $TESSEL_FASHION_MNIST_DIR"));
  CHECK_THAT(message, Contains("dataset-fashion-mnist"));
  CHECK_THAT(message, !Contains("does not exist"));
}
