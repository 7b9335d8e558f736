// tessel::dataset against tf.data's behaviour: element shapes, batch remainders, shuffle orders,
// repeat/take/cardinality, cache, prefetch (same sequence, early exit, errors), and its speed.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <ranges>
#include <set>
#include <string>
#include <tessel/data/dataset.hpp>
#include <thread>
#include <vector>

using Catch::Matchers::Contains;
using tessel::array;
using tessel::value_error;
using shape_t = std::vector<std::size_t>;
using ds_t = tessel::dataset<float, std::int32_t>;

static_assert(std::input_iterator<ds_t::iterator>);
static_assert(std::sentinel_for<std::default_sentinel_t, ds_t::iterator>);
static_assert(std::ranges::input_range<ds_t>);

namespace {

using tessel::testing::message_of;


// n samples of `features` floats; sample i has x = (i * features + j for each j) and label i, so a
// label says which sample an element holds.
ds_t numbered(std::size_t n, std::size_t features = 3) {
  array<float> x({n, features});
  std::iota(x.values.begin(), x.values.end(), 0.0f);
  array<std::int32_t> y({n});
  std::iota(y.values.begin(), y.values.end(), 0);
  return tessel::from_tensor_slices(std::move(x), std::move(y));
}

// One pass: the labels of every element, flattened.
template <class D>
std::vector<std::int32_t> labels_of(const D& ds) {
  std::vector<std::int32_t> out;
  for (const auto& [x, y] : ds) out.insert(out.end(), y.values.begin(), y.values.end());
  return out;
}

std::vector<std::int32_t> iota_vector(std::int32_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool is_permutation_of_iota(std::vector<std::int32_t> v) {
  std::sort(v.begin(), v.end());
  return v == iota_vector(static_cast<std::int32_t>(v.size()));
}

}  // namespace

TEST_CASE("data: from_tensor_slices yields one sample per row", "[data][dataset]") {
  const ds_t ds = numbered(5);
  CHECK(ds.cardinality() == 5u);
  std::int32_t i = 0;
  for (auto& [x, y] : ds) {
    CHECK(x.shape == shape_t{3});
    CHECK(y.shape.empty());
    CHECK(x.values == std::vector<float>{3.0f * i, 3.0f * i + 1, 3.0f * i + 2});
    CHECK(y.values == std::vector<std::int32_t>{i});
    ++i;
  }
  CHECK(i == 5);
  // The static member and the free function are the same thing.
  CHECK(labels_of(ds_t::from_tensor_slices(array<float>({2, 1}, {0, 1}),
                                           array<std::int32_t>({2}, {7, 8}))) ==
        std::vector<std::int32_t>{7, 8});
}

TEST_CASE(
    "data: images and one-hot labels keep their per-sample shapes "
    "through batch",
    "[data][dataset]") {
  array<float> x({10, 28, 28});
  array<float> y({10, 10});
  for (std::size_t i = 0; i < 10; ++i) y.values[i * 10 + i % 10] = 1.0f;
  const auto ds = tessel::from_tensor_slices(std::move(x), std::move(y));
  const auto first = ds.begin();  // the element lives in the iterator
  const auto& [x0, y0] = *first;
  CHECK(x0.shape == shape_t{28, 28});
  CHECK(y0.shape == shape_t{10});
  std::vector<shape_t> xs, ys;
  for (const auto& [xb, yb] : ds.batch(4)) {
    xs.push_back(xb.shape);
    ys.push_back(yb.shape);
  }
  CHECK(xs == std::vector<shape_t>{{4, 28, 28}, {4, 28, 28}, {2, 28, 28}});
  CHECK(ys == std::vector<shape_t>{{4, 10}, {4, 10}, {2, 10}});
}

TEST_CASE("data: from_tensor_slices wants one label per sample", "[data][dataset][error]") {
  CHECK_THAT(message_of([] {
               tessel::from_tensor_slices(array<float>({5, 2}), array<std::int32_t>({4}));
             }),
             Contains("x has 5 samples (shape (5, 2))") && Contains("y has 4 (shape (4,))") &&
                 Contains("first dimensions must be equal"));
  CHECK_THAT(message_of([] {
               tessel::from_tensor_slices(array<float>({}, {1.0f}), array<std::int32_t>({1}));
             }),
             Contains("x has rank 0"));
  CHECK_THAT(message_of([] {
               tessel::from_tensor_slices(array<float>({2, 2}, {1.0f}), array<std::int32_t>({2}));
             }),
             Contains("x has shape (2, 2)") && Contains("has 1 values"));
}

TEST_CASE("data: from_tensor_slices refuses arrays whose shape overflows 64 bits",
          "[data][dataset][error]") {
  // 2^60 x 16 = 2^64 wraps to 0: unchecked, 2^60 samples of no values would be batched, reading
  // past the end of x.
  const std::size_t huge = std::size_t{1} << 60;
  CHECK_THAT(
      message_of([&] {
        tessel::from_tensor_slices(array<float>({huge, 16}, {}), array<std::int32_t>({huge}, {}));
      }),
      Contains("from_tensor_slices: x: shape (1152921504606846976, 16) has more elements "
               "than a 64-bit size can count"));
  CHECK_THAT(message_of([&] {
               tessel::from_tensor_slices(array<float>({4, 2}), array<float>({4, huge, 16}, {}));
             }),
             Contains("from_tensor_slices: y: shape (4, 1152921504606846976, 16)"));
}

TEST_CASE("data: batch stacks samples and keeps or drops the remainder", "[data][dataset]") {
  const auto ds = numbered(10);
  std::vector<shape_t> xs, ys;
  for (const auto& [x, y] : ds.batch(4)) {
    xs.push_back(x.shape);
    ys.push_back(y.shape);
  }
  CHECK(xs == std::vector<shape_t>{{4, 3}, {4, 3}, {2, 3}});
  CHECK(ys == std::vector<shape_t>{{4}, {4}, {2}});
  CHECK(ds.batch(4).cardinality() == 3u);
  CHECK(labels_of(ds.batch(4)) == iota_vector(10));

  CHECK(ds.batch(4, true).cardinality() == 2u);
  CHECK(labels_of(ds.batch(4, true)) == iota_vector(8));
  CHECK(ds.batch(5, true).cardinality() == 2u);
  CHECK(ds.batch(20).cardinality() == 1u);
  CHECK(ds.batch(20, true).cardinality() == 0u);
  CHECK(labels_of(ds.batch(20, true)).empty());

  // The values of the second batch are rows 4..7 in order.
  auto it = ds.batch(4).begin();
  ++it;
  CHECK(it->first.values == std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
}

TEST_CASE(
    "data: batching a batched dataset nests equal batches and names "
    "unequal ones",
    "[data][dataset]") {
  const auto nested = numbered(8).batch(2, true).batch(2);
  CHECK(nested.cardinality() == 2u);
  std::vector<shape_t> xs;
  for (const auto& [x, y] : nested) {
    xs.push_back(x.shape);
    CHECK(y.shape == shape_t{2, 2});
  }
  CHECK(xs == std::vector<shape_t>{{2, 2, 3}, {2, 2, 3}});
  CHECK(labels_of(nested) == iota_vector(8));

  // 10 samples by 3 give batches of 3, 3, 3, 1: the second outer batch mixes (3, 3) and (1, 3).
  const auto uneven = numbered(10).batch(3).batch(2);
  auto it = uneven.begin();
  CHECK(it->first.shape == shape_t{2, 3, 3});
  CHECK_THAT(message_of([&] { ++it; }), Contains("cannot batch elements of different shapes") &&
                                            Contains("(3, 3)") && Contains("(1, 3)") &&
                                            Contains("drop_remainder=true"));
  CHECK(it == uneven.end());
}

TEST_CASE("data: batch, shuffle, take, repeat and prefetch name a refused size",
          "[data][dataset][error]") {
  const auto ds = numbered(4);
  CHECK_THAT(message_of([&] { ds.batch(0); }),
             Contains("batch_size must be greater than zero, got 0"));
  CHECK_THAT(message_of([&] { ds.batch(-3); }), Contains("got -3"));
  CHECK_THAT(message_of([&] { ds.shuffle(0, 1); }),
             Contains("buffer_size must be greater than zero, got 0"));
  CHECK_THAT(message_of([&] { ds.shuffle(-1, 1); }), Contains("got -1"));
  CHECK_THAT(message_of([&] { ds.take(-2); }),
             Contains("take: count must be >= 0, or -1") && Contains("got -2"));
  CHECK_THAT(message_of([&] { ds.repeat(-5); }),
             Contains("repeat: count must be >= 0") && Contains("got -5"));
  CHECK_THAT(message_of([&] { ds.prefetch(-2); }),
             Contains("prefetch: buffer_size") && Contains("got -2"));
}

TEST_CASE(
    "data: every operation returns a new dataset and leaves its input as "
    "it was",
    "[data][dataset]") {
  const auto ds = numbered(6);
  const auto batched = ds.batch(4);
  const auto shuffled = ds.shuffle(6, 1);
  CHECK(ds.cardinality() == 6u);
  CHECK(labels_of(ds) == iota_vector(6));
  CHECK(batched.cardinality() == 2u);
  CHECK(is_permutation_of_iota(labels_of(shuffled)));
  const auto copy = batched;  // shares the source arrays
  CHECK(labels_of(copy) == iota_vector(6));
}

TEST_CASE("data: shuffle gives a permutation, reproducible from the seed",
          "[data][dataset][shuffle]") {
  const auto a = numbered(100).shuffle(100, 42);
  const auto b = numbered(100).shuffle(100, 42);
  const auto a0 = labels_of(a);
  const auto a1 = labels_of(a);
  CHECK(is_permutation_of_iota(a0));
  CHECK(is_permutation_of_iota(a1));
  CHECK(a0 != iota_vector(100));
  // Same seed, same iteration count: same order, in every epoch.
  CHECK(labels_of(b) == a0);
  CHECK(labels_of(b) == a1);
  // Another seed, another order.
  CHECK(labels_of(numbered(100).shuffle(100, 43)) != a0);
  // Without a seed, one is drawn at random.
  CHECK(is_permutation_of_iota(labels_of(numbered(100).shuffle(100))));
  // Copies share the iteration count, as tf.data's seed generator is shared.
  const auto c = a;
  CHECK(labels_of(c) != a0);
}

TEST_CASE("data: shuffle reshuffles each epoch unless told not to", "[data][dataset][shuffle]") {
  const auto ds = numbered(100).shuffle(100, 7);
  const auto e0 = labels_of(ds);
  const auto e1 = labels_of(ds);
  const auto e2 = labels_of(ds);
  CHECK(e0 != e1);
  CHECK(e1 != e2);
  CHECK(is_permutation_of_iota(e2));

  const auto fixed = numbered(100).shuffle(100, 7, false);
  const auto f0 = labels_of(fixed);
  CHECK(labels_of(fixed) == f0);
  CHECK(is_permutation_of_iota(f0));

  // Under repeat, each repetition is a pass of its own.
  const auto rep = labels_of(numbered(100).shuffle(100, 7).repeat(3));
  REQUIRE(rep.size() == 300);
  const std::vector<std::int32_t> r0(rep.begin(), rep.begin() + 100),
      r1(rep.begin() + 100, rep.begin() + 200);
  CHECK(is_permutation_of_iota(r0));
  CHECK(is_permutation_of_iota(r1));
  CHECK(r0 != r1);
}

TEST_CASE("data: a small shuffle buffer keeps locality as in tf.data", "[data][dataset][shuffle]") {
  const std::int32_t buffer = 10;
  const auto out = labels_of(numbered(1000).shuffle(buffer, 3));
  CHECK(is_permutation_of_iota(out));
  CHECK(out != iota_vector(1000));
  // The element at output position p was drawn from a buffer holding inputs [0, p + buffer).
  std::int32_t max_ahead = 0;
  for (std::size_t p = 0; p < out.size(); ++p) {
    max_ahead = std::max(max_ahead, out[p] - static_cast<std::int32_t>(p));
  }
  CHECK(max_ahead < buffer);
  CHECK(labels_of(numbered(50).shuffle(1, 3)) == iota_vector(50));
}

TEST_CASE("data: shuffle before batch batches the shuffled order", "[data][dataset][shuffle]") {
  const auto samples = labels_of(numbered(100).shuffle(100, 5));
  const auto batched = numbered(100).shuffle(100, 5).batch(32);
  std::vector<std::int32_t> flat;
  std::vector<std::size_t> sizes;
  for (const auto& [x, y] : batched) {
    flat.insert(flat.end(), y.values.begin(), y.values.end());
    sizes.push_back(y.values.size());
    for (std::size_t i = 0; i < y.values.size(); ++i) CHECK(x.values[3 * i] == 3.0f * y.values[i]);
  }
  CHECK(flat == samples);
  CHECK(sizes == std::vector<std::size_t>{32, 32, 32, 4});
  // Batches shuffled after batching keep their contents.
  for (const auto& [x, y] : numbered(100).batch(10).shuffle(10, 1)) {
    CHECK(y.values.size() == 10);
    CHECK(y.values.back() - y.values.front() == 9);
  }
}

TEST_CASE("data: repeat, take and cardinality", "[data][dataset]") {
  const auto ds = numbered(10);
  CHECK(ds.repeat(3).cardinality() == 30u);
  CHECK(labels_of(ds.repeat(2)).size() == 20);
  CHECK(ds.repeat().cardinality() == tessel::data::infinite_cardinality);
  CHECK(ds.repeat().batch(4).cardinality() == tessel::data::infinite_cardinality);
  CHECK(ds.repeat().take(25).cardinality() == 25u);
  const auto taken = labels_of(ds.repeat().take(25));
  REQUIRE(taken.size() == 25);
  for (std::size_t i = 0; i < 25; ++i) CHECK(taken[i] == static_cast<std::int32_t>(i % 10));

  CHECK(ds.take(3).cardinality() == 3u);
  CHECK(labels_of(ds.take(3)) == iota_vector(3));
  CHECK(ds.take(-1).cardinality() == 10u);
  CHECK(ds.take(100).cardinality() == 10u);
  CHECK(labels_of(ds.take(100)) == iota_vector(10));
  CHECK(ds.take(0).cardinality() == 0u);
  CHECK(labels_of(ds.take(0)).empty());
  CHECK(ds.repeat(0).cardinality() == 0u);
  CHECK(labels_of(ds.repeat(0)).empty());

  // Batches run across repetitions, as in tf.data: 20 samples in batches of 4 and 4 ... 4.
  CHECK(ds.repeat(2).batch(4).cardinality() == 5u);
  CHECK(labels_of(ds.repeat(2).batch(4)).size() == 20);
  // Batch then repeat: each repetition has its short last batch.
  CHECK(ds.batch(4).repeat(2).cardinality() == 6u);

  // Repeating nothing forever ends at once instead of spinning.
  CHECK(ds.take(0).repeat().cardinality() == 0u);
  CHECK(labels_of(ds.take(0).repeat()).empty());
}

TEST_CASE("data: cache replays the first complete pass", "[data][dataset][cache]") {
  const auto ds = numbered(50).shuffle(50, 9).cache();
  // A pass left early stores nothing.
  for (const auto& [x, y] : ds) {
    (void)x;
    if (y.values[0] >= 0) break;
  }
  const auto e1 = labels_of(ds);
  CHECK(is_permutation_of_iota(e1));
  CHECK(labels_of(ds) == e1);  // frozen: the shuffle ran before the cache
  CHECK(labels_of(ds.repeat(2)).size() == 100);

  // Reshuffling after the cache still reshuffles.
  const auto after = numbered(50).cache().shuffle(50, 9);
  CHECK(labels_of(after) != labels_of(after));

  // A cache of elements that already hold values (after prefetch) replays them too.
  const auto batches = numbered(10).batch(4).prefetch(2).cache();
  const auto b0 = labels_of(batches);
  CHECK(b0 == iota_vector(10));
  CHECK(labels_of(batches) == b0);
}

TEST_CASE("data: prefetch gives the same elements as without", "[data][dataset][prefetch]") {
  const auto plain = numbered(1000).shuffle(1000, 11).batch(32);
  const auto fetched = numbered(1000).shuffle(1000, 11).batch(32).prefetch(2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::pair<array<float>, array<std::int32_t>>> a, b;
    for (const auto& e : plain) a.push_back(e);
    for (const auto& e : fetched) b.push_back(e);
    REQUIRE(a.size() == 32);
    REQUIRE(b.size() == a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].first.shape == b[i].first.shape);
      CHECK(a[i].first.values == b[i].first.values);
      CHECK(a[i].second.values == b[i].second.values);
    }
  }
  CHECK(fetched.cardinality() == 32u);
  CHECK(labels_of(numbered(100).prefetch(1)) == iota_vector(100));
  CHECK(labels_of(numbered(100).prefetch(0)) == iota_vector(100));
  CHECK(labels_of(numbered(100).prefetch()) == iota_vector(100));
  // Prefetch at several places in one pipeline.
  CHECK(labels_of(numbered(100).prefetch(3).batch(7).prefetch(2).repeat(2).prefetch(1)).size() ==
        200);
  CHECK(labels_of(numbered(100).prefetch(3).batch(7).prefetch(2).batch(2, true)).size() == 98);
}

