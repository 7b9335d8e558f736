#pragma once
// What a Keras user does to NumPy arrays by hand before fit: astype and scale, reshape, row
// slices, one-hot labels (keras.utils.to_categorical), stacking.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/errors.hpp"
#include "array.hpp"

namespace tessel::data {

// Throws unless the values fill the shape exactly (and the shape's element count fits a 64-bit
// size); every function here that indexes rows calls it first, so a hand-built array with a wrong
// shape fails with its name instead of reading past the end.
template <class T>
void check_shape(const array<T>& a, std::string_view name = "array") {
  const std::size_t count = element_count(a.shape, name);
  if (count != a.values.size()) {
    throw value_error(std::string(name) + " has shape " + shape_to_string(a.shape) +
                      ", which holds " + std::to_string(count) + " values, but it has " +
                      std::to_string(a.values.size()) +
                      " values; give an array as many values as the product of its shape");
  }
}

namespace detail {

// Printed in messages as NumPy would print the value (uint8 as a number, not a character).
template <class T>
std::string value_to_string(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(+v);
  }
}

// The shape of one entry along the first dimension.
inline std::vector<std::size_t> row_shape(const std::vector<std::size_t>& shape) {
  return shape.empty() ? std::vector<std::size_t>{}
                       : std::vector<std::size_t>(shape.begin() + 1, shape.end());
}

// Copies rows[i] of a row-major source (row_size values a row) to dst, one after the other. Shared
// by take_rows and the dataset, which gathers a batch from sample indices.
template <class T>
void gather_rows(const T* src, std::size_t row_size, std::span<const std::size_t> rows, T* dst) {
  for (const std::size_t r : rows) {
    dst = std::copy_n(src + r * row_size, row_size, dst);
  }
}

// np.stack of count arrays, get(i) giving the i-th; the result has a new leading dimension.
template <class T, class Get>
array<T> stack_with(std::size_t count, Get&& get, std::string_view what) {
  if (count == 0)
    throw value_error(std::string(what) + ": nothing to stack (need at least one array)");
  const array<T>& first = get(std::size_t{0});
  check_shape(first, std::string(what) + ": array 0");
  std::vector<std::size_t> shape{count};
  shape.insert(shape.end(), first.shape.begin(), first.shape.end());
  array<T> out;
  out.values.resize(element_count(shape, what));
  out.shape = std::move(shape);
  T* dst = out.values.data();
  for (std::size_t i = 0; i < count; ++i) {
    const array<T>& a = get(i);
    if (a.shape != first.shape) {
      throw value_error(std::string(what) +
                        ": all arrays must have the same shape, but array 0 has shape " +
                        shape_to_string(first.shape) + " and array " + std::to_string(i) +
                        " has shape " + shape_to_string(a.shape));
    }
    check_shape(a, std::string(what) + ": array " + std::to_string(i));
    dst = std::copy(a.values.begin(), a.values.end(), dst);
  }
  return out;
}

// Checked conversion of one value: a value the target type cannot hold is an error, where a C++
// cast would wrap or be undefined (a float label 1e10 to int32, a NaN).
template <class To, class From>
To convert_value(From v, std::size_t index) {
  if constexpr (std::is_integral_v<To> && std::is_integral_v<From>) {
    if (!std::in_range<To>(v)) {
      throw value_error("cast: value " + value_to_string(v) + " at index " + std::to_string(index) +
                        " does not fit the target integer type (range " +
                        std::to_string(std::numeric_limits<To>::min()) + " to " +
                        std::to_string(std::numeric_limits<To>::max()) + ")");
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    const long double t = std::trunc(static_cast<long double>(v));
    if (!(t >= static_cast<long double>(std::numeric_limits<To>::min()) &&
          t <= static_cast<long double>(std::numeric_limits<To>::max()))) {
      throw value_error("cast: value " + value_to_string(v) + " at index " + std::to_string(index) +
                        " does not fit the target integer type (range " +
                        std::to_string(std::numeric_limits<To>::min()) + " to " +
                        std::to_string(std::numeric_limits<To>::max()) + ")");
    }
  }
  return static_cast<To>(v);
}

}  // namespace detail

// x.astype(To), checked: a value the target integer type cannot hold throws, naming it and its
// index (float to integer truncates toward zero, as NumPy does).
template <class To, class From>
array<To> cast(const array<From>& a) {
  check_shape(a, "cast: the input");
  array<To> out;
  out.shape = a.shape;
  out.values.resize(a.values.size());
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, From>) {
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      out.values[i] = detail::convert_value<To>(a.values[i], i);
    }
  } else {
    std::transform(a.values.begin(), a.values.end(), out.values.begin(),
                   [](From v) { return static_cast<To>(v); });
  }
  return out;
}

