// layer: what every layer shares — its variables, the context a forward/backward pass runs in,
// and Keras-style automatic names (`dense`, `dense_1`, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "../core/fixed_string.hpp"
#include "../core/shape.hpp"
#include "../random/initializers.hpp"

namespace tessel {

// A model variable: its Keras path (`dense/kernel`), its logical (global) shape, and on the
// device its local values and gradient, both stored as (rows, cols) matrices. A bias of shape
// (256,) is stored as 1 x 256.
template <class B>
struct variable {
  std::string path;
  std::vector<std::size_t> shape;
  std::string initializer;
  bool trainable = true;
  typename B::matrix value;
  typename B::matrix gradient;

  std::size_t size() const {
    std::size_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
  // The variable's values on the host, row-major.
  std::vector<float> numpy() const {
    std::vector<float> out(B::rows(value) * B::cols(value));
    B::download(value, out);
    return out;
  }
  void assign(std::span<const float> values) {
    if (values.size() != B::rows(value) * B::cols(value))
      throw value_error("Variable '" + path + "' has " + std::to_string(size()) +
                        " values; cannot assign " + std::to_string(values.size()) + ".");
    B::upload(values, value);
  }
};

// Variables live in a deque so that layers may keep pointers to them while more are added.
template <class B>
using variable_store = std::deque<variable<B>>;

template <class B>
variable<B>& add_variable(variable_store<B>& store, std::string path,
                          std::vector<std::size_t> shape, std::string initializer,
                          std::uint64_t seed, bool trainable = true) {
  const std::size_t rows = shape.size() >= 2 ? shape[0] : 1;
  std::size_t cols = 1;
  for (std::size_t i = shape.size() >= 2 ? 1 : 0; i < shape.size(); ++i) cols *= shape[i];
  variable<B>& v = store.emplace_back();
  v.path = std::move(path);
  v.shape = std::move(shape);
  v.initializer = std::move(initializer);
  v.trainable = trainable;
  v.value = B::make_matrix(v.path, rows, cols);
  v.gradient = B::make_zeros(v.path + "/gradient", rows, cols);
  std::vector<float> host(rows * cols);
  initializers::fill(v.initializer, random::stream(seed, random::hash_name(v.path)), rows, cols,
                     v.shape.size(), host);
  B::upload(host, v.value);
  return v;
}

// Buffers keep their largest size; a smaller batch (the last of an epoch) uses their first rows.
template <class B>
typename B::matrix sized(typename B::matrix& store, std::size_t rows, std::size_t cols,
                         const char* label) {
  if (store.data() == nullptr || B::rows(store) < rows || B::cols(store) != cols)
    store = B::make_matrix(label, rows, cols);
  return B::row_range(store, 0, rows);
}

// Where a pass runs: training or inference, the optimizer step (keys dropout), the global index
// of this shard's first row (keys dropout per sample), and the model's seed.
struct pass_context {
  bool training = false;
  std::uint64_t step = 0;
  std::uint64_t first_row = 0;
  std::uint64_t seed = 0;
};

// Static facts about a layer in a model, computed when the model type is formed.
struct layer_info {
  name_string name;
  shape_value input;   // per-sample shapes (no batch dimension)
  shape_value output;
};

namespace detail {
// Keras names an unnamed layer after its class, numbered by how many unnamed layers of that class
// came before it: dense, dense_1, dense_2.
constexpr name_string auto_name(std::string_view base, std::size_t count) {
  name_string n{};
  std::size_t k = 0;
  for (char c : base) n.data[k++] = c;
  if (count > 0) {
    n.data[k++] = '_';
    char digits[20]{};
    std::size_t d = 0;
    for (std::size_t c = count; c > 0; c /= 10) digits[d++] = static_cast<char>('0' + c % 10);
    while (d > 0) n.data[k++] = digits[--d];
  }
  return n;
}
}  // namespace detail

}  // namespace tessel
