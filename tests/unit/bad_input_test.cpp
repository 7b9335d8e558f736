// Bad input at the model's public entry points, as a user's probe found them: each is a value_error that says
// what is wrong and what to do, never a crash, a silent wrong result or a loss of zero.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;
using Catch::Matchers::Contains;
using tessel::testing::message_of;
using model_t = tessel::sequential<input<4>, dense<3>>;

tessel::array<float> features(std::size_t n) {
  tessel::array<float> x({n, 4});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 7) * 0.25f;
  return x;
}
tessel::array<std::int32_t> labels(std::size_t n) {
  tessel::array<std::int32_t> y({n});
  for (std::size_t i = 0; i < n; ++i) y.values[i] = static_cast<std::int32_t>(i % 3);
  return y;
}
void compile(model_t& m) {
  m.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
            {"accuracy"});
}
}  // namespace

TEST_CASE("bad input: a batch size of zero is refused by name, not a division by zero",
          "[model][error]") {
  model_t m;
  compile(m);
  CHECK_THAT(message_of([&] { m.predict(features(5), 0); }),
             Contains("predict: batch_size must be greater than zero, got 0"));
  CHECK_THAT(message_of([&] { m.evaluate(features(5), labels(5), 0, 0); }),
             Contains("evaluate: batch_size must be greater than zero"));
  CHECK_THAT(message_of([&] { m.fit(features(5), labels(5), {.batch_size = 0, .verbose = 0}); }),
             Contains("fit: batch_size must be greater than zero"));
}

TEST_CASE("bad input: an array whose values do not match its shape is refused at every entry point",
          "[model][error]") {
  model_t m;
  compile(m);
  // Shape (256, 4) promises 1024 values; it has 100.
  const tessel::array<float> x({256, 4}, std::vector<float>(100, 0.5f));
  const auto y = labels(256);
  const auto shape_message = [](const std::string& msg) {
    return msg.find("x has shape (256, 4), which holds 1024 values, but it has 100 values") !=
               std::string::npos &&
           msg.find("as many values as the product of its shape") != std::string::npos;
  };
  CHECK(shape_message(message_of([&] { m.predict(x); })));
  CHECK(shape_message(message_of([&] { m.call(x); })));
  CHECK(shape_message(message_of([&] { m.train_on_batch(x, y); })));
  CHECK(shape_message(message_of([&] { m.compute_loss_and_gradients(x, y); })));
  CHECK_THAT(message_of([&] { m.fit(x, y, {.verbose = 0}); }), Contains("has 100 values"));
  CHECK_THAT(message_of([&] { m.evaluate(x, y, 32, 0); }), Contains("has 100 values"));

  const tessel::array<std::int32_t> short_y({8}, {0, 1, 2});
  CHECK_THAT(message_of([&] { m.train_on_batch(features(8), short_y); }),
             Contains("y has shape (8,), which holds 8 values, but it has 3 values"));
  // Nothing was trained on the bad calls: the weights are the initial ones.
  model_t fresh;
  CHECK(m.get_weights() == fresh.get_weights());
}

TEST_CASE("bad input: no samples is an error that says so, as in Keras, never a loss of 0",
          "[model][error]") {
  model_t m;
  compile(m);
  const auto before = m.get_weights();
  const tessel::array<float> x0({0, 4});
  const tessel::array<std::int32_t> y0({0});
  CHECK_THAT(message_of([&] { m.fit(x0, y0, {.verbose = 0}); }),
             Contains("fit: x has no samples, so there is no batch to train on"));
  CHECK_THAT(message_of([&] { m.evaluate(x0, y0, 32, 0); }),
             Contains("evaluate: the data has no samples"));
  CHECK_THAT(message_of([&] { m.predict(x0); }), Contains("predict: x has no samples"));
  CHECK_THAT(message_of([&] { m.train_on_batch(x0, y0); }),
             Contains("a batch of 0 samples has no loss"));

  const auto ds = tessel::from_tensor_slices(features(10), labels(10)).batch(4);
  CHECK_THAT(message_of([&] { m.fit(ds.take(0), {.verbose = 0}); }),
             Contains("fit: the training data has no samples") && Contains("take"));
  CHECK_THAT(message_of([&] { m.evaluate(ds.take(0), 0); }),
             Contains("evaluate: the data has no samples"));
  // A pipeline whose size is unknown until it runs: drop_remainder leaves no batch of 16.
  const auto none = tessel::from_tensor_slices(features(10), labels(10)).batch(16, true);
  CHECK_THAT(message_of([&] { m.fit(none, {.verbose = 0}); }),
             Contains("fit: the training data has no samples"));
  CHECK_THAT(message_of([&] { m.fit(ds, {.verbose = 0, .validation_data = ds.take(0)}); }),
             Contains("fit: validation_data has no samples"));
  CHECK(m.get_weights() != before);  // the last fit trained one epoch before validating
}

