// The resharding planner: the collectives that turn a (layout, partial axes) into another layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "compilation.hpp"
#include "shape.hpp"
#include "tensor_layout.hpp"

namespace tessel {

// reduce and broadcast run between one root process of the axis and the others: the reduction
// to one device and the variables' copy out of central storage (tf.distribute's
// ReductionToOneDevice, CentralStorageStrategy).
enum class collective : std::uint8_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_to_all,
  slice,
  reduce,
  broadcast
};

constexpr std::string_view name_of(collective c) noexcept {
  switch (c) {
    case collective::all_reduce: return "all_reduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::all_gather: return "all_gather";
    case collective::all_to_all: return "all_to_all";
    case collective::slice: return "slice";
    case collective::reduce: return "reduce";
    case collective::broadcast: return "broadcast";
  }
  return "?";
}

// Bytes are unknown when a size involved is only known at run time.
inline constexpr std::size_t unknown_bytes = dynamic_extent;

struct reshard_step {
  collective kind{};
  std::uint8_t axis = 0;    // the mesh axis the step runs over
  std::uint8_t dim = 0;     // the tensor dimension gathered, scattered or sliced (all_to_all: from)
  std::uint8_t to_dim = 0;  // all_to_all: the dimension that becomes sharded
  std::size_t bytes = 0;       // local bytes of the step's input buffer
  std::size_t wire_bytes = 0;  // bytes each device sends (ring algorithms, as nccl-tests count)
  std::uint8_t root = 0;       // reduce, broadcast: the root's coordinate on the axis
  constexpr bool operator==(const reshard_step&) const = default;
};

// The backward of a step, for a cotangent that is partial over the step's axis wherever the
// forward value was replicated over it: all_gather <-> reduce_scatter, slice <-> all_gather,
// all_to_all(a, i, j) <-> all_to_all(a, j, i). The transpose of all_reduce (partial ->
// replicated) is the identity: every summand's gradient is the replicated gradient, so
// `has_transpose` is false for it.
// reduce and broadcast are never a resharding's steps: they have none.
constexpr bool has_transpose(const reshard_step& s) noexcept {
  return s.kind != collective::all_reduce && s.kind != collective::reduce &&
         s.kind != collective::broadcast;
}
constexpr reshard_step transpose(const reshard_step& s) noexcept {
  reshard_step t = s;
  switch (s.kind) {
    case collective::all_gather: t.kind = collective::reduce_scatter; break;
    case collective::reduce_scatter: t.kind = collective::all_gather; break;
    case collective::slice: t.kind = collective::all_gather; break;
    case collective::all_to_all: t.dim = s.to_dim; t.to_dim = s.dim; break;
    case collective::all_reduce:
    case collective::reduce:
    case collective::broadcast: break;
  }
  t.bytes = t.wire_bytes = 0;  // sizes change with direction; the planner recomputes them
  return t;
}

inline constexpr std::size_t max_reshard_steps = 16;

struct reshard_plan {
  bool ok = true;
  layout_value from{}, to{};
  std::array<reshard_step, max_reshard_steps> steps{};
  std::size_t count = 0;

  [[nodiscard]] constexpr const reshard_step* begin() const noexcept { return steps.data(); }
  [[nodiscard]] constexpr const reshard_step* end() const noexcept { return steps.data() + count; }
  [[nodiscard]] constexpr const reshard_step& operator[](std::size_t i) const noexcept {
    return steps[i];
  }
  [[nodiscard]] constexpr std::size_t size() const noexcept { return count; }
  [[nodiscard]] constexpr bool empty() const noexcept { return count == 0; }
  [[nodiscard]] constexpr std::size_t count_of(collective c) const noexcept {
    std::size_t n = 0;
    for (const auto& s : *this) n += s.kind == c;
    return n;
  }
  // Bytes each device sends; unknown_bytes if any step's size is unknown.
  [[nodiscard]] constexpr std::size_t wire_bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& s : *this) {
      if (s.wire_bytes == unknown_bytes) return unknown_bytes;
      n += s.wire_bytes;
    }
    return n;
  }
  // Collectives that move data (slices are free).
  [[nodiscard]] constexpr std::size_t communications() const noexcept {
    return count - count_of(collective::slice);
  }
};

