// The NumPy steps of a Keras data preparation: astype and scale, reshape, row slices, one-hot.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tessel/data/array_ops.hpp>
#include <vector>

using Catch::Matchers::Contains;
using tessel::array;
using tessel::value_error;
using shape_t = std::vector<std::size_t>;
namespace data = tessel::data;

namespace {

using tessel::testing::message_of;


array<std::uint8_t> images() {
  array<std::uint8_t> a({3, 2, 2});
  for (std::size_t i = 0; i < a.values.size(); ++i) a.values[i] = static_cast<std::uint8_t>(i * 20);
  return a;
}

}  // namespace

TEST_CASE("data: to_float scales like x / 255.0 and keeps the shape", "[data][array_ops]") {
  const auto x = data::to_float(images(), 1.0f / 255);
  CHECK(x.shape == shape_t{3, 2, 2});
  CHECK(x.values[0] == 0.0f);
  CHECK(x.values[11] == Approx(220.0f / 255));
  CHECK(data::to_float(images()).values[5] == 100.0f);
}

TEST_CASE(
    "data: to_int32 and cast convert values and refuse ones the target "
    "cannot hold",
    "[data][array_ops]") {
  const array<std::uint8_t> y({4}, {9, 0, 255, 3});
  const auto yi = data::to_int32(y);
  CHECK(yi.shape == shape_t{4});
  CHECK(yi.values == std::vector<std::int32_t>{9, 0, 255, 3});
  CHECK(data::to_int32(array<float>({2}, {2.0f, -3.5f})).values ==
        std::vector<std::int32_t>{2, -3});

  CHECK_THAT(message_of([] {
               data::cast<std::uint8_t>(array<std::int32_t>({3}, {1, 2, 300}));
             }),
             Contains("value 300 at index 2") && Contains("0 to 255"));
  CHECK_THAT(message_of([] {
               data::to_int32(array<float>({2}, {1.0f, std::nanf("")}));
             }),
             Contains("at index 1") && Contains("does not fit"));
  CHECK_THAT(message_of([] { data::to_int32(array<double>({1}, {3e10})); }), Contains("3e+10"));
}

TEST_CASE("data: reshape keeps the values, infers one dimension, and checks the size",
          "[data][array_ops]") {
  auto x = data::to_float(images());
  const auto flat = data::reshape(x, {3, 4});
  CHECK(flat.shape == shape_t{3, 4});
  CHECK(flat.values == x.values);
  CHECK(data::reshape(x, {data::infer_dim, 4}).shape == shape_t{3, 4});
  CHECK(data::reshape(x, {12}).shape == shape_t{12});
  CHECK(data::reshape(std::move(x), {2, data::infer_dim, 3}).shape == shape_t{2, 2, 3});

  CHECK_THAT(message_of([] {
               data::reshape(images(), {5, 2});
             }),
             Contains("cannot reshape array of size 12 (shape (3, 2, 2)) into "
                      "shape (5, 2)"));
  CHECK_THAT(message_of([] {
               data::reshape(images(), {data::infer_dim, 5});
             }),
             Contains("size 12") && Contains("(-1, 5)"));
  CHECK_THAT(message_of([] {
               data::reshape(images(), {data::infer_dim, data::infer_dim});
             }),
             Contains("only infer one dimension"));
}

TEST_CASE("data: an array whose values do not fill its shape is named",
          "[data][array_ops][error]") {
  const array<float> bad({2, 3}, {1, 2, 3, 4});
  CHECK_THAT(message_of([&] { data::check_shape(bad, "x_train"); }),
             Contains("x_train has shape (2, 3)") && Contains("holds 6 values") &&
                 Contains("has 4 values"));
  CHECK_THAT(message_of([&] { data::slice_rows(bad, 0, 1); }), Contains("has 4 values"));
  CHECK_NOTHROW(data::check_shape(images()));
}