// x.astype("float32") * scale: to_float(x_train, 1.0f / 255) is Keras's `x_train / 255.0`.
template <class From>
array<float> to_float(const array<From>& a, float scale = 1.0f) {
  array<float> out = cast<float>(a);
  if (scale != 1.0f) {
    for (float& v : out.values) v *= scale;
  }
  return out;
}

// y.astype("int32"): the label type sparse losses take.
template <class From>
array<std::int32_t> to_int32(const array<From>& a) {
  return cast<std::int32_t>(a);
}

// NumPy's -1 in a reshape: the one dimension computed from the others.
inline constexpr std::size_t infer_dim = std::numeric_limits<std::size_t>::max();

// x.reshape(shape): same values, new shape; one dimension may be infer_dim. Taking the array by
// value lets reshape(std::move(x), ...) keep the values without a copy.
template <class T>
array<T> reshape(array<T> a, std::vector<std::size_t> shape) {
  check_shape(a, "reshape: the input");
  const std::size_t size = a.values.size();
  std::vector<std::size_t> known_dims;
  std::size_t inferred = shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != infer_dim) {
      known_dims.push_back(shape[i]);
    } else if (inferred != shape.size()) {
      throw value_error("reshape: can only infer one dimension, but dimensions " +
                        std::to_string(inferred) + " and " + std::to_string(i) +
                        " are both infer_dim");
    } else {
      inferred = i;
    }
  }
  auto shape_text = [&] {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) {
      s += (i ? ", " : "") + (shape[i] == infer_dim ? std::string("-1") : std::to_string(shape[i]));
    }
    return s + (shape.size() == 1 ? ",)" : ")");
  };
  const std::size_t known = element_count(
      known_dims, "reshape: cannot reshape array of size " + std::to_string(size) + " (shape " +
                      shape_to_string(a.shape) + ") into shape " + shape_text());
  if (inferred != shape.size()) {
    if (known == 0 || size % known != 0) {
      throw value_error("reshape: cannot reshape array of size " + std::to_string(size) +
                        " (shape " + shape_to_string(a.shape) + ") into shape " + shape_text());
    }
    shape[inferred] = size / known;
  } else if (known != size) {
    throw value_error("reshape: cannot reshape array of size " + std::to_string(size) + " (shape " +
                      shape_to_string(a.shape) + ") into shape " + shape_text() + " (size " +
                      std::to_string(known) + ")");
  }
  a.shape = std::move(shape);
  return a;
}

// a[begin:end] along the first dimension (x_train[:50000]); out-of-range bounds throw rather than
// clamp, since in C++ they are more often a bug than a shorthand.
template <class T>
array<T> slice_rows(const array<T>& a, std::size_t begin, std::size_t end) {
  check_shape(a, "slice_rows: the input");
  if (a.shape.empty())
    throw value_error("slice_rows: the array has rank 0 (shape ()), so it has no rows");
  if (begin > end || end > a.shape[0]) {
    throw value_error("slice_rows: rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") are not within the array's " + std::to_string(a.shape[0]) +
                      " rows (shape " + shape_to_string(a.shape) +
                      "); need begin <= end <= " + std::to_string(a.shape[0]));
  }
  const std::size_t row_size = array<T>::element_count(detail::row_shape(a.shape));
  array<T> out;
  out.shape = a.shape;
  out.shape[0] = end - begin;
  out.values.assign(a.values.begin() + static_cast<std::ptrdiff_t>(begin * row_size),
                    a.values.begin() + static_cast<std::ptrdiff_t>(end * row_size));
  return out;
}