namespace detail {

constexpr std::size_t local_bytes(const layout_value& l, const mesh_value& m, const shape_value& s,
                                  std::size_t element_size) noexcept {
  std::size_t n = element_size;
  for (std::size_t d = 0; d < l.rank; ++d) {
    if (!shard_size_is_static(l, m, s, d)) return unknown_bytes;
    n *= s.extents[d] / m.size_of(l.dims[d].mask());
  }
  return n;
}

constexpr std::size_t wire_bytes(collective c, std::size_t bytes, std::size_t n) noexcept {
  if (bytes == unknown_bytes || n == dynamic_extent) return unknown_bytes;
  switch (c) {
    case collective::all_reduce: return 2 * bytes * (n - 1) / n;
    case collective::reduce_scatter: return bytes * (n - 1) / n;
    case collective::all_gather: return bytes * (n - 1);
    case collective::all_to_all: return bytes * (n - 1) / n;
    case collective::slice: return 0;
    // The root's tree or pipeline: each device sends the buffer about once.
    case collective::reduce:
    case collective::broadcast: return bytes;
  }
  return 0;
}

}  // namespace detail

// Plans the steps from `from` (which may be partial) to `to`. Order keeps buffers small: free
// slices first, then reductions of partial axes (reduce_scatter where the target shards that
// axis, else all_reduce), then all_to_all moves, then all_gathers (minor axis first). Axes of
// size 1 change the layout but move nothing, so they produce no step.
//
// When the program compiles, the plan is computed here; when it runs (a mesh or batch sized at
// run time), by plan_reshard_at_run_time, compiled once in tessel::tessel (inline with headers
// only), so that a translation unit does not emit the planner's code again.
TESSEL_INLINE reshard_plan plan_reshard_at_run_time(const layout_value& from,
                                                    const layout_value& to, const mesh_value& mesh,
                                                    const shape_value& global,
                                                    std::size_t element_size) noexcept;
namespace detail {
constexpr reshard_plan plan_reshard(const layout_value& from, const layout_value& to,
                                    const mesh_value& mesh, const shape_value& global,
                                    std::size_t element_size) noexcept {
  reshard_plan p;
  p.from = from;
  p.to = to;
  if (from.rank != to.rank || from.rank != global.rank || (to.partial & ~from.partial)) {
    p.ok = false;  // a replicated value never becomes partial, and ranks must agree
    return p;
  }
  layout_value cur = from;
  auto emit = [&](collective c, std::size_t axis, std::size_t dim, std::size_t to_dim) {
    const std::size_t n = mesh.sizes[axis];
    if (n == 1) return;
    const std::size_t b = detail::local_bytes(cur, mesh, global, element_size);
    if (p.count == max_reshard_steps) {
      p.ok = false;
      return;
    }
    p.steps[p.count++] = {c, static_cast<std::uint8_t>(axis), static_cast<std::uint8_t>(dim),
                          static_cast<std::uint8_t>(to_dim), b, detail::wire_bytes(c, b, n)};
  };
  auto next_axis_of = [&](std::size_t d) -> int {  // the next axis `to` adds to dim d, or -1
    if (!cur.dims[d].is_prefix_of(to.dims[d]) || cur.dims[d].count == to.dims[d].count) return -1;
    return to.dims[d].axes[cur.dims[d].count];
  };
  for (int guard = 0; guard < 64 && !(cur == to); ++guard) {
    bool progressed = false;
    // 1. slices: replicated -> sharded, free.
    for (std::size_t d = 0; d < cur.rank && !progressed; ++d) {
      const int a = next_axis_of(d);
      if (a >= 0 && !(cur.used_axes() & (1u << a))) {
        emit(collective::slice, a, d, d);
        cur.dims[d].push(static_cast<std::uint8_t>(a));
        progressed = true;
      }
    }
    if (progressed) continue;
    // 2. partial axes the target does not keep partial.
    const std::uint32_t reduce = cur.partial & ~to.partial;
    for (std::size_t a = 0; a < mesh.rank && !progressed; ++a) {
      if (!(reduce & (1u << a))) continue;
      const int d = to.dim_of(a);
      if (d >= 0 && next_axis_of(d) == static_cast<int>(a)) {
        emit(collective::reduce_scatter, a, d, d);
        cur.dims[d].push(static_cast<std::uint8_t>(a));
      } else {
        emit(collective::all_reduce, a, 0, 0);
      }
      cur.partial &= ~(1u << a);
      progressed = true;
    }
    if (progressed) continue;
    // 3. all_to_all: the minor axis of a dimension moves to the dimension the target gives it.
    for (std::size_t i = 0; i < cur.rank && !progressed; ++i) {
      if (cur.dims[i].is_prefix_of(to.dims[i])) continue;
      const std::uint8_t a = cur.dims[i].axes[cur.dims[i].count - 1];
      const int j = to.dim_of(a);
      if (j >= 0 && j != static_cast<int>(i) && next_axis_of(j) == a) {
        emit(collective::all_to_all, a, i, j);
        cur.dims[i].pop();
        cur.dims[j].push(a);
        progressed = true;
      }
    }
    if (progressed) continue;
    // 4. all_gather: drop the minor axis of a dimension the target shards differently.
    for (std::size_t i = 0; i < cur.rank && !progressed; ++i) {
      if (cur.dims[i].is_prefix_of(to.dims[i])) continue;
      emit(collective::all_gather, cur.dims[i].axes[cur.dims[i].count - 1], i, i);
      cur.dims[i].pop();
      progressed = true;
    }
    if (!progressed) break;
  }
  p.ok = p.ok && cur == to;
  return p;
}
}  // namespace detail

