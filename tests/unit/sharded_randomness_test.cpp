// Randomness keyed by global element index: a device that holds a shard of a variable (or of a
// batch's activation) draws exactly its slice of what one device draws for the whole tensor,
// whichever dimensions the layout splits and over how many devices.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <tessel/tessel.hpp>

namespace {
using namespace tessel;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;

// The values of the block [offset, offset + extent) of a row-major tensor of shape `global`.
std::vector<float> slice(const std::vector<float>& whole, const shape_value& global,
                         const shape_value& offset, const shape_value& extent) {
  std::vector<float> out;
  const std::size_t rank = global.rank;
  std::vector<std::size_t> at(rank, 0);
  std::size_t count = 1;
  for (std::size_t d = 0; d < rank; ++d) count *= extent[d];
  for (std::size_t k = 0; k < count; ++k) {
    std::size_t g = 0;
    for (std::size_t d = 0; d < rank; ++d) g = g * global[d] + offset[d] + at[d];
    out.push_back(whole[g]);
    for (std::size_t d = rank; d-- > 0;) {
      if (++at[d] < extent[d]) break;
      at[d] = 0;
    }
  }
  return out;
}
std::span<const std::size_t> dims(const shape_value& s) { return {s.extents.data(), s.rank}; }

// Every device's block of `Layout` on the 2x4 mesh, drawn alone, equals its slice of the whole.
template <class Layout>
void check_layout(const char* initializer, const shape_value& global) {
  const random::stream s(1337, random::hash_name("d1/kernel"));
  // The whole tensor, drawn as one block (for rank 2 and below that is fill itself, below).
  shape_value zero = global;
  for (std::size_t d = 0; d < zero.rank; ++d) zero.extents[d] = 0;
  std::vector<float> whole(global.elements());
  initializers::fill_block(initializer, s, dims(global), dims(zero), dims(global), whole);
  for (std::size_t data = 0; data < 2; ++data)
    for (std::size_t model = 0; model < 4; ++model) {
      const block b = shard_block(Layout::value, mesh_2x4::value, global, {data, model});
      std::size_t n = 1;
      for (std::size_t d = 0; d < global.rank; ++d) n *= b.extent[d];
      std::vector<float> mine(n);
      initializers::fill_block(initializer, s, dims(global), dims(b.offset), dims(b.extent), mine);
      INFO(initializer << " on device (" << data << ", " << model << ")");
      CHECK(mine == slice(whole, global, b.offset, b.extent));
    }
}
}  // namespace

TEST_CASE("randomness: an initializer draws a shard's exact slice of the unsharded variable",
          "[random][sharding]") {
  for (const char* init : {"glorot_uniform", "he_normal", "random_normal", "lecun_uniform"}) {
    check_layout<tensor_layout<mesh_2x4, none, "model">>(init, {784, 200});    // columns
    check_layout<tensor_layout<mesh_2x4, "model", none>>(init, {784, 200});    // rows
    check_layout<tensor_layout<mesh_2x4, "data", "model">>(init, {784, 200});  // both
    check_layout<tensor_layout<mesh_2x4, axes<"data", "model">, none>>(init, {64, 10});
    check_layout<tensor_layout<mesh_2x4, "model">>(init, {256});  // a bias
    check_layout<tensor_layout<mesh_2x4, none, none, "data", "model">>(init, {3, 3, 8, 16});
  }
  // The whole tensor as one block is fill itself.
  const random::stream s(7, 9);
  std::vector<float> a(12 * 5), b(12 * 5);
  initializers::fill("glorot_normal", s, 12, 5, 2, a);
  const shape_value g{12, 5}, zero{0, 0};
  initializers::fill_block("glorot_normal", s, dims(g), dims(zero), dims(g), b);
  CHECK(a == b);
  // A block outside the variable is refused.
  std::vector<float> c(6);
  const shape_value off{11, 0}, ext{2, 3};
  CHECK_THROWS_AS(initializers::fill_block("zeros", s, dims(g), dims(off), dims(ext), c),
                  tessel::value_error);
}

TEST_CASE("randomness: uniform draws take each philox block's four words at once, as element by "
          "element",
          "[random]") {
  const random::stream s(11, 5, 3);
  // Runs starting on and off a block's first word, shorter than a block, spanning many.
  for (std::uint64_t first : {0, 1, 2, 3, 4, 7, 1021})
    for (std::size_t n : {0, 1, 2, 3, 5, 8, 13, 600}) {
      std::vector<std::uint32_t> words(n);
      s.fill_bits(first, words);
      bool same = true;
      for (std::size_t k = 0; k < n; ++k) same = same && words[k] == s.bits(first + k);
      INFO("words " << first << " to " << first + n);
      CHECK(same);
      // fill at an offset: element k is the uniform value at first + k, scaled to the limit.
      std::vector<float> v(n);
      initializers::fill("glorot_uniform", s, 6, 10, 2, v, first);
      const double limit = std::sqrt(6.0 / 16.0);
      for (std::size_t k = 0; k < n; ++k)
        same = same && v[k] == static_cast<float>((2.0 * s.uniform(first + k) - 1.0) * limit);
      CHECK(same);
    }
  // A block of a rank-3 variable (rows of 3 that start inside philox's blocks of four): each
  // element is the value at its global row-major index.
  const shape_value g{4, 5, 7}, off{1, 2, 3}, ext{2, 3, 3};
  std::vector<float> b(2 * 3 * 3);
  initializers::fill_block("he_uniform", s, dims(g), dims(off), dims(ext), b);
  const double limit = std::sqrt(6.0 / (5.0 * 4.0));  // fan_in: receptive field 4 times 5
  std::size_t k = 0;
  bool same = true;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t l = 0; l < 3; ++l, ++k) {
        const std::uint64_t at = ((1 + i) * 5 + 2 + j) * 7 + 3 + l;
        same = same && b[k] == static_cast<float>((2.0 * s.uniform(at) - 1.0) * limit);
      }
  CHECK(same);
}