TEST_CASE("data: a prefetching iteration left early stops its thread",
          "[data][dataset][prefetch]") {
  SECTION("break out of a range-for over an endless dataset") {
    const auto ds = numbered(1000).repeat().shuffle(100, 1).batch(8).prefetch(4);
    int seen = 0;
    for (const auto& [x, y] : ds) {
      CHECK(x.shape == shape_t{8, 3});
      if (++seen == 3) break;
    }
    CHECK(seen == 3);
  }
  SECTION(
      "destroy the iterator after one batch while the producer waits for "
      "room") {
    const auto ds = numbered(1000).batch(10).prefetch(1);
    auto it = ds.begin();
    CHECK(it->second.values.front() == 0);
    std::this_thread::sleep_for(
        std::chrono::milliseconds(20));  // the producer fills its slot and blocks
  }
  SECTION("destroy the dataset first, then the iterator") {
    auto it = [] {
      const auto ds = numbered(100).prefetch(2).batch(5).prefetch(2);
      return ds.begin();
    }();
    ++it;
    CHECK(it->second.values == std::vector<std::int32_t>{5, 6, 7, 8, 9});
  }
  SECTION("never read") {
    const auto ds = numbered(100).prefetch(2);
    const auto it = ds.begin();
  }
}

TEST_CASE(
    "data: an error in the prefetch thread reaches the consumer at its "
    "position",
    "[data][dataset][prefetch][error]") {
  // Batches of 3, 3, 3, 1 batched by 2: the second outer batch cannot be made.
  SECTION("from rows") {
    const auto ds = numbered(10).batch(3).batch(2).prefetch(2);
    auto it = ds.begin();
    REQUIRE(it != ds.end());
    CHECK(it->first.shape == shape_t{2, 3, 3});
    CHECK_THAT(message_of([&] { ++it; }), Contains("cannot batch elements of different shapes"));
    CHECK(it == ds.end());
  }
  SECTION("from prefetched values") {
    const auto ds = numbered(10).batch(3).prefetch(1).batch(2).prefetch(1);
    std::vector<shape_t> shapes;
    const auto msg = message_of([&] {
      for (const auto& [x, y] : ds) shapes.push_back(x.shape);
    });
    CHECK_THAT(msg, Contains("(3, 3)") && Contains("(1, 3)"));
    CHECK(shapes == std::vector<shape_t>{{2, 3, 3}});
  }
}