constexpr reshard_plan plan_reshard(const layout_value& from, const layout_value& to,
                                    const mesh_value& mesh, const shape_value& global,
                                    std::size_t element_size = 4) noexcept {
  if (std::is_constant_evaluated())
    return detail::plan_reshard(from, to, mesh, global, element_size);
  return plan_reshard_at_run_time(from, to, mesh, global, element_size);
}

// The backward of a reshard from `from` to `to`: the cotangent arrives in `grad` (the layout of
// `to`, possibly partial) and must reach `from`'s layout without its partial axes (the gradient
// of every summand is the full gradient).
constexpr reshard_plan plan_reshard_backward(const layout_value& from, const layout_value& grad,
                                             const mesh_value& mesh, const shape_value& global,
                                             std::size_t element_size = 4) noexcept {
  return plan_reshard(grad, from.without_partial(), mesh, global, element_size);
}

// "all_gather(model, dim 1)" as the explain output prints it ("reduce('batch', to 0)",
// "broadcast('batch', from 0)").
TESSEL_INLINE std::string to_string(const reshard_step& s, const mesh_value& m);

#if TESSEL_DEFINITIONS
TESSEL_INLINE reshard_plan plan_reshard_at_run_time(const layout_value& from,
                                                    const layout_value& to, const mesh_value& mesh,
                                                    const shape_value& global,
                                                    std::size_t element_size) noexcept {
  return detail::plan_reshard(from, to, mesh, global, element_size);
}

TESSEL_INLINE std::string to_string(const reshard_step& s, const mesh_value& m) {
  std::string r(name_of(s.kind));
  r += "('" + std::string(m.names[s.axis].view()) + "'";
  switch (s.kind) {
    case collective::all_reduce: break;
    case collective::reduce: r += ", to " + std::to_string(s.root); break;
    case collective::broadcast: r += ", from " + std::to_string(s.root); break;
    case collective::all_to_all:
      r += ", dim " + std::to_string(s.dim) + " -> " + std::to_string(s.to_dim);
      break;
    default: r += ", dim " + std::to_string(s.dim); break;
  }
  return r + ")";
}

#endif

}  // namespace tessel