TEST_CASE("data: slice_rows takes rows begin to end along the first dimension, as a(begin:end)", "[data][array_ops]") {
  const auto s = data::slice_rows(images(), 1, 3);
  CHECK(s.shape == shape_t{2, 2, 2});
  CHECK(s.values.front() == 80);
  CHECK(s.values.back() == 220);
  CHECK(data::slice_rows(images(), 2, 2).shape == shape_t{0, 2, 2});

  CHECK_THAT(message_of([] { data::slice_rows(images(), 1, 4); }),
             Contains("rows [1, 4)") && Contains("3 rows") && Contains("begin <= end <= 3"));
  CHECK_THAT(message_of([] { data::slice_rows(images(), 2, 1); }), Contains("rows [2, 1)"));
  CHECK_THAT(message_of([] { data::slice_rows(array<float>({}, {1.0f}), 0, 1); }),
             Contains("rank 0"));
}

TEST_CASE("data: take_rows gathers rows in the given order", "[data][array_ops]") {
  const auto t = data::take_rows(images(), {2, 0, 2});
  CHECK(t.shape == shape_t{3, 2, 2});
  CHECK(t.values ==
        std::vector<std::uint8_t>{160, 180, 200, 220, 0, 20, 40, 60, 160, 180, 200, 220});
  CHECK(data::take_rows(images(), {}).shape == shape_t{0, 2, 2});
  CHECK_THAT(message_of([] {
               data::take_rows(images(), {0, 3});
             }),
             Contains("row 3 (at position 1)") && Contains("3 rows"));
}

TEST_CASE("data: stack adds a leading dimension and wants equal shapes", "[data][array_ops]") {
  const array<int> a({2}, {1, 2});
  const array<int> b({2}, {3, 4});
  const auto s = data::stack(std::vector<array<int>>{a, b, a});
  CHECK(s.shape == shape_t{3, 2});
  CHECK(s.values == std::vector<int>{1, 2, 3, 4, 1, 2});
  CHECK_THAT(message_of([&] {
               data::stack(std::vector<array<int>>{a, array<int>({3})});
             }),
             Contains("array 0 has shape (2,)") && Contains("array 1 has shape (3,)"));
  CHECK_THAT(message_of([] { data::stack(std::vector<array<int>>{}); }),
             Contains("nothing to stack"));
}

TEST_CASE("data: to_categorical is keras.utils.to_categorical", "[data][array_ops]") {
  const array<std::uint8_t> y({4}, {9, 0, 3, 9});
  const auto c = data::to_categorical(y, 10);
  CHECK(c.shape == shape_t{4, 10});
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t k = 0; k < 10; ++k)
      CHECK(c.values[i * 10 + k] == (k == y.values[i] ? 1.0f : 0.0f));
  }
  // num_classes defaults to the largest label + 1; a trailing dimension of 1 is dropped, as Keras
  // does.
  CHECK(data::to_categorical(y).shape == shape_t{4, 10});
  CHECK(data::to_categorical(array<std::int32_t>({3, 1}, {0, 1, 2})).shape == shape_t{3, 3});
  CHECK(data::to_categorical(array<std::int32_t>({2, 2}, {0, 1, 2, 1}), 4).shape ==
        shape_t{2, 2, 4});
  CHECK(data::to_categorical(array<float>({2}, {1.0f, 0.0f}), 2).values ==
        std::vector<float>{0, 1, 1, 0});
}

TEST_CASE("data: to_categorical names a label outside 0 to num_classes",
          "[data][array_ops][error]") {
  const array<std::uint8_t> y({5}, {1, 2, 3, 10, 4});
  CHECK_THAT(message_of([&] { data::to_categorical(y, 10); }),
             Contains("label 10 at index 3") && Contains("num_classes=10") && Contains("[0, 10)"));
  CHECK_THAT(message_of([] {
               data::to_categorical(array<std::int32_t>({2}, {0, -1}), 3);
             }),
             Contains("label -1 at index 1") && Contains(">= 0"));
  CHECK_THAT(message_of([] { data::to_categorical(array<float>({1}, {1.5f}), 3); }),
             Contains("label 1.5 at index 0"));
}

