// dtensor: a rank-N tensor sharded over a device mesh, as DTensor's local tensor + placements and
// CuTe's Tensor<Engine, Layout> pair storage with a layout. Its layout is its type; its global
// shape is a value (the batch is sized at run time); it holds the block of the global tensor this
// device owns (shard_block), row-major, in the backend's memory.
//
// The backend stores 2-D matrices, so the local block is kept as (extent[0], product of the
// rest): the leading dimension stays the rows (the batch) and any view of another shape is an
// alias of the same memory (`view(rows, cols)`: NHWC as (N·H·W, C) for a per-pixel product).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "../backend/interface.hpp"
#include "../core/errors.hpp"
#include "../core/shard.hpp"
#include "../core/tensor_layout.hpp"

namespace tessel {

// A sharded tensor whose layout is a run-time value (DTensor's local tensor + placements): what
// a model's variables and activations are, their layouts coming from the plan.
template <backend::backend_memory B>
class basic_dtensor {
 public:
  using matrix = typename B::matrix;

  basic_dtensor() = default;
  // The block of a tensor of shape `global` under `layout` that the device at mesh coordinates
  // `coords` (of the mesh `m`, sized) holds, allocated and zeroed. A layout that does not fit
  // the shape (a dimension that does not divide by its axes) is a value_error naming the
  // dimension.
  basic_dtensor(const shape_value& global, const layout_value& layout, const mesh_value& m,
                const std::array<std::size_t, max_mesh_rank>& coords,
                const std::string& label = "dtensor")
      : global_(checked(global, layout)),
        layout_(layout),
        block_(shard_block(layout, m, global, coords)) {
    local_ = B::make_zeros(label, rows(), inner());
  }
  // A tensor whose block is given: an uneven split of a batch (tf.distribute's, where the first
  // `batch % n` devices hold one row more) that shard_block's equal blocks cannot describe.
  basic_dtensor(const shape_value& global, const layout_value& layout, const block& b,
                const std::string& label = "dtensor")
      : global_(global), layout_(layout), block_(b) {
    local_ = B::make_zeros(label, rows(), inner());
  }
  // A tensor over existing storage (rows, inner) of the block, allocating nothing: a layer's
  // output in its reused buffer, a batch's rows where they already are.
  basic_dtensor(const shape_value& global, const layout_value& layout, const block& b,
                const matrix& storage)
      : global_(global), layout_(layout), block_(b), local_(storage) {}
  // The block the device at `coords` holds, as the first constructor gives it, holding no storage
  // (`like` gives it some): a variable whose values are drawn later, in parts (layers/layer.hpp,
  // variable_store::defer).
  [[nodiscard]] static basic_dtensor unallocated(
      const shape_value& global, const layout_value& layout, const mesh_value& m,
      const std::array<std::size_t, max_mesh_rank>& coords) {
    return basic_dtensor(checked(global, layout), layout, shard_block(layout, m, global, coords),
                         matrix());
  }
  // The (rows, cols) the block is stored as, whether or not it holds storage.
  [[nodiscard]] std::size_t block_rows() const noexcept { return rows(); }
  [[nodiscard]] std::size_t block_cols() const noexcept { return inner(); }
  // The same tensor (shape, layout, block) over other storage of the block's size: a view of a
  // buffer that holds several tensors (the gradient buckets), or a zeroed copy for optimizer
  // state that lives on the same shards as its variable.
  [[nodiscard]] basic_dtensor like(const matrix& storage) const {
    basic_dtensor t = *this;
    t.local_ = storage;
    return t;
  }