TEST_CASE("bad input: a negative batch size is refused by name, not wrapped to 2^64 - 1",
          "[model][error]") {
  model_t m;
  compile(m);
  const auto before = m.get_weights();
  // As a std::size_t, -1 would be 18446744073709551615: predict ran one batch of garbage steps.
  CHECK_THAT(message_of([&] { m.predict(features(5), -1); }),
             Contains("predict: batch_size must be greater than zero, got -1") &&
                 Contains("pass a positive integer"));
  CHECK_THAT(message_of([&] { m.evaluate(features(5), labels(5), -1, 0); }),
             Contains("evaluate: batch_size must be greater than zero, got -1"));
  CHECK_THAT(message_of([&] { m.fit(features(5), labels(5), {.batch_size = -1, .verbose = 0}); }),
             Contains("fit: batch_size must be greater than zero, got -1"));
  CHECK_THAT(message_of([&] { m.fit(features(5), labels(5), {.batch_size = 0, .verbose = 0}); }),
             Contains("fit: batch_size must be greater than zero, got 0"));
  CHECK(m.get_weights() == before);
  // Any integer type converts: a std::size_t variable in fit's options, a batch larger than x.
  const std::size_t batch = 2;
  CHECK_NOTHROW(m.fit(features(5), labels(5), {.batch_size = batch, .verbose = 0}));
  CHECK(m.predict(features(5), std::numeric_limits<std::int64_t>::max()).shape ==
        std::vector<std::size_t>{5, 3});
}

TEST_CASE("bad input: arrays whose shape overflows 64 bits are refused at every entry point",
          "[model][error]") {
  // 2^60 x 16 = 2^64 wraps to 0: unchecked, an array of that shape with no values passed as
  // complete, and predict, fit and evaluate read past its end.
  const std::size_t huge = std::size_t{1} << 60;
  const tessel::array<float> x({huge, 16}, {});
  const tessel::array<std::int32_t> y({huge}, {});
  const std::string shape =
      "shape (1152921504606846976, 16) has more elements than a 64-bit size can count";
  tessel::sequential<input<16>, dense<3>> m;
  m.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto before = m.get_weights();
  CHECK_THAT(message_of([&] { m.predict(x); }), Contains("x: " + shape));
  CHECK_THAT(message_of([&] { m.call(x); }), Contains("x: " + shape));
  CHECK_THAT(message_of([&] { m.train_on_batch(x, y); }), Contains("x: " + shape));
  CHECK_THAT(message_of([&] { m.fit(x, y, {.verbose = 0}); }),
             Contains("from_tensor_slices: x: " + shape));
  CHECK_THAT(message_of([&] { m.fit(x, y, {.verbose = 0, .shuffle = false}); }),
             Contains("from_tensor_slices: x: " + shape));
  CHECK_THAT(message_of([&] { m.evaluate(x, y, 32, 0); }),
             Contains("from_tensor_slices: x: " + shape));
  // Targets of such a shape, with a good x.
  tessel::sequential<input<4>, dense<3>> mse;
  mse.compile("sgd", "mse");
  CHECK_THAT(message_of([&] {
               mse.train_on_batch(features(4), tessel::array<float>({4, huge, 16}, {}));
             }),
             Contains("y: shape (4, 1152921504606846976, 16) has more elements"));
  CHECK(m.get_weights() == before);
}