TEST_CASE("data: a shape whose element count overflows 64 bits is refused, naming the shape",
          "[data][array_ops][error]") {
  // 2^60 x 16 = 2^64 wraps to 0: unchecked, such an array would hold no values and pass as empty.
  const std::size_t huge = std::size_t{1} << 60;
  const std::string shape =
      "shape (1152921504606846976, 16) has more elements than a 64-bit size "
      "can count (18446744073709551615)";
  CHECK_THAT(message_of([&] {
               array<float> a({huge, 16});
             }),
             Contains(shape) && Contains("give each dimension its real size"));
  CHECK_THAT(message_of([&] { (void)tessel::element_count({huge, 16}); }), Contains(shape));
  // A 0 does not hide the overflow of the other dimensions (NumPy refuses that shape too).
  CHECK_THAT(message_of([&] {
               array<float> a({0, huge, 16});
             }),
             Contains("shape (0, 1152921504606846976, 16) has a dimension of 0, but its other "
                      "dimensions multiply to more than a 64-bit size can count"));
  CHECK(tessel::element_count({huge, 15}) == huge * 15);
  CHECK(tessel::element_count({0, huge, 15}) == 0);

  const array<float> promised({huge, 16}, {});  // built by hand, with no values
  CHECK_THAT(message_of([&] { data::check_shape(promised, "x_train"); }),
             Contains("x_train: " + shape));
  CHECK_THAT(message_of([&] { data::slice_rows(promised, 0, 2); }),
             Contains("slice_rows: the input: " + shape));
  CHECK_THAT(message_of([&] { data::take_rows(promised, {0, 1}); }), Contains(shape));
  CHECK_THAT(message_of([&] { data::stack(std::vector<array<float>>{promised}); }),
             Contains("stack: array 0: " + shape));
  CHECK_THAT(message_of([&] { data::cast<int>(promised); }), Contains(shape));
  CHECK_THAT(message_of([&] {
               data::reshape(promised, {16, huge});
             }),
             Contains("reshape: the input: " + shape));
  // Stacking 2^60 arrays of 16 values: the stacked shape overflows.
  const array<float> row({16}, std::vector<float>(16, 1.0f));
  CHECK_THAT(message_of([&] {
               data::detail::stack_with<float>(
                   huge, [&](std::size_t) -> const array<float>& { return row; }, "stack");
             }),
             Contains("stack: " + shape));
  // One-hot rows of 2^62 classes for 4 labels.
  CHECK_THAT(message_of([] {
               data::to_categorical(array<int>({4}, {0, 1, 2, 3}), std::size_t{1} << 62);
             }),
             Contains("to_categorical: shape (4, 4611686018427387904) has more elements"));
}

TEST_CASE("data: reshape refuses a target shape whose element count overflows 64 bits",
          "[data][array_ops][error]") {
  const std::size_t huge = std::size_t{1} << 60;
  // (0, 16) holds 0 values, and 2^60 x 16 wraps to 0: unchecked, the reshape would succeed.
  CHECK_THAT(message_of([&] {
               data::reshape(array<float>({0, 16}), {huge, 16});
             }),
             Contains("reshape: cannot reshape array of size 0 (shape (0, 16)) into shape "
                      "(1152921504606846976, 16): shape (1152921504606846976, 16) has more "
                      "elements than a 64-bit size can count"));
  CHECK_THAT(message_of([&] {
               data::reshape(array<float>({0, 16}), {huge, 16, data::infer_dim});
             }),
             Contains("into shape (1152921504606846976, 16, -1)") &&
                 Contains("has more elements than a 64-bit size can count"));
  CHECK(data::reshape(array<float>({0, 16}), {0, huge}).shape == shape_t{0, huge});
}
