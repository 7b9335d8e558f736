// initializers: Keras's weight initializers (same names, defaults and distributions), drawn from
// counter-based streams so that element (i, j) of a variable has one value on any mesh.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "philox.hpp"

namespace tessel::initializers {

// fan_in and fan_out as Keras computes them for a kernel of shape (in, out) or a vector.
struct fans {
  double fan_in = 1, fan_out = 1;
};
inline fans compute_fans(std::size_t rows, std::size_t cols, std::size_t rank) {
  if (rank < 2) return {static_cast<double>(rows * cols), static_cast<double>(rows * cols)};
  return {static_cast<double>(rows), static_cast<double>(cols)};
}
// From a whole shape, as Keras's compute_fans: a convolution's kernel (kh, kw, in, out) has
// fan_in = kh kw in and fan_out = kh kw out (the receptive field times its last two dimensions).
inline fans compute_fans(std::span<const std::size_t> shape) {
  if (shape.size() <= 2)
    return compute_fans(shape.size() == 2 ? shape[0] : 1, shape.empty() ? 1 : shape.back(),
                        shape.size());
  double receptive = 1;
  for (std::size_t d = 0; d + 2 < shape.size(); ++d) receptive *= static_cast<double>(shape[d]);
  return {static_cast<double>(shape[shape.size() - 2]) * receptive,
          static_cast<double>(shape.back()) * receptive};
}

TESSEL_INLINE bool is_known(std::string_view name);
// Refuses a name that is not one of them, with Keras's message naming the known ones.
TESSEL_INLINE void require_known(std::string_view name);

namespace detail {
// Element at + j of `out` takes the stream's value at global index g + j, for each run (g, at, n)
// that `runs` visits: the one code path of fill (one run) and fill_block (a run per row of the
// block). Uniform draws take their words four at a time, as philox gives them.
template <class Runs>
void draw(std::string_view name, const random::stream& s, const fans& f, std::span<float> out,
          Runs runs) {
  auto uniform = [&](double limit) {
    std::array<std::uint32_t, 512> words;
    runs([&](std::uint64_t g, std::size_t at, std::size_t n) {
      for (std::size_t done = 0; done < n; done += words.size()) {
        const std::size_t m = std::min(words.size(), n - done);
        s.fill_bits(g + done, std::span(words.data(), m));
        for (std::size_t j = 0; j < m; ++j)
          out[at + done + j] =
              static_cast<float>((2.0 * random::stream::to_uniform(words[j]) - 1.0) * limit);
      }
    });
  };
  auto each = [&](auto value) {
    runs([&](std::uint64_t g, std::size_t at, std::size_t n) {
      for (std::size_t j = 0; j < n; ++j) out[at + j] = value(g + j);
    });
  };
  // Keras's VarianceScaling with a truncated normal: redraw beyond two standard deviations, and
  // divide by .8796... so that the truncated distribution has the requested variance.
  auto truncated = [&](double stddev) {
    each([&](std::uint64_t i) {
      float z = s.normal(i);
      for (std::uint32_t attempt = 1; std::fabs(z) > 2.0f; ++attempt) z = s.normal(i, attempt);
      return static_cast<float>(z * stddev / 0.87962566103423978);
    });
  };
  if (name == "zeros" || name == "ones") {
    for (float& v : out) v = name == "ones" ? 1.0f : 0.0f;
  } else if (name == "glorot_uniform") {
    uniform(std::sqrt(6.0 / (f.fan_in + f.fan_out)));
  } else if (name == "glorot_normal") {
    truncated(std::sqrt(2.0 / (f.fan_in + f.fan_out)));
  } else if (name == "he_normal") {
    truncated(std::sqrt(2.0 / f.fan_in));
  } else if (name == "he_uniform") {
    uniform(std::sqrt(6.0 / f.fan_in));
  } else if (name == "lecun_normal") {
    truncated(std::sqrt(1.0 / f.fan_in));
  } else if (name == "lecun_uniform") {
    uniform(std::sqrt(3.0 / f.fan_in));
  } else if (name == "random_normal") {  // RandomNormal(mean=0.0, stddev=0.05)
    each([&](std::uint64_t i) { return 0.05f * s.normal(i); });
  } else if (name == "random_uniform") {  // RandomUniform(minval=-0.05, maxval=0.05)
    uniform(0.05);
  } else {
    require_known(name);  // (throws: every known name is drawn above)
  }
}
}  // namespace detail

// Fills `out` (the variable's values, row-major, `rows` x `cols`, of logical rank `rank`) with
// element k taken from `s` at global index `first + k`.
TESSEL_INLINE void fill(std::string_view name, const random::stream& s, std::size_t rows,
                        std::size_t cols, std::size_t rank, std::span<float> out,
                        std::uint64_t first = 0);

// Fills `out` with the block of a variable of global shape `global` that starts at `offset` and
// spans `extent` (row-major within the block): each element takes the value at its global
// row-major index, so a device that holds a shard of the variable draws exactly its slice of the
// values one device would hold, whatever the sharding (JAX's threefry keyed by position does the
// same). The fans are the global shape's.
TESSEL_INLINE void fill_block(std::string_view name, const random::stream& s,
                              std::span<const std::size_t> global,
                              std::span<const std::size_t> offset,
                              std::span<const std::size_t> extent, std::span<float> out);
// The values [first, first + out.size()) of that block (row-major within it), and no others: the
// part of a variable a process keeps when the weights are split over the processes, drawn
// without the rest (each value the one fill_block gives at its place).
TESSEL_INLINE void fill_block_range(std::string_view name, const random::stream& s,
                                    std::span<const std::size_t> global,
                                    std::span<const std::size_t> offset,
                                    std::span<const std::size_t> extent, std::size_t first,
                                    std::span<float> out);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS

TESSEL_INLINE bool is_known(std::string_view name) {
  for (std::string_view k : {"zeros", "ones", "glorot_uniform", "glorot_normal", "he_normal",
                             "he_uniform", "random_normal", "random_uniform", "lecun_normal",
                             "lecun_uniform"})
    if (name == k) return true;
  return false;
}

TESSEL_INLINE void require_known(std::string_view name) {
  if (!is_known(name))
    throw value_error("Could not interpret initializer identifier: '" + std::string(name) +
                      "'. Use one of zeros, ones, glorot_uniform, glorot_normal, he_normal, "
                      "he_uniform, lecun_normal, lecun_uniform, random_normal, random_uniform.");
}

TESSEL_INLINE void fill(std::string_view name, const random::stream& s, std::size_t rows,
                        std::size_t cols, std::size_t rank, std::span<float> out,
                        std::uint64_t first) {
  detail::draw(name, s, compute_fans(rows, cols, rank), out,
               [&](auto run) { run(first, 0, out.size()); });
}

TESSEL_INLINE void fill_block(std::string_view name, const random::stream& s,
                              std::span<const std::size_t> global,
                              std::span<const std::size_t> offset,
                              std::span<const std::size_t> extent, std::span<float> out) {
  std::size_t count = extent.size() == global.size() ? 1 : 0;
  for (const std::size_t e : extent) count *= e;
  if (count != out.size())
    throw value_error("fill_block: the block has " + std::to_string(count) +
                      " values; its output has " + std::to_string(out.size()));
  fill_block_range(name, s, global, offset, extent, 0, out);
}

TESSEL_INLINE void fill_block_range(std::string_view name, const random::stream& s,
                                    std::span<const std::size_t> global,
                                    std::span<const std::size_t> offset,
                                    std::span<const std::size_t> extent, std::size_t first,
                                    std::span<float> out) {
  const std::size_t rank = global.size();
  std::size_t count = 1;
  bool inside = offset.size() == rank && extent.size() == rank;
  for (std::size_t d = 0; inside && d < rank; ++d) {
    inside = offset[d] + extent[d] <= global[d];
    count *= extent[d];
  }
  if (!inside || first > count || out.size() > count - first)
    throw value_error("fill_block: the block does not lie inside the variable's global shape, or "
                      "the values [" + std::to_string(first) + ", " +
                      std::to_string(first + out.size()) + ") asked of it exceed its " +
                      std::to_string(inside ? count : 0) + " values");
  // Global row-major strides; the block's rows (its last dimension, contiguous in the variable)
  // from the one that holds value `first`, visited with an odometer over the other dimensions,
  // the first and the last cut to the values asked for.
  std::vector<std::uint64_t> stride(rank, 1);
  for (std::size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * global[d];
  const std::size_t row = rank == 0 ? 1 : extent[rank - 1];
  detail::draw(name, s, compute_fans(global), out, [&](auto run) {
    if (row == 0 || out.empty()) return;
    std::vector<std::size_t> at(rank, 0);
    std::size_t r = first / row;  // the block's row that holds value `first`
    for (std::size_t d = rank; d-- > 1;) {
      at[d - 1] = r % extent[d - 1];
      r /= extent[d - 1];
    }
    const std::size_t end = first + out.size();
    for (std::size_t k = first / row * row; k < end; k += row) {
      std::uint64_t g = 0;
      for (std::size_t d = 0; d < rank; ++d) g += (offset[d] + at[d]) * stride[d];
      const std::size_t lo = std::max(k, first), hi = std::min(k + row, end);
      run(g + (lo - k), lo - first, hi - lo);
      for (std::size_t d = rank; d-- > 1;) {
        if (++at[d - 1] < extent[d - 1]) break;
        at[d - 1] = 0;
      }
    }
  });
}

#endif

}  // namespace tessel::initializers