// np.take(a, rows, axis=0): the given rows, in the given order (repeats allowed).
template <class T>
array<T> take_rows(const array<T>& a, const std::vector<std::size_t>& rows) {
  check_shape(a, "take_rows: the input");
  if (a.shape.empty())
    throw value_error("take_rows: the array has rank 0 (shape ()), so it has no rows");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= a.shape[0]) {
      throw value_error("take_rows: row " + std::to_string(rows[i]) + " (at position " +
                        std::to_string(i) + ") is out of range for an array of " +
                        std::to_string(a.shape[0]) + " rows (shape " + shape_to_string(a.shape) +
                        ")");
    }
  }
  const std::size_t row_size = array<T>::element_count(detail::row_shape(a.shape));
  array<T> out;
  out.shape = a.shape;
  out.shape[0] = rows.size();
  out.values.resize(element_count(out.shape, "take_rows"));
  detail::gather_rows(a.values.data(), row_size, rows, out.values.data());
  return out;
}

// np.stack(arrays): arrays of one shape, stacked along a new first dimension.
template <class T>
array<T> stack(const std::vector<array<T>>& arrays) {
  return detail::stack_with<T>(
      arrays.size(), [&](std::size_t i) -> const array<T>& { return arrays[i]; }, "stack");
}

// keras.utils.to_categorical(labels, num_classes): one-hot float rows, shape labels.shape +
// (num_classes,). As in Keras, a trailing dimension of 1 is dropped first ((n, 1) gives (n, C))
// and num_classes defaults to the largest label + 1.
template <class T>
array<float> to_categorical(const array<T>& labels,
                            std::optional<std::size_t> num_classes = std::nullopt) {
  check_shape(labels, "to_categorical: the labels");
  std::vector<std::size_t> classes(labels.values.size());
  for (std::size_t i = 0; i < labels.values.size(); ++i) {
    const T v = labels.values[i];
    bool valid = true;
    if constexpr (std::is_floating_point_v<T>) {
      valid = std::isfinite(v) && v >= 0 && std::trunc(v) == v &&
              v < static_cast<T>(std::numeric_limits<std::size_t>::max());
    } else if constexpr (std::is_signed_v<T>) {
      valid = v >= 0;
    }
    if (!valid) {
      throw value_error("to_categorical: label " + detail::value_to_string(v) + " at index " +
                        std::to_string(i) + " is not a class index (labels must be integers >= 0)");
    }
    classes[i] = static_cast<std::size_t>(v);
  }
  const std::size_t n_classes =
      num_classes ? *num_classes
                  : (classes.empty() ? 0 : *std::max_element(classes.begin(), classes.end()) + 1);
  for (std::size_t i = 0; i < classes.size(); ++i) {
    if (classes[i] >= n_classes) {
      throw value_error("to_categorical: label " + std::to_string(classes[i]) + " at index " +
                        std::to_string(i) +
                        " is out of range for num_classes=" + std::to_string(n_classes) +
                        " (labels must be in [0, " + std::to_string(n_classes) + "))");
    }
  }
  std::vector<std::size_t> shape = labels.shape;
  if (shape.size() > 1 && shape.back() == 1) shape.pop_back();
  shape.push_back(n_classes);
  array<float> out;
  out.values.resize(element_count(shape, "to_categorical"));
  out.shape = std::move(shape);
  for (std::size_t i = 0; i < classes.size(); ++i) out.values[i * n_classes + classes[i]] = 1.0f;
  return out;
}

// The array functions over the element types of the data readers (float, int32, uint8), compiled
// once in tessel::tessel (core/compilation.hpp).
#define TESSEL_ARRAY_OPS_TEMPLATES(prefix, T)                                            \
  prefix template void check_shape<T>(const array<T>&, std::string_view);               \
  prefix template array<T> reshape<T>(array<T>, std::vector<std::size_t>);              \
  prefix template array<T> slice_rows<T>(const array<T>&, std::size_t, std::size_t);    \
  prefix template array<T> take_rows<T>(const array<T>&, const std::vector<std::size_t>&);
#if TESSEL_EXTERN_TEMPLATES
TESSEL_ARRAY_OPS_TEMPLATES(extern, float)
TESSEL_ARRAY_OPS_TEMPLATES(extern, std::int32_t)
TESSEL_ARRAY_OPS_TEMPLATES(extern, std::uint8_t)
#endif

}  // namespace tessel::data
