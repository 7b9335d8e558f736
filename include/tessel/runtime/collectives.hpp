// Collectives over one mesh axis, the axis a template argument: `comm::all_reduce<"batch">(pm,
// grads)` sums `grads` over the processes along axis "batch" of the process_mesh `pm`. An axis
// the mesh does not have is a compile error naming it. `run_step` executes one step of a plan
// (planner.hpp's reshard_step, as `explain` prints it) on the communicator of the step's axis;
// it takes any bound_mesh (a process_mesh is one), so it is compiled once per communicator, not
// once per mesh. They live in runtime/, above comm/: they take the process_mesh, which binds a
// mesh to the job's processes, and comm/ (the communicator) sits below the runtime.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/diagnostics.hpp"
#include "../core/planner.hpp"
#include "../comm/communicator.hpp"
#include "../comm/dimension.hpp"
#include "process_mesh.hpp"

namespace tessel::comm {

namespace detail {
template <fixed_string Axis, class Mesh>
constexpr std::size_t axis_index() {
  static_assert(require<(Mesh::template index_of<Axis> >= 0),
                        diagnostic::axis_not_in_mesh<Axis, Mesh>>);
  return static_cast<std::size_t>(Mesh::template index_of<Axis>);
}
}  // namespace detail

// ---- blocking -------------------------------------------------------------------------------
template <fixed_string Axis, class Mesh, class C, class T>
void all_reduce(const process_mesh<Mesh, C>& pm, std::span<T> data) {
  pm.template axis<detail::axis_index<Axis, Mesh>()>().all_reduce(data);
}
template <fixed_string Axis, class Mesh, class C, class T>
void all_gather(const process_mesh<Mesh, C>& pm, std::span<const T> in, std::span<T> out) {
  pm.template axis<detail::axis_index<Axis, Mesh>()>().all_gather(in, out);
}
template <fixed_string Axis, class Mesh, class C, class T>
void reduce_scatter(const process_mesh<Mesh, C>& pm, std::span<const T> in, std::span<T> out) {
  pm.template axis<detail::axis_index<Axis, Mesh>()>().reduce_scatter(in, out);
}
template <fixed_string Axis, class Mesh, class C, class T>
void broadcast(const process_mesh<Mesh, C>& pm, std::span<T> data, int root = 0) {
  pm.template axis<detail::axis_index<Axis, Mesh>()>().broadcast(data, root);
}
template <fixed_string Axis, class Mesh, class C, class T>
void all_to_all(const process_mesh<Mesh, C>& pm, std::span<const T> in, std::span<T> out) {
  pm.template axis<detail::axis_index<Axis, Mesh>()>().all_to_all(in, out);
}

// ---- non-blocking ---------------------------------------------------------------------------
template <fixed_string Axis, class Mesh, class C, class T>
[[nodiscard]] auto iall_reduce(const process_mesh<Mesh, C>& pm, std::span<T> data) {
  return pm.template axis<detail::axis_index<Axis, Mesh>()>().iall_reduce(data);
}
template <fixed_string Axis, class Mesh, class C, class T>
[[nodiscard]] auto iall_gather(const process_mesh<Mesh, C>& pm, std::span<const T> in,
                                  std::span<T> out) {
  return pm.template axis<detail::axis_index<Axis, Mesh>()>().iall_gather(in, out);
}
template <fixed_string Axis, class Mesh, class C, class T>
[[nodiscard]] auto ireduce_scatter(const process_mesh<Mesh, C>& pm, std::span<const T> in,
                                      std::span<T> out) {
  return pm.template axis<detail::axis_index<Axis, Mesh>()>().ireduce_scatter(in, out);
}
template <fixed_string Axis, class Mesh, class C, class T>
[[nodiscard]] auto ibroadcast(const process_mesh<Mesh, C>& pm, std::span<T> data, int root = 0) {
  return pm.template axis<detail::axis_index<Axis, Mesh>()>().ibroadcast(data, root);
}
template <fixed_string Axis, class Mesh, class C, class T>
[[nodiscard]] auto iall_to_all(const process_mesh<Mesh, C>& pm, std::span<const T> in,
                                  std::span<T> out) {
  return pm.template axis<detail::axis_index<Axis, Mesh>()>().iall_to_all(in, out);
}

// ---- a planned step -------------------------------------------------------------------------
namespace detail {
inline void check_axis(std::size_t axes, std::size_t axis, const char* what) {
  if (axis >= axes)
    throw value_error("tessel: " + std::string(what) + " mesh axis " + std::to_string(axis) +
                      " of a mesh with " + std::to_string(axes) + " axes");
}
// Step `s` on an axis: non-blocking (returns the request) or blocking (returns a done request).
// MPI's blocking collectives are used when nothing is to overlap: Open MPI's non-blocking
// all-reduce costs up to twice its blocking one over shared memory.
template <class C, class T>
typename C::request on_axis(const C& c, const reshard_step& s, std::span<const T> in,
                            std::span<T> out, bool blocking) {
  const auto n = static_cast<std::size_t>(c.size());
  auto require_sizes = [&](bool ok, const char* rule) {
    if (!ok)
      throw value_error("tessel: " + std::string(name_of(s.kind)) + " over " + std::to_string(n) +
                        " processes needs " + rule + "; got input " + std::to_string(in.size()) +
                        " and output " + std::to_string(out.size()) + " elements");
  };
  switch (s.kind) {
    case collective::all_reduce:
      require_sizes(in.size() == out.size(), "input and output of one size");
      if (in.data() != out.data()) c.copy(in, out);
      if (blocking) return c.all_reduce(out), typename C::request{};
      return c.iall_reduce(out);
    case collective::all_gather:
      if (blocking) return c.all_gather(in, out), typename C::request{};
      return c.iall_gather(in, out);
    case collective::reduce_scatter:
      if (blocking) return c.reduce_scatter(in, out), typename C::request{};
      return c.ireduce_scatter(in, out);
    case collective::all_to_all:
      if (blocking) return c.all_to_all(in, out), typename C::request{};
      return c.iall_to_all(in, out);
    case collective::reduce:
    case collective::broadcast: {
      require_sizes(in.size() == out.size(), "input and output of one size");
      if (in.data() != out.data()) c.copy(in, out);
      const int root = s.root;
      if (s.kind == collective::reduce)
        return blocking ? (c.reduce(out, root), typename C::request{}) : c.ireduce(out, root);
      return blocking ? (c.broadcast(out, root), typename C::request{}) : c.ibroadcast(out, root);
    }
    case collective::slice: {
      require_sizes(in.size() == out.size() * n, "an input of (processes x output) elements");
      const std::size_t block = out.size();
      c.copy(in.subspan(block * static_cast<std::size_t>(c.rank()), block), out);
      return {};
    }
  }
  return {};
}

template <class C, class T>
typename C::request dispatch_step(const bound_mesh<C>& pm, const reshard_step& s,
                                  std::span<const T> in, std::span<T> out, bool blocking) {
  if (s.kind != collective::all_reduce && s.kind != collective::reduce &&
      s.kind != collective::broadcast && (s.dim != 0 || s.to_dim != 0))
    throw value_error("tessel: " + std::string(name_of(s.kind)) + " on tensor dimension " +
                      std::to_string(s.kind == collective::all_to_all ? s.to_dim : s.dim) +
                      " needs the tensor's shape to pack it: call run_step(pm, step, "
                      "local_shape, in, out, scratch)");
  check_axis(pm.axis_count(), s.axis, "a planned step names");
  return on_axis(pm.axis(s.axis), s, in, out, blocking);
}
}  // namespace detail

// Starts step `s` of a plan on this process's buffers and returns its request. The buffers hold
// the tensor row-major; gathers, scatters, slices and all-to-alls move whole blocks of the
// leading dimension (dimension 0; the batch), which is where data parallelism shards. Steps on
// other dimensions need packing: the run_step below, which knows the tensor's shape.
template <class C, class T>
[[nodiscard]] typename C::request start_step(const bound_mesh<C>& pm, const reshard_step& s,
                                             std::span<const T> in, std::span<T> out) {
  return detail::dispatch_step(pm, s, in, out, false);
}
// The same step, blocking (MPI's blocking collective).
template <class C, class T>
void run_step(const bound_mesh<C>& pm, const reshard_step& s, std::span<const T> in,
              std::span<T> out) {
  detail::dispatch_step(pm, s, in, out, true);
}

// Step `s` on a tensor whose block on this process, the step's input, has shape `local`: a
// gather, scatter, slice or all-to-all on any dimension, packed where the dimension is not the
// leading one (comm/dimension.hpp); `scratch` holds the packed data between calls. Blocking.
template <class C, class T>
void run_step(const bound_mesh<C>& pm, const reshard_step& s,
              std::span<const std::size_t> local, std::span<const T> in, std::span<T> out,
              std::vector<T>& scratch) {
  detail::check_axis(pm.axis_count(), s.axis, "a planned step names");
  auto run = [&](const C& c) {
    const auto n = static_cast<std::size_t>(c.size());
    switch (s.kind) {
      case collective::all_reduce:
        detail::check_size("all_reduce", "output", out.size(), in.size(), local);
        if (in.data() != out.data()) c.copy(in, out);
        return c.all_reduce(out);
      case collective::reduce:
      case collective::broadcast:  // whole buffers, as the steps without a shape run them
        detail::check_size(std::string(name_of(s.kind)).c_str(), "output", out.size(), in.size(),
                           local);
        return (void)detail::on_axis(c, s, in, out, true);
      case collective::all_gather:
        return all_gather_dim(c, local, s.dim, in, out, scratch);
      case collective::reduce_scatter:
      case collective::slice: {
        detail::check_dim(std::string(name_of(s.kind)).c_str(), local, s.dim);
        if (local[s.dim] % n != 0)
          throw value_error("tessel: " + std::string(name_of(s.kind)) + " of dimension " +
                            std::to_string(s.dim) + " of a tensor of shape " +
                            detail::shape_text(local) + " over " + std::to_string(n) +
                            " processes: the dimension does not divide");
        std::vector<std::size_t> part(local.begin(), local.end()), offset(local.size(), 0);
        part[s.dim] /= n;
        if (s.kind == collective::reduce_scatter)
          return reduce_scatter_dim(c, std::span<const std::size_t>(part), s.dim, in, out, scratch);
        detail::check_size("slice", "input", in.size(), detail::elements(local), local);
        detail::check_size("slice", "output", out.size(), detail::elements(part), part);
        offset[s.dim] = static_cast<std::size_t>(c.rank()) * part[s.dim];
        return detail::copy_block<T>(local, offset, part, in.data(), out.data(), true);
      }
      case collective::all_to_all:
        return all_to_all_dim(c, local, s.dim, s.to_dim, in, out, scratch);
    }
  };
  run(pm.axis(s.axis));
}

// The all_reduce of `data` over the mesh axis numbered `axis` (known at run time), a sum or a
// maximum: the per-row reductions of a class dimension split across devices. Blocking.
template <class C, class T>
void all_reduce_over(const bound_mesh<C>& pm, std::size_t axis, std::span<T> data, reduce_op op) {
  detail::check_axis(pm.axis_count(), axis, "all_reduce over");
  pm.axis(axis).all_reduce(data, op);
}

}  // namespace tessel::comm
