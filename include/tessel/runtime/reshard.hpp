// Executing a resharding: a tensor's block moved from one layout to another over the mesh, step by
// step as plan_reshard lists them (core/planner.hpp), the local slices included (the plan's
// printed steps leave them out: they move no data). This is what a model-parallel layer runs for
// each of its planned steps, and what get_weights runs to gather a sharded variable. Every
// collective it runs is recorded in a collective_log, so a test can hold the run against the plan
// (PyTorch's CommDebugMode counts the same way).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "../core/errors.hpp"
#include "../core/planner.hpp"
#include "../core/shard.hpp"
#include "../tensor/dtensor.hpp"
#include "collectives.hpp"
#include "process_mesh.hpp"

namespace tessel {

// One collective as it ran: its kind, mesh axis, tensor dimension(s) and the bytes of its input
// buffer on this process (what the plan's step lists as `bytes`).
struct collective_record {
  collective kind{};
  std::uint8_t axis = 0, dim = 0, to_dim = 0;
  std::size_t bytes = 0;
  constexpr bool operator==(const collective_record&) const = default;
};
// The record the plan's step `s` predicts.
constexpr collective_record record_of(const reshard_step& s) noexcept {
  return {s.kind, s.axis, s.dim, s.to_dim, s.bytes};
}

// The collectives run since the last clear(): in order (the first max_records of them, so that a
// long training run does not grow the log), and counted by kind and mesh axis with their bytes.
struct collective_log {
  static constexpr std::size_t max_records = std::size_t{1} << 16;
  struct total {
    collective kind{};
    std::uint8_t axis = 0;
    std::size_t count = 0, bytes = 0;
  };
  std::vector<collective_record> records;
  std::vector<total> totals;
  std::size_t dropped = 0;  // records beyond max_records, counted in totals only

  void add(const collective_record& r) {
    if (records.size() < max_records) records.push_back(r);
    else ++dropped;
    for (auto& t : totals)
      if (t.kind == r.kind && t.axis == r.axis) {
        ++t.count;
        t.bytes += r.bytes;
        return;
      }
    totals.push_back({r.kind, r.axis, 1, r.bytes});
  }
  void clear() {
    records.clear();
    totals.clear();
    dropped = 0;
  }
  // The collectives of one kind (over one axis; -1: any).
  [[nodiscard]] std::size_t count(collective kind, int axis = -1) const {
    std::size_t n = 0;
    for (const auto& t : totals) n += t.kind == kind && (axis < 0 || t.axis == axis) ? t.count : 0;
    return n;
  }
  [[nodiscard]] std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& t : totals) n += t.bytes;
    return n;
  }
};

// The local shape after step `s` on a block of shape `local`, over an axis of `n` processes.
constexpr shape_value after_step(shape_value local, const reshard_step& s, std::size_t n) noexcept {
  switch (s.kind) {
    case collective::all_reduce:
    case collective::reduce:
    case collective::broadcast: break;
    case collective::all_gather: local.extents[s.dim] *= n; break;
    case collective::slice:
    case collective::reduce_scatter: local.extents[s.dim] /= n; break;
    case collective::all_to_all:
      local.extents[s.dim] *= n;
      local.extents[s.to_dim] /= n;
      break;
  }
  return local;
}

// Runs every step of `plan` (a resharding of a tensor whose block on this process has shape
// `local` and is `in`, row-major) and leaves the new block in `out`; returns its shape. `scratch`
// holds data between steps. Collectives are recorded in `log` when one is given. Blocking.
template <class C, class T>
shape_value run_reshard(const bound_mesh<C>& pm, const reshard_plan& plan,
                        shape_value local, std::span<const T> in, std::vector<T>& out,
                        std::vector<T>& scratch, collective_log* log = nullptr) {
  if (!plan.ok)
    throw value_error("tessel: no resharding plan from " + to_string(plan.from, pm.shape()) +
                      " to " + to_string(plan.to, pm.shape()));
  // The first step reads `in` itself; each later one the block the step before left.
  std::vector<T> current;
  std::span<const T> source = in;
  for (const reshard_step& s : plan) {
    const std::size_t n = pm.shape().sizes[s.axis];
    const shape_value next = after_step(local, s, n);
    std::size_t elements = 1;
    for (std::size_t d = 0; d < next.rank; ++d) elements *= next.extents[d];
    out.assign(elements, T{});
    comm::run_step(pm, s, std::span<const std::size_t>(local.extents.data(), local.rank), source,
                   std::span<T>(out), scratch);
    if (log != nullptr && s.kind != collective::slice)
      log->add({s.kind, s.axis, s.dim, s.to_dim, source.size() * sizeof(T)});
    current.swap(out);
    source = current;
    local = next;
  }
  if (plan.empty()) out.assign(in.begin(), in.end());
  else out.swap(current);
  return local;
}

}  // namespace tessel

