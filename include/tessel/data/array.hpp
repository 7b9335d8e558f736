#pragma once
// A host array: a shape and row-major values. What datasets hold and yield, what
// fit/evaluate/predict take and give back, and what get_weights gives (like the NumPy arrays a
// Keras user passes and gets).
#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"

namespace tessel {

// "(60000, 28, 28)", as NumPy prints a shape.
TESSEL_INLINE std::string shape_to_string(const std::vector<std::size_t>& s);

namespace detail {

// a * b, or nothing where the product does not fit a std::size_t: the one multiplication of
// sizes that shapes are computed with.
constexpr std::optional<std::size_t> checked_multiply(std::size_t a, std::size_t b) noexcept {
  std::size_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// The product of the dimensions of `s`, or nothing where it does not fit a std::size_t. As in
// NumPy, the dimensions other than 0 must multiply within range even when one is 0, so that every
// part of a shape that has a count (a row, a block of rows) has a count that fits too.
TESSEL_INLINE std::optional<std::size_t> checked_element_count(const std::vector<std::size_t>& s);

}  // namespace detail

// The number of values an array of shape `s` holds, the product of its dimensions. A product
// that does not fit a 64-bit size throws value_error naming the shape (after `what`, when given),
// where an unchecked product would wrap to a small number, even 0, and let an array that promises
// more rows than it has pass every later check.
TESSEL_INLINE std::size_t element_count(const std::vector<std::size_t>& s,
                                        std::string_view what = {});

template <class T>
struct array {
  std::vector<std::size_t> shape;
  std::vector<T> values;

  array() = default;
  array(std::vector<std::size_t> s, std::vector<T> v) : shape(std::move(s)), values(std::move(v)) {}
  explicit array(std::vector<std::size_t> s)
      : shape(std::move(s)), values(tessel::element_count(shape)) {}

  static std::size_t element_count(const std::vector<std::size_t>& s) {
    return tessel::element_count(s);
  }
  std::size_t rank() const { return shape.size(); }
  std::size_t size() const { return values.size(); }
  // Number of entries along the first dimension (samples, or batches of samples).
  std::size_t rows() const { return shape.empty() ? 1 : shape[0]; }
  // Elements of one entry along the first dimension.
  std::size_t row_size() const {
    return shape.empty() ? 1 : values.size() / std::max<std::size_t>(shape[0], 1);
  }
  std::span<T> row(std::size_t i) { return {values.data() + i * row_size(), row_size()}; }
  std::span<const T> row(std::size_t i) const { return {values.data() + i * row_size(), row_size()}; }
  T* data() { return values.data(); }
  const T* data() const { return values.data(); }
  // The values in row-major order, as iterating a flattened NumPy array gives them.
  auto begin() { return values.begin(); }
  auto end() { return values.end(); }
  auto begin() const { return values.begin(); }
  auto end() const { return values.end(); }
  // Equal shapes and equal values (NumPy's array_equal).
  friend bool operator==(const array&, const array&) = default;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS

TESSEL_INLINE std::string shape_to_string(const std::vector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

namespace detail {

TESSEL_INLINE std::optional<std::size_t> checked_element_count(const std::vector<std::size_t>& s) {
  std::size_t nonzero = 1;
  bool empty = false;
  for (const std::size_t d : s) {
    if (d == 0) {
      empty = true;
      continue;
    }
    const std::optional<std::size_t> product = checked_multiply(nonzero, d);
    if (!product) return std::nullopt;
    nonzero = *product;
  }
  return empty ? 0 : nonzero;
}

}  // namespace detail

TESSEL_INLINE std::size_t element_count(const std::vector<std::size_t>& s, std::string_view what) {
  if (const std::optional<std::size_t> count = detail::checked_element_count(s)) return *count;
  const bool empty = std::find(s.begin(), s.end(), std::size_t{0}) != s.end();
  throw value_error((what.empty() ? std::string{} : std::string(what) + ": ") + "shape " +
                    shape_to_string(s) +
                    (empty ? " has a dimension of 0, but its other dimensions multiply to more "
                             "than a 64-bit size can count ("
                           : " has more elements than a 64-bit size can count (") +
                    std::to_string(std::numeric_limits<std::size_t>::max()) +
                    "); a dimension is wrong: give each dimension its real size");
}

#endif

}  // namespace tessel