TEST_CASE("initializers: any range of a block's values is drawn as the whole block has them",
          "[random][sharding]") {
  const random::stream s(5, 17);
  // A rank-3 block inside its variable, a rank-2 whole variable, a rank-1 bias, a scalar.
  struct blk {
    shape_value global, offset, extent;
  };
  const blk blocks[] = {{{4, 5, 7}, {1, 2, 3}, {2, 3, 3}},
                        {{6, 10}, {0, 0}, {6, 10}},
                        {{9}, {3}, {5}},
                        {{}, {}, {}}};
  for (const char* init : {"glorot_uniform", "he_normal", "random_normal", "ones"})
    for (const blk& b : blocks) {
      std::vector<float> whole(b.extent.elements());
      initializers::fill_block(init, s, dims(b.global), dims(b.offset), dims(b.extent), whole);
      bool same = true;
      for (std::size_t first = 0; first <= whole.size(); ++first)
        for (std::size_t n = 0; first + n <= whole.size(); ++n) {
          std::vector<float> part(n, -7.0f);
          initializers::fill_block_range(init, s, dims(b.global), dims(b.offset),
                                         dims(b.extent), first, part);
          same = same && std::equal(part.begin(), part.end(), whole.begin() + first);
        }
      INFO(init << ", a block of " << whole.size() << " values");
      CHECK(same);
    }
  // Values past the block's end are refused.
  const shape_value g{6, 10}, zero{0, 0};
  std::vector<float> three(3);
  CHECK_THROWS_AS(
      initializers::fill_block_range("zeros", s, dims(g), dims(zero), dims(g), 58, three),
      tessel::value_error);
}

TEST_CASE(
    "randomness: a dropout mask drawn on a block of rows and columns is its slice of the "
    "whole batch's mask",
    "[random][sharding]") {
  using B = default_backend;
  const std::size_t rows = 12, cols = 20;
  std::vector<float> ones(rows * cols, 1.0f);
  const random::stream s(42, random::hash_name("dropout"), 3);
  auto whole_in = B::make_matrix("in", rows, cols), whole_out = B::make_matrix("out", rows, cols);
  B::upload(ones, whole_in);
  B::dropout(whole_in, whole_out, s, 0.4f, 0, 0, cols);
  std::vector<float> whole(rows * cols);
  B::download(whole_out, whole);
  std::size_t dropped = 0;
  for (float v : whole) dropped += v == 0.0f;
  CHECK(dropped > rows * cols / 5);  // about 40% dropped
  CHECK(dropped < rows * cols * 3 / 5);
  // Blocks of 3 rows x 5 columns, and of 6 rows x 20 columns (the batch split alone).
  for (const auto& [r_ext, c_ext] : {std::pair<std::size_t, std::size_t>{3, 5}, {6, 20}})
    for (std::size_t r0 = 0; r0 < rows; r0 += r_ext)
      for (std::size_t c0 = 0; c0 < cols; c0 += c_ext) {
        auto in = B::make_matrix("in", r_ext, c_ext), out = B::make_matrix("out", r_ext, c_ext);
        B::upload(std::vector<float>(r_ext * c_ext, 1.0f), in);
        B::dropout(in, out, s, 0.4f, r0, c0, cols);
        std::vector<float> mine(r_ext * c_ext);
        B::download(out, mine);
        INFO("block at (" << r0 << ", " << c0 << ")");
        CHECK(mine == slice(whole, {rows, cols}, {r0, c0}, {r_ext, c_ext}));
      }
}

TEST_CASE("initializers: fans as Keras computes them, a convolution's kernel included",
          "[initializers]") {
  using initializers::compute_fans;
  const std::size_t dense[] = {784, 200}, bias[] = {200}, conv[] = {6, 6, 12, 24};
  CHECK(compute_fans(std::span<const std::size_t>(dense)).fan_in == 784);
  CHECK(compute_fans(std::span<const std::size_t>(dense)).fan_out == 200);
  CHECK(compute_fans(std::span<const std::size_t>(bias)).fan_in == 200);
  CHECK(compute_fans(std::span<const std::size_t>(bias)).fan_out == 200);
  // (kh, kw, in, out): the receptive field kh kw times in and out
  CHECK(compute_fans(std::span<const std::size_t>(conv)).fan_in == 6 * 6 * 12);
  CHECK(compute_fans(std::span<const std::size_t>(conv)).fan_out == 6 * 6 * 24);
  // glorot_uniform's limit sqrt(6 / (fan_in + fan_out)) bounds a (3, 3, 1, 12) kernel's values,
  // and they reach near it
  const shape_value g{3, 3, 1, 12}, zero{0, 0, 0, 0};
  std::vector<float> k(g.elements());
  initializers::fill_block("glorot_uniform", random::stream(7, 1), dims(g), dims(zero), dims(g),
                           k);
  const double limit = std::sqrt(6.0 / (9.0 * 1 + 9.0 * 12));
  double largest = 0;
  for (float v : k) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  CHECK(largest <= limit);
  CHECK(largest > 0.8 * limit);
}