namespace tessel {

// Reshards sharded tensors (basic_dtensor) of backend B over a bound mesh: what a model-parallel
// layer calls for each planned step. Each result lives in a buffer the caller keeps (resized only
// when it grows) and every collective is logged.
template <class B, class C>
class tensor_resharder {
 public:
  using matrix = typename B::matrix;
  using tensor = basic_dtensor<B>;

  explicit tensor_resharder(const bound_mesh<C>& pm) : pm_(&pm), mesh_(pm.shape()) {
    for (std::size_t a = 0; a < pm.axis_count(); ++a) coords_[a] = pm.coordinate(a);
  }

  // A tensor of shape `global` laid out by `layout` (partial or not): this device's block over
  // `store`, its values left to the caller.
  tensor make(const shape_value& global, const layout_value& layout, matrix& store,
              const char* label) const {
    const block b = shard_block(layout.without_partial(), mesh_, global, coords_);
    const auto [rows, cols] = tensor::storage_shape(global, b);
    return tensor(global, layout, b, sized<B>(store, rows, cols, label));
  }
  // `t` laid out by `to`: the steps of plan_reshard, slices included, into `store`. Without a
  // step, `t` itself under its new name for the layout (a partial sum stays where it is).
  tensor operator()(const tensor& t, const layout_value& to, matrix& store, const char* label) {
    const reshard_plan plan = plan_reshard(t.layout(), to, mesh_, t.global_shape());
    if (!plan.ok)
      throw value_error("tessel: no resharding plan from " + to_string(t.layout(), mesh_) +
                        " to " + to_string(to, mesh_) + " for a tensor of shape " +
                        to_string(t.global_shape()));
    if (plan.empty()) return t.relabel(to);
    host_in_.resize(t.size());
    B::download(t.local(), std::span<float>(host_in_));
    run_reshard(*pm_, plan, t.local_shape(), std::span<const float>(host_in_), host_out_,
                scratch_, &log_);
    tensor r = make(t.global_shape(), to, store, label);
    B::upload(std::span<const float>(host_out_), r.local());
    return r;
  }
  // `t`'s global values, row-major, on the host of every process, in `out`: operator()'s gather
  // to the replicated layout without the copy back into the backend's memory (saving writes the
  // values from `out`).
  void gather_to_host(const tensor& t, std::vector<float>& out) {
    const layout_value to = layout_value::replicated(t.global_shape().rank);
    const reshard_plan plan = plan_reshard(t.layout(), to, mesh_, t.global_shape());
    if (!plan.ok)
      throw value_error("tessel: no resharding plan from " + to_string(t.layout(), mesh_) +
                        " to " + to_string(to, mesh_) + " for a tensor of shape " +
                        to_string(t.global_shape()));
    if (plan.empty()) {
      out.resize(t.size());
      B::download(t.local(), std::span<float>(out));
      return;
    }
    host_in_.resize(t.size());
    B::download(t.local(), std::span<float>(host_in_));
    run_reshard(*pm_, plan, t.local_shape(), std::span<const float>(host_in_), out, scratch_,
                &log_);
  }
  // All-reduces per-row values (`rows`: one or two columns per row of a block) over the mesh axes
  // in `axes`, the axes a row's elements are split over: one all_reduce per axis of more than
  // one device, in the mesh's order, as the plan's row reductions list them.
  void reduce_rows(const matrix& rows, std::uint32_t axes, comm::reduce_op op) {
    if (!moves(axes)) return;
    host_in_.resize(B::rows(rows) * B::cols(rows));
    B::download(rows, std::span<float>(host_in_));
    reduce_rows(std::span<float>(host_in_), axes, op);
    B::upload(std::span<const float>(host_in_), rows);
  }
  template <class T>
  void reduce_rows(std::span<T> values, std::uint32_t axes, comm::reduce_op op) {
    for (std::size_t a = 0; a < mesh_.rank; ++a) {
      if (!((axes >> a) & 1u) || mesh_.sizes[a] == 1) continue;
      comm::all_reduce_over(*pm_, a, values, op);
      log_.add({collective::all_reduce, static_cast<std::uint8_t>(a), 0, 0,
                values.size() * sizeof(T)});
    }
  }
  // Whether any axis in `axes` has more than one device (a reduction over them moves data).
  bool moves(std::uint32_t axes) const noexcept {
    for (std::size_t a = 0; a < mesh_.rank; ++a)
      if (((axes >> a) & 1u) && mesh_.sizes[a] > 1) return true;
    return false;
  }
  const std::array<std::size_t, max_mesh_rank>& coordinates() const noexcept { return coords_; }
  const mesh_value& mesh() const noexcept { return mesh_; }
  const collective_log& log() const noexcept { return log_; }
  collective_log& log() noexcept { return log_; }
  void clear_log() { log_.clear(); }

 private:
  const bound_mesh<C>* pm_;
  mesh_value mesh_;
  std::array<std::size_t, max_mesh_rank> coords_{};
  std::vector<float> host_in_, host_out_, scratch_;
  collective_log log_;
};

}  // namespace tessel
