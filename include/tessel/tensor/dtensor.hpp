// dtensor: a rank-N tensor sharded over a device mesh, as DTensor's local tensor + placements and
// CuTe's Tensor<Engine, Layout> pair storage with a layout. Its layout is its type; its global
// shape is a value (the batch is sized at run time); it holds the block of the global tensor this
// device owns (shard_block), row-major, in the backend's memory.
//
// The backend stores 2-D matrices, so the local block is kept as (extent[0], product of the
// rest): the leading dimension stays the rows (the batch) and any view of another shape is an
// alias of the same memory (`view(rows, cols)`: NHWC as (N·H·W, C) for a per-pixel product).
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>

#include "../backend/interface.hpp"
#include "../core/errors.hpp"
#include "../core/shard.hpp"
#include "../core/tensor_layout.hpp"

namespace tessel {

template <class Layout, backend::backend_memory B>
class dtensor {
  static_assert(detail::is_tensor_layout<Layout>,
                "tessel::dtensor: the first argument must be a tensor_layout<Mesh, ...>");

 public:
  using layout = Layout;
  using mesh = typename Layout::mesh;
  using matrix = typename B::matrix;
  static constexpr std::size_t rank = Layout::rank;

  // The block of a tensor of shape `global` that the device at mesh coordinates `coords` (of
  // the mesh `m`, sized) holds, allocated and zeroed. A layout that does not fit the shape (a
  // dimension that does not divide by its axes) is a value_error naming the dimension.
  dtensor(const shape_value& global, const mesh_value& m,
          const std::array<std::size_t, max_mesh_rank>& coords, const std::string& label = "dtensor")
      : global_(global), block_(shard_block(Layout::value, m, checked(global), coords)) {
    local_ = B::make_zeros(label, block_.extent[0], inner());
  }

  [[nodiscard]] const shape_value& global_shape() const noexcept { return global_; }
  [[nodiscard]] const shape_value& local_shape() const noexcept { return block_.extent; }
  // Where this device's block starts in the global tensor, and its extent.
  [[nodiscard]] const block& shard() const noexcept { return block_; }
  [[nodiscard]] std::size_t size() const noexcept { return block_.extent[0] * inner(); }
  // The block, (extent[0], product of the other extents), row-major.
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
  static const shape_value& checked(const shape_value& global) {
    if (global.rank != rank)
      throw value_error("tessel::dtensor: a layout of rank " + std::to_string(rank) +
                        " cannot lay out a tensor of shape " + to_string(global));
    return global;
  }
  std::size_t inner() const noexcept {
    std::size_t n = 1;
    for (std::size_t d = 1; d < rank; ++d) n *= block_.extent[d];
    return n;
  }

  shape_value global_;
  block block_;
  matrix local_;
};

}  // namespace tessel
