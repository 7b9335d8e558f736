// initializers: Keras's weight initializers (same names, defaults and distributions), drawn from
// counter-based streams so that element (i, j) of a variable has one value on any mesh.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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

inline bool is_known(std::string_view name) {
  for (std::string_view k : {"zeros", "ones", "glorot_uniform", "glorot_normal", "he_normal",
                             "he_uniform", "random_normal", "random_uniform", "lecun_normal",
                             "lecun_uniform"})
    if (name == k) return true;
  return false;
}

// Fills `out` (the variable's values, row-major, `rows` x `cols`, of logical rank `rank`) with
// element k taken from `s` at global index `first + k`.
inline void fill(std::string_view name, const random::stream& s, std::size_t rows,
                 std::size_t cols, std::size_t rank, std::span<float> out,
                 std::uint64_t first = 0) {
  const fans f = compute_fans(rows, cols, rank);
  auto uniform = [&](double limit) {
    for (std::size_t k = 0; k < out.size(); ++k)
      out[k] = static_cast<float>((2.0 * s.uniform(first + k) - 1.0) * limit);
  };
  // Keras's VarianceScaling with a truncated normal: redraw beyond two standard deviations, and
  // divide by .8796... so that the truncated distribution has the requested variance.
  auto truncated = [&](double stddev) {
    for (std::size_t k = 0; k < out.size(); ++k) {
      float z = s.normal(first + k);
      for (std::uint32_t attempt = 1; std::fabs(z) > 2.0f; ++attempt) z = s.normal(first + k, attempt);
      out[k] = static_cast<float>(z * stddev / 0.87962566103423978);
    }
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
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = 0.05f * s.normal(first + k);
  } else if (name == "random_uniform") {  // RandomUniform(minval=-0.05, maxval=0.05)
    uniform(0.05);
  } else {
    throw value_error("Could not interpret initializer identifier: '" + std::string(name) +
                      "'. Use one of zeros, ones, glorot_uniform, glorot_normal, he_normal, "
                      "he_uniform, lecun_normal, lecun_uniform, random_normal, random_uniform.");
  }
}

}  // namespace tessel::initializers
