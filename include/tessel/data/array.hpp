#pragma once
// A host array: a shape and row-major values. What datasets hold and yield, and what
// fit/evaluate/predict take and give back (like the NumPy arrays a Keras user passes).
#include <cstddef>
#include <functional>
#include <algorithm>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessel {

template <class T>
struct array {
  std::vector<std::size_t> shape;
  std::vector<T> values;

  array() = default;
  array(std::vector<std::size_t> s, std::vector<T> v) : shape(std::move(s)), values(std::move(v)) {}
  explicit array(std::vector<std::size_t> s)
      : shape(std::move(s)), values(element_count(shape)) {}

  static std::size_t element_count(const std::vector<std::size_t>& s) {
    return std::accumulate(s.begin(), s.end(), std::size_t{1}, std::multiplies<>{});
  }
  std::size_t rank() const { return shape.size(); }
  std::size_t size() const { return values.size(); }
  // Number of entries along the first dimension (samples, or batches of samples).
  std::size_t rows() const { return shape.empty() ? 1 : shape[0]; }
  // Elements of one entry along the first dimension.
  std::size_t row_size() const { return shape.empty() ? 1 : values.size() / std::max<std::size_t>(shape[0], 1); }
  std::span<T> row(std::size_t i) { return {values.data() + i * row_size(), row_size()}; }
  std::span<const T> row(std::size_t i) const { return {values.data() + i * row_size(), row_size()}; }
  T* data() { return values.data(); }
  const T* data() const { return values.data(); }
};

// "(60000, 28, 28)", as NumPy prints a shape.
inline std::string shape_to_string(const std::vector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

}  // namespace tessel