  // The same block under another name for its layout: a partial sum that a planned step with no
  // collective declares complete, or a block whose layout changes without moving.
  [[nodiscard]] basic_dtensor relabel(const layout_value& l) const {
    basic_dtensor t = *this;
    t.layout_ = l;
    return t;
  }
  // The (rows, cols) storage of a block of a tensor of shape `global`: (extent[0], product of
  // the rest); a rank-1 tensor as one row.
  static std::pair<std::size_t, std::size_t> storage_shape(const shape_value& global,
                                                           const block& b) {
    if (global.rank == 1) return {1, b.extent[0]};
    std::size_t n = 1;
    for (std::size_t d = 1; d < global.rank; ++d) n *= b.extent[d];
    return {b.extent[0], n};
  }
  [[nodiscard]] const shape_value& global_shape() const noexcept { return global_; }
  [[nodiscard]] const layout_value& layout() const noexcept { return layout_; }
  [[nodiscard]] const shape_value& local_shape() const noexcept { return block_.extent; }
  // Where this device's block starts in the global tensor, and its extent.
  [[nodiscard]] const block& shard() const noexcept { return block_; }
  [[nodiscard]] std::size_t size() const noexcept {
    return global_.rank == 0 ? 0 : rows() * inner();
  }
  // The block, (extent[0], product of the other extents), row-major; a rank-1 tensor is one
  // row of its extent.
  [[nodiscard]] const matrix& local() const noexcept { return local_; }
  // The same memory as (rows, cols), rows * cols == size().
  [[nodiscard]] matrix view(std::size_t rows, std::size_t cols) const {
    if (rows * cols != size())
      throw value_error("tessel::dtensor: a view of " + std::to_string(rows) + " x " +
                        std::to_string(cols) + " of a block of " + std::to_string(size()) +
                        " elements, shape " + to_string(block_.extent));
    return B::alias(local_, 0, rows, cols);
  }

 private:
  // The rank here; whether each dimension divides by its axes, in shard_block (check_layout),
  // which names the dimension and the axis.
  static const shape_value& checked(const shape_value& global, const layout_value& layout) {
    if (global.rank != layout.rank)
      throw value_error("tessel::dtensor: a layout of rank " + std::to_string(layout.rank) +
                        " cannot lay out a tensor of shape " + to_string(global));
    return global;
  }
  // A rank-1 block is stored as one row: (1, extent).
  std::size_t inner() const noexcept {
    if (global_.rank == 1) return block_.extent[0];
    std::size_t n = 1;
    for (std::size_t d = 1; d < global_.rank; ++d) n *= block_.extent[d];
    return n;
  }
  std::size_t rows() const noexcept { return global_.rank == 1 ? 1 : block_.extent[0]; }

  shape_value global_{};
  layout_value layout_{};
  block block_{};
  matrix local_{};
};

// Buffers keep their largest size; a smaller batch (the last of an epoch) uses their first rows.
template <class B>
typename B::matrix sized(typename B::matrix& store, std::size_t rows, std::size_t cols,
                         const char* label) {
  if (store.data() == nullptr || B::rows(store) < rows || B::cols(store) != cols)
    store = B::make_matrix(label, rows, cols);
  return B::row_range(store, 0, rows);
}

// A tensor of x's shape, layout and block over `store` (kept at its largest size, as `sized`):
// the output of an op that maps x element by element.
template <class B>
basic_dtensor<B> sized_like(const basic_dtensor<B>& x, typename B::matrix& store,
                            const char* label) {
  return x.like(sized<B>(store, B::rows(x.local()), B::cols(x.local()), label));
}

// A block of rows [first_row, first_row + rows) of a batch of `global_rows` samples (at least
// first_row + rows), every feature whole, over the matrix `m` (rows x features): how a layer is
// called alone, and how a batch's rows enter a model on one device.
template <class B>
basic_dtensor<B> batch_block(const typename B::matrix& m, std::size_t first_row = 0,
                             std::size_t global_rows = 0) {
  const std::size_t rows = B::rows(m), cols = B::cols(m);
  const block b{shape_value{first_row, 0}, shape_value{rows, cols}};
  return basic_dtensor<B>(shape_value{std::max(global_rows, first_row + rows), cols},
                          layout_value::replicated(2), b, m);
}


}  // namespace tessel