TEST_CASE("data: two iterations of one dataset run independently", "[data][dataset]") {
  const auto ds = numbered(5).prefetch(1);
  auto a = ds.begin();
  auto b = ds.begin();
  std::vector<std::int32_t> la, lb;
  for (; a != ds.end() && b != ds.end(); ++a, ++b) {
    la.push_back(a->second.values[0]);
    lb.push_back(b->second.values[0]);
  }
  CHECK(la == iota_vector(5));
  CHECK(lb == iota_vector(5));
}

// Speed is measured in benchmarks (README: one epoch of this pipeline takes 30-60 ms here); this
// case checks that a full-size epoch, shuffled and prefetched, yields every sample once.
TEST_CASE("data: an epoch of 60000 x 784 floats in batches of 32 yields every sample once",
          "[data][dataset]") {
  array<float> x({60000, 784});
  for (std::size_t i = 0; i < x.values.size(); ++i) x.values[i] = static_cast<float>(i % 251) / 251;
  array<std::int32_t> y({60000});
  for (std::size_t i = 0; i < 60000; ++i) y.values[i] = static_cast<std::int32_t>(i % 10);
  const auto base = tessel::from_tensor_slices(std::move(x), std::move(y));
  for (const auto& [name, ds] : {std::pair{"batch(32)", base.batch(32)},
                                 std::pair{"shuffle(60000, 1).batch(32).prefetch(2)",
                                           base.shuffle(60000, 1).batch(32).prefetch(2)}}) {
    std::size_t batches = 0;
    std::int64_t label_sum = 0;
    for (const auto& [xb, yb] : ds) {
      ++batches;
      for (const std::int32_t v : yb.values) label_sum += v;
    }
    INFO(name);
    CHECK(batches == 1875);
    CHECK(label_sum == 6000 * 45);
  }
}
