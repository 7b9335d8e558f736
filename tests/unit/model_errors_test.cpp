// The messages of the errors a user of the model API makes most: inputs and labels of the wrong
// shape, fit before compile, unknown names, set_weights with the wrong count or size, missing
// data files.
#include <catch2/catch.hpp>

#include "model_test_helpers.hpp"

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

  REQUIRE_THROWS_WITH(model.compile("lamb", "mse"),
                      Contains("Could not interpret optimizer identifier: lamb"));
  REQUIRE_THROWS_WITH(model.compile("adam", "hinge"),
                      Contains("Could not interpret loss identifier: hinge"));
  REQUIRE_THROWS_WITH(model.compile("adam", "sparse_categorical_crossentropy", {"f1_score"}),
                      Contains("Could not interpret metric identifier: f1_score"));
  REQUIRE_THROWS_AS(tessel::optimizer_spec("Ftrl"), tessel::value_error);  // not the library's
  // Keras's spellings are accepted.
  CHECK_NOTHROW(model.compile({.optimizer = "RMSprop", .loss = "MeanSquaredError"}));
  CHECK_NOTHROW(model.compile("SGD", "SparseCategoricalCrossentropy", {"acc"}));
  CHECK_NOTHROW(model.fit(ds, {.verbose = 0}));
}

TEST_CASE("errors: an unknown initializer name is refused when the model is built", "[errors]") {
  using model_t = tessel::sequential<tessel::layers::input<4>,
                                     tessel::layers::dense<3, {.kernel_initializer = "glorot"}>>;
  REQUIRE_THROWS_WITH([] { model_t m; }(),
                      Contains("Could not interpret initializer identifier: 'glorot'") &&
                          Contains("Use one of zeros, ones, glorot_uniform"));
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
