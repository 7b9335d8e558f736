// Shards: the local shape of a laid-out tensor and the block of the global tensor a device holds.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "compilation.hpp"
#include "diagnostics.hpp"
#include "errors.hpp"
#include "tensor_layout.hpp"

namespace tessel {

// The rows process `c` of `n` takes of a batch of `global` rows, as tf.distribute splits one
// (and the trainer, experimental_distribute_dataset and the checkpoints' batches do): global / n
// each, one more for the first global % n, so that a process may take none; `largest`: the most
// any process takes.
struct row_split {
  std::size_t first = 0, count = 0, largest = 0;
};
constexpr row_split split_batch_rows(std::size_t global, std::size_t n, std::size_t c) noexcept {
  const std::size_t base = global / n, extra = global % n;
  return {c * base + std::min(c, extra), base + (c < extra ? 1 : 0), base + (extra != 0 ? 1 : 0)};
}

// "model" or "data,model": the axes sharding one dimension, for messages.
constexpr name_string axes_label(const mesh_value& m, const dim_sharding& d) noexcept {
  name_string s{};
  std::size_t n = 0;
  for (std::size_t k = 0; k < d.count; ++k) {
    if (k && n < max_name_length) s.data[n++] = ',';
    for (char c : m.names[d.axes[k]].view())
      if (n < max_name_length) s.data[n++] = c;
  }
  return s;
}

namespace detail {

struct divisibility_check {
  bool ok = true;
  std::size_t dim = 0, extent = 0, axes_size = 0;
  name_string axes{};
};

// The first dimension whose static extent does not divide by the static size of its axes.
// Dynamic extents and axes of dynamic size are checked at run time instead.
constexpr divisibility_check check_divisible(const layout_value& l, const mesh_value& m,
                                             const shape_value& s) noexcept {
  for (std::size_t d = 0; d < l.rank; ++d) {
    const std::size_t n = m.size_of(l.dims[d].mask());
    if (shard_size_is_static(l, m, s, d) && s.extents[d] % n != 0) return {false, d, s.extents[d], n, axes_label(m, l.dims[d])};
  }
  return {};
}

}  // namespace detail

// Run-time check of a layout against a concrete mesh and shape, with a message that names the
// dimension, its size, the axes and their size.
TESSEL_INLINE void check_layout(const layout_value& l, const mesh_value& m, const shape_value& s);

namespace detail {
// Not constexpr: reaching it in a constant expression makes the compiler stop there, naming it.
inline void layout_does_not_fit_the_tensor_shape() {}
}  // namespace detail

// The shape of the shard each device holds. Dynamic extents stay dynamic.
constexpr shape_value local_shape(const layout_value& l, const mesh_value& m,
                                  const shape_value& s) {
  if (std::is_constant_evaluated()) {
    if (l.rank != s.rank || !detail::check_divisible(l, m, s).ok)
      detail::layout_does_not_fit_the_tensor_shape();
  } else {
    check_layout(l, m, s);
  }
  shape_value r = s;
  for (std::size_t d = 0; d < l.rank; ++d)
    if (r.extents[d] != dynamic_extent) r.extents[d] /= m.size_of(l.dims[d].mask());
  return r;
}

// The block of the global tensor held by the device at mesh coordinates `coords`: along each
// dimension the shards are ordered by the dimension's axes, major to minor (row-major).
struct block {
  shape_value offset;
  shape_value extent;
};

constexpr block shard_block(const layout_value& l, const mesh_value& m, const shape_value& s,
                            const std::array<std::size_t, max_mesh_rank>& coords) {
  block b{s, local_shape(l, m, s)};
  for (std::size_t d = 0; d < l.rank; ++d) {
    std::size_t index = 0;
    for (std::size_t k = 0; k < l.dims[d].count; ++k) {
      const auto a = l.dims[d].axes[k];
      index = index * m.sizes[a] + coords[a];
    }
    b.offset.extents[d] = index * b.extent.extents[d];
  }
  return b;
}

// Static checks of a tensor_layout against a tensor shape: rank, and that each static dimension
// divides by its axes; the diagnostic names the dimension, its extent and the axes.
template <class Layout, class Shape>
struct laid_out {
  static_assert(detail::is_tensor_layout<Layout>, "tessel::laid_out: expects a tensor_layout");
  static_assert(require<Layout::rank == Shape::rank,
                        diagnostic::layout_rank_mismatch<Layout::rank, Shape::rank>>);

 private:
  static constexpr auto check_ =
      detail::check_divisible(Layout::value, Layout::mesh::value, Shape::value);
  static_assert(require<check_.ok, diagnostic::dimension_not_divisible<check_.dim, check_.extent,
                                                                       check_.axes,
                                                                       check_.axes_size>>);

 public:
  using layout = Layout;
  using shape = Shape;
  // Dimensions whose size or axes are only known at run time are dynamic_extent here.
  static constexpr shape_value local_shape = [] {
    shape_value r = Shape::value;
    const auto& l = Layout::value;
    const auto& m = Layout::mesh::value;
    for (std::size_t d = 0; d < r.rank; ++d)
      r.extents[d] = detail::shard_size_is_static(l, m, Shape::value, d)
                         ? r.extents[d] / m.size_of(l.dims[d].mask())
                         : dynamic_extent;
    return r;
  }();
};

template <class Layout, class Shape>
inline constexpr shape_value local_shape_v = laid_out<Layout, Shape>::local_shape;

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE void check_layout(const layout_value& l, const mesh_value& m, const shape_value& s) {
  if (l.rank != s.rank)
    throw value_error("tessel: a layout of rank " + std::to_string(l.rank) +
                      " cannot lay out a tensor of rank " + std::to_string(s.rank) + " " +
                      to_string(s) + "; give one entry (an axis name or none) per dimension");
  for (std::size_t d = 0; d < l.rank; ++d) {
    const std::size_t n = m.size_of(l.dims[d].mask());
    if (s.extents[d] != dynamic_extent && s.extents[d] % n != 0)
      throw value_error("tessel: dimension " + std::to_string(d) + " of size " +
                        std::to_string(s.extents[d]) + " is sharded over mesh axis '" +
                        std::string(axes_label(m, l.dims[d]).view()) + "' of size " +
                        std::to_string(n) + ", which does not divide it; use a size divisible by " +
                        std::to_string(n) + " or replicate the dimension (none)");
  }
}
#endif

}  // namespace tessel
