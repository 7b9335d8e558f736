// visualize_sharding: which device holds which block of a 1-D or 2-D tensor, drawn as a text grid
// with the device numbers in each block, as jax.debug.visualize_array_sharding draws it. Devices
// are numbered row-major over the mesh coordinates (the process numbers of a bound mesh).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "compilation.hpp"
#include "device_mesh.hpp"
#include "errors.hpp"
#include "shape.hpp"
#include "shard.hpp"
#include "tensor_layout.hpp"

namespace tessel {

// The grid for a tensor of `shape` laid out by `layout` on `mesh` (sized): one cell per block,
// labelled "<kind> d, e, ..." with the devices that hold it (replicas share a cell).
TESSEL_INLINE std::string visualize_sharding(const shape_value& shape, const layout_value& layout,
                                             const mesh_value& mesh, std::string_view kind = "CPU");

// The grid of a variable (or any value with a sharded `value`): its global shape and layout.
template <class V>
  requires requires(const V& v) {
    v.value.global_shape();
    v.value.layout();
  }
std::string visualize_sharding(const V& v, const mesh_value& mesh, std::string_view kind = "CPU") {
  return visualize_sharding(v.value.global_shape(), v.value.layout(), mesh, kind);
}

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE std::string visualize_sharding(const shape_value& shape, const layout_value& layout,
                                             const mesh_value& mesh, std::string_view kind) {
  if (shape.rank < 1 || shape.rank > 2 || layout.rank != shape.rank)
    throw value_error("visualize_sharding draws 1-D and 2-D tensors; got shape " +
                      to_string(shape) + " with a layout of rank " + std::to_string(layout.rank) +
                      ". Draw a 2-D view of the tensor instead");
  const layout_value whole = layout.without_partial();
  const std::size_t rows = shape.rank == 2 ? mesh.size_of(whole.dims[0].mask()) : 1;
  const std::size_t cols = mesh.size_of(whole.dims[shape.rank - 1].mask());
  std::vector<std::vector<std::size_t>> holders(rows * cols);
  std::size_t devices = 1;
  for (std::size_t a = 0; a < mesh.rank; ++a) devices *= mesh.sizes[a];
  for (std::size_t d = 0; d < devices; ++d) {
    std::array<std::size_t, max_mesh_rank> coords{};
    for (std::size_t a = mesh.rank, rest = d; a-- > 0; rest /= mesh.sizes[a])
      coords[a] = rest % mesh.sizes[a];
    const block b = shard_block(whole, mesh, shape, coords);
    const std::size_t last = shape.rank - 1;
    const std::size_t r = shape.rank == 2 ? b.offset[0] / b.extent[0] : 0;
    const std::size_t c = b.offset[last] / b.extent[last];
    holders[r * cols + c].push_back(d);
  }
  std::vector<std::string> labels;
  std::size_t width = 0;
  for (const auto& h : holders) {
    std::string s(kind);
    for (std::size_t k = 0; k < h.size(); ++k) s += (k ? "," : " ") + std::to_string(h[k]);
    width = std::max(width, s.size());
    labels.push_back(std::move(s));
  }
  width += 2;  // a space each side
  auto line = [&](std::string_view left, std::string_view mid, std::string_view right) {
    std::string s(left);
    for (std::size_t c = 0; c < cols; ++c) {
      for (std::size_t k = 0; k < width; ++k) s += "─";
      s += c + 1 < cols ? mid : right;
    }
    return s + "\n";
  };
  auto blank = [&] {
    std::string s = "│";
    for (std::size_t c = 0; c < cols; ++c) s += std::string(width, ' ') + "│";
    return s + "\n";
  };
  std::string out = line("┌", "┬", "┐");
  for (std::size_t r = 0; r < rows; ++r) {
    out += blank();
    out += "│";
    for (std::size_t c = 0; c < cols; ++c) {
      const std::string& l = labels[r * cols + c];
      const std::size_t left = (width - l.size()) / 2;
      out += std::string(left, ' ') + l + std::string(width - l.size() - left, ' ') + "│";
    }
    out += "\n" + blank();
    out += r + 1 < rows ? line("├", "┼", "┤") : line("└", "┴", "┘");
  }
  return out;
}
#endif

}  // namespace tessel
