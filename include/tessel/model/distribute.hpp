// distribute_tensor: Keras's `distribution.distribute_tensor(tensor, layout)` (JAX's
// `jax.device_put(x, sharding)`): a global array, the same on every process, laid out over the
// job's processes, each keeping its block.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "../backend/default.hpp"
#include "../comm/dimension.hpp"
#include "../core/errors.hpp"
#include "../core/tensor_layout.hpp"
#include "../data/array.hpp"
#include "../runtime/process_mesh.hpp"
#include "../tensor/dtensor.hpp"

namespace tessel {

// The values of `t`'s block (row-major, as the block is stored) out of its tensor's global
// values: all of them when `t` is replicated.
template <class B>
std::vector<float> block_of(const basic_dtensor<B>& t, std::span<const float> global) {
  if (t.size() == global.size()) return {global.begin(), global.end()};
  const block& b = t.shard();
  const shape_value& g = t.global_shape();
  std::vector<float> out(t.size());
  comm::detail::copy_block<float>(std::span<const std::size_t>(g.extents.data(), g.rank),
                                  std::span<const std::size_t>(b.offset.extents.data(), g.rank),
                                  std::span<const std::size_t>(b.extent.extents.data(), g.rank),
                                  global.data(), out.data(), true);
  return out;
}

// This process's block of `x` under `layout` on the mesh `pm` binds: a sharded tensor of x's
// global shape, in the backend's memory. x's rank must be the layout's, and each dimension must
// divide by the size of the mesh axes it is sharded over (an error names the dimension).
template <class B, class ProcessMesh>
basic_dtensor<B> distribute_tensor(const array<float>& x, const layout_value& layout,
                                   const ProcessMesh& pm) {
  if (x.shape.size() != layout.rank)
    throw value_error("distribute_tensor: the array has rank " + std::to_string(x.shape.size()) +
                      " (shape " + shape_to_string(x.shape) + ") but the layout has rank " +
                      std::to_string(layout.rank) + "; give one mesh axis or None per dimension");
  shape_value global{};
  global.rank = x.shape.size();
  for (std::size_t d = 0; d < global.rank; ++d) global.extents[d] = x.shape[d];
  std::array<std::size_t, max_mesh_rank> coords{};
  for (std::size_t a = 0; a < ProcessMesh::rank; ++a) coords[a] = pm.coordinates()[a];
  basic_dtensor<B> t(global, layout, pm.shape(), coords, "distributed");
  const std::vector<float> local = block_of(t, std::span<const float>(x.values));
  B::upload(std::span<const float>(local), t.local());
  return t;
}

// `distribute_tensor<tensor_layout<Mesh, "data", none>>(x)`: laid over the job's processes
// (every process calls it, with the same x).
template <class Layout, class B = default_backend>
basic_dtensor<B> distribute_tensor(const array<float>& x) {
  using mesh_binding = process_mesh<typename Layout::mesh>;
  return distribute_tensor<B>(x, Layout::value, mesh_binding::bind());
}

}  // namespace tessel
