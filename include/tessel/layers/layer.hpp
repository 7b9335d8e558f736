// layer: what every layer shares — its variables, the context a forward/backward pass runs in,
// and Keras-style automatic names (`dense`, `dense_1`, ...).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/fixed_string.hpp"
#include "../core/shape.hpp"
#include "../random/initializers.hpp"
#include "../tensor/dtensor.hpp"

namespace tessel {

// A model variable: its Keras path (`dense/kernel`), its logical (global) shape, and on the
// device the block of it this device holds (`value`, a sharded tensor that knows its global
// shape, layout and block) and that block's gradient (a matrix of the same shape, in the same
// layout). The block is stored as (rows, cols): a bias of shape (256,) as 1 x 256.
template <class B>
struct variable {
  std::string path;
  std::vector<std::size_t> shape;
  std::string initializer;
  bool trainable = true;
  basic_dtensor<B> value;
  typename B::matrix gradient;
  // Set by the trainer when the plan's only step for this gradient is an all_reduce that a
  // gradient bucket runs, overlapped with the rest of the backward pass (DDP's reducer): the
  // layer then leaves its partial sum in `gradient` instead of reducing it itself.
  bool reduced_in_bucket = false;
  // The seed its initializer draws with, and whether its values are still to be drawn: a
  // variable added to a store with `defer` holds no storage (`value` has its shape, layout and
  // block only; `gradient` is empty) until draw_values draws the block whole, or the split
  // weights (trainer/sharded_state.hpp) draw this process's part of it alone.
  std::uint64_t seed = 0;
  bool deferred = false;

  // The global number of values.
  std::size_t size() const {
    std::size_t n = 1;
    for (auto e : shape) n *= e;
    return n;
  }
  // The values of this device's block on the host, row-major (the whole variable when it is
  // replicated).
  std::vector<float> numpy() const {
    std::vector<float> out(value.size());
    B::download(value.local(), out);
    return out;
  }
  void assign(std::span<const float> values) {
    if (values.size() != value.size())
      throw value_error("Variable '" + path + "' has " + std::to_string(value.size()) +
                        " values; cannot assign " + std::to_string(values.size()) + ".");
    B::upload(values, value.local());
  }
};

// Where a new variable lives: its layout over the mesh and this device's coordinates (the plan's
// layout for its path; replicated on one device when nothing says otherwise).
struct variable_placement {
  layout_value layout{};  // rank 0: replicated
  mesh_value mesh{};      // rank 0: one device
  std::array<std::size_t, max_mesh_rank> coords{};
};

// Variables live in a deque so that layers may keep pointers to them while more are added. The
// store knows where each new variable is placed (the model sets `place` from its plan), and
// whether its trainable variables are drawn when added or later (`defer`: under split weights,
// where each process keeps a part of each and draws that part alone, FSDP's meta-device
// initialization).
template <class B>
struct variable_store : std::deque<variable<B>> {
  std::function<variable_placement(std::string_view path, std::size_t rank)> place;
  bool defer = false;
};

// Values [first, first + out's size) of this device's block of `v` (row-major), drawn as
// draw_values draws the whole block, into `out` (a row of the backend's memory), a bounded
// number at a time.
template <class B>
void draw_initial_values(const variable<B>& v, std::size_t first, const typename B::matrix& out) {
  const shape_value& global = v.value.global_shape();
  const block& b = v.value.shard();
  const std::size_t count = B::rows(out) * B::cols(out);
  std::vector<float> host(std::min<std::size_t>(count, std::size_t{1} << 16));
  for (std::size_t done = 0; done < count; done += host.size()) {
    const std::size_t n = std::min(host.size(), count - done);
    initializers::fill_block_range(
        v.initializer, random::stream(v.seed, random::hash_name(v.path)),
        std::span<const std::size_t>(global.extents.data(), global.rank),
        std::span<const std::size_t>(b.offset.extents.data(), global.rank),
        std::span<const std::size_t>(b.extent.extents.data(), global.rank), first + done,
        std::span<float>(host.data(), n));
    B::upload(std::span<const float>(host.data(), n), B::alias(out, done, 1, n));
  }
}

// A deferred variable's block allocated and drawn whole, and its gradient allocated where it has
// none: the variable add_variable makes without `defer`.
template <class B>
void draw_values(variable<B>& v) {
  if (!v.deferred) return;
  const std::size_t rows = v.value.block_rows(), cols = v.value.block_cols();
  v.value = v.value.like(B::make_matrix(v.path, rows, cols));
  if (B::rows(v.gradient) * B::cols(v.gradient) == 0)
    v.gradient = B::make_zeros(v.path + "/gradient", rows, cols);
  draw_initial_values(v, 0, B::alias(v.value.local(), 0, 1, rows * cols));
  v.deferred = false;
}

// A variable of global `shape`, holding the block its placement gives this device, initialized
// by drawing exactly that block of the values one device would hold (keyed by the seed, the
// path and each element's global index); under the store's `defer`, a trainable one is drawn
// later (draw_values).
template <class B>
variable<B>& add_variable(variable_store<B>& store, std::string path,
                          std::vector<std::size_t> shape, std::string initializer,
                          std::uint64_t seed, bool trainable = true) {
  shape_value global{};
  global.rank = shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d) global.extents[d] = shape[d];
  variable_placement p = store.place ? store.place(path, shape.size()) : variable_placement{};
  if (p.layout.rank == 0) p.layout = layout_value::replicated(shape.size());
  variable<B>& v = store.emplace_back();
  v.path = std::move(path);
  v.shape = std::move(shape);
  v.initializer = std::move(initializer);
  v.trainable = trainable;
  v.seed = seed;
  v.value = basic_dtensor<B>::unallocated(global, p.layout, p.mesh, p.coords);
  v.deferred = true;
  initializers::require_known(v.initializer);  // (refused when added, drawn now or later)
  if (!store.defer || !trainable) draw_values(v);
  return v;
}

// Where a pass runs: training or inference, the optimizer step (keys dropout), and the model's
// seed. Which rows and columns of the global batch a device holds is its input tensor's block.
struct pass_context {
  bool training = false;
  std::uint64_t step = 0;
  std::uint64_t seed = 0;
};

// The output of a layer that maps each sample on its own (dense, the activations): the rows x
// holds, each of shape `sample`, laid out as x's batch dimension, over `store` (kept at its
// largest size, as `sized`).
template <class B>
basic_dtensor<B> rows_of(const basic_dtensor<B>& x, const shape_value& sample,
                      typename B::matrix& store, const char* label) {
  shape_value global{}, offset{}, extent{};
  global.rank = offset.rank = extent.rank = sample.rank + 1;
  global.extents[0] = x.global_shape()[0];
  offset.extents[0] = x.shard().offset[0];
  extent.extents[0] = x.shard().extent[0];
  for (std::size_t d = 0; d < sample.rank; ++d)
    global.extents[d + 1] = extent.extents[d + 1] = sample[d];
  layout_value layout = layout_value::replicated(global.rank);
  layout.dims[0] = x.layout().dims[0];
  return basic_dtensor<B>(global, layout, block{offset, extent},
                       sized<B>(store, extent.extents[0], sample.elements(), label));
}

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

// Compiled once for the host backend, in tessel::tessel (core/compilation.hpp).
#define TESSEL_LAYER_TEMPLATES(prefix, B)                                                    \
  prefix template variable<B>& add_variable<B>(variable_store<B>&, std::string,            \
                                               std::vector<std::size_t>, std::string,      \
                                               std::uint64_t, bool);                       \
  prefix template void draw_values<B>(variable<B>&);
#if TESSEL_EXTERN_TEMPLATES
TESSEL_LAYER_TEMPLATES(extern, backend::host)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
TESSEL_LAYER_TEMPLATES(extern, backend::cuda)
#endif

}  // namespace tessel
