// memory_plan: the bytes one device holds to train a model, computed from its plan (every
// variable's and activation's layout and local shape) when the program compiles or when it runs:
// the weights, their gradients, the optimizer's slots, the activations kept for backward with
// the gradient buffers of the backward pass, and the buffers of the resharding steps. Every
// buffer tessel allocates for a training step lives through the whole step (each layer keeps its
// stores from one step to the next), so the peak is their sum.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>

#include "diagnostics.hpp"
#include "layer_planner.hpp"
#include "model_plan.hpp"

namespace tessel {

struct memory_plan {
  // Bytes per device.
  std::size_t weights = 0;               // every variable's block (trainable or not)
  std::size_t gradients = 0;             // the trainable variables' gradients (the bucket buffer)
  std::size_t optimizer_state = 0;       // the optimizer's slots (all, or this device's part)
  std::size_t activations = 0;           // every layer's output kept for backward, and the input
  std::size_t activation_gradients = 0;  // backward's buffers: each input gradient, the loss's
  std::size_t communication = 0;         // the resharding steps' output buffers
  [[nodiscard]] constexpr std::size_t peak() const noexcept {
    return weights + gradients + optimizer_state + activations + activation_gradients +
           communication;
  }
  // The largest of the parts, by name ("optimizer state"), and its bytes.
  [[nodiscard]] constexpr std::string_view largest() const noexcept {
    constexpr std::array<std::string_view, 6> names{"weights",
                                                    "gradients",
                                                    "optimizer state",
                                                    "activations",
                                                    "activation gradients",
                                                    "communication buffers"};
    return names[largest_index()];
  }
  [[nodiscard]] constexpr std::size_t largest_bytes() const noexcept {
    return parts()[largest_index()];
  }

 private:
  [[nodiscard]] constexpr std::array<std::size_t, 6> parts() const noexcept {
    return {weights, gradients, optimizer_state, activations, activation_gradients, communication};
  }
  [[nodiscard]] constexpr std::size_t largest_index() const noexcept {
    const std::array<std::size_t, 6> v = parts();
    std::size_t best = 0;
    for (std::size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return best;
  }
};

namespace detail {
constexpr std::size_t elements(const shape_value& s) noexcept {
  std::size_t n = 1;
  for (std::size_t d = 0; d < s.rank; ++d) n *= s.extents[d];
  return n;
}
// The elements of one device's block of a tensor of `shape` under `layout` on `mesh`.
constexpr std::size_t local_elements(const shape_value& shape, const layout_value& layout,
                                     const mesh_value& mesh) noexcept {
  std::size_t n = 1;
  for (std::size_t d = 0; d < shape.rank; ++d) {
    const std::size_t parts = d < layout.rank ? mesh.size_of(layout.dims[d].mask()) : 1;
    n *= (shape.extents[d] + parts - 1) / parts;
  }
  return n;
}
}  // namespace detail

// How gradients are reduced: the bucket size, and whether communication overlaps computation.
// With `overlap` (the default), a bucket's collective starts as soon as its last gradient is
// computed, while backward goes on; under a split state (shard_state::gradients and weights)
// the whole gradients and weights then take turns in a window of two consecutive layers, one
// being computed while the other's reduce-scatter or the next layer's gather runs. Without it,
// the collectives start after the backward pass, or under a split state when backward needs
// their place, and the windows hold one layer at a time: less memory, no communication hidden
// behind computation (DeepSpeed's overlap_comm, FSDP's prefetching off).
struct gradient_options {
  double bucket_cap_mb = 25.0;  // MB of 10^6 bytes, as DDP's bucket_cap_mb
  bool overlap = true;
  // The cap in gradient values (4 bytes each).
  [[nodiscard]] constexpr std::size_t cap_elements() const noexcept {
    return static_cast<std::size_t>(bucket_cap_mb * 1e6 / 4);
  }
};

// A gradient reduce-scattered in the buckets: the layer whose backward computes it, and its
// values padded to a multiple of the processes.
struct bucketed_gradient {
  std::size_t op = 0, size = 0;
};

// The window reduce-scattered gradients take turns in (gradient_buckets), for gradients `g[0 ..
// n)` in the order backward completes them, in buckets of `cap` values: consecutive gradients
// share a bucket until the next would take it past `cap` (a bucket holds one at least).
// A bucket is placed after the one before it, or at the window's start when it does not fit,
// but never over a bucket with gradients of its own first layer or of the layer before (which
// backward is still filling, or whose reduction runs while backward computes this layer); where
// neither place is free, above every bucket placed, and the window grows. The window starts as
// the largest span of buckets over two consecutive layers. `window` is 0 when the window and
// this process's parts of the sums (1/`parts` of every gradient) would not take less than all
// the buckets: the buckets are then one buffer, reduced in place; unless `always` (the split
// weights, shard_state::weights, whose whole values exist only in such a window).
struct gradient_window_layout {
  std::size_t window = 0, buckets = 0;
  std::array<std::size_t, max_variables> at{}, size{};  // each bucket's place and values
};
// With `adjacent` false a bucket is kept apart from its own first layer's buckets only, and the
// window starts as the largest span of one layer's buckets (the split weights' smaller window,
// and both windows without gradient_options::overlap, which hold one layer at a time). With
// `per_layer` a bucket holds one layer's gradients at most (shard_state::weights, whose
// weights are gathered a bucket at a time: FSDP's unit of one layer), however small.
constexpr gradient_window_layout gradient_window(const bucketed_gradient* g, std::size_t n,
                                                 std::size_t cap, std::size_t parts,
                                                 bool always = false, bool adjacent = true,
                                                 bool per_layer = false) noexcept {
  gradient_window_layout w{};
  if (n == 0 || parts <= 1 || n > max_variables) return w;
  // Each bucket's values and its first and last layer (a layer: a run of gradients of one op).
  std::array<std::size_t, max_variables> first_layer{}, last_layer{};
  std::size_t total = 0, layer = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && g[i].op != g[i - 1].op) ++layer;
    const std::size_t b = w.buckets;
    if (i == 0 || (w.size[b - 1] > 0 && w.size[b - 1] + g[i].size > cap) ||
        (per_layer && g[i].op != g[i - 1].op)) {
      first_layer[b] = layer;
      ++w.buckets;
    }
    w.size[w.buckets - 1] += g[i].size;
    last_layer[w.buckets - 1] = layer;
    total += g[i].size;
  }
  for (std::size_t b = 0; b < w.buckets; ++b) {
    std::size_t held = 0;
    for (std::size_t j = 0; j < w.buckets; ++j)
      if (last_layer[j] + (adjacent ? 1 : 0) >= first_layer[b] && first_layer[j] <= first_layer[b])
        held += w.size[j];
    w.window = std::max(w.window, held);
  }
  std::size_t top = 0;
  for (std::size_t b = 0; b < w.buckets; ++b) {
    auto free_at = [&](std::size_t at) {
      if (at + w.size[b] > w.window) return false;
      for (std::size_t j = 0; j < b; ++j)
        if (last_layer[j] + (adjacent ? 1 : 0) >= first_layer[b] && w.at[j] < at + w.size[b] &&
            at < w.at[j] + w.size[j])
          return false;
      return true;
    };
    const std::size_t after = b == 0 ? 0 : w.at[b - 1] + w.size[b - 1];
    w.at[b] = free_at(after) ? after : free_at(0) ? 0 : top;
    top = std::max(top, w.at[b] + w.size[b]);
    w.window = std::max(w.window, top);
  }
  if (!always && total / parts + w.window >= total) w.window = 0;
  return w;
}

// The window the split weights take turns in (shard_state::weights): the gradients' layout, two
// consecutive layers' buckets (one layer's at most each), so that the next layer's gathers
// start while a layer runs; or, where that window and the parts would take no less than the
// whole weights, or without `overlap`, a window of one layer's buckets, smaller, in which a
// layer's gathers wait for the layer before to end.
constexpr gradient_window_layout weights_window(const bucketed_gradient* g, std::size_t n,
                                                std::size_t cap, std::size_t parts,
                                                bool overlap = true) noexcept {
  const gradient_window_layout two = gradient_window(g, n, cap, parts, true, true, true);
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += g[i].size;
  if (parts <= 1 || (overlap && total / parts + two.window < total)) return two;
  const gradient_window_layout one = gradient_window(g, n, cap, parts, true, false, true);
  return one.window < two.window ? one : two;
}

// The memory of a training step planned as `p` (plan_model of a global batch) under `d`, with an
// optimizer of `slots` slots per trainable variable (SGD 0, or 1 with momentum; Adam 2; RMSprop 1
// to 3), elements of `element_size` bytes and the gradients reduced as `o` says (its buckets'
// size, and whether the windows of a split state hold two layers or one).
constexpr memory_plan plan_memory(const model_plan& p, const distribution_value& d,
                                  std::size_t slots, std::size_t element_size = 4,
                                  gradient_options o = {}) noexcept {
  memory_plan m{};
  const std::size_t bucket_elements = o.cap_elements();
  const std::size_t es = element_size;
  // Every trainable variable's gradient (under model_parallel, its shard's) is reduced over the
  // batch axis in the buckets, each padded to a multiple of the processes when the state is split
  // (shard_state).
  const bool split = d.splits_state() && p.mesh.sizes[d.batch_axis] > 1;
  const std::size_t n = split ? p.mesh.sizes[d.batch_axis] : 1;
  auto padded = [&](const variable_plan& v) {
    const std::size_t local = detail::elements(v.local);
    return split ? (local + n - 1) / n * n : local;
  };
  for (std::size_t i = 0; i < p.variable_count; ++i) {
    const variable_plan& v = p.variables[i];
    m.weights += (v.trainable ? padded(v) : detail::elements(v.local)) * es;
    if (!v.trainable) continue;
    // (Under shard_state::optimizer the reduce-scattered parts lie in the gradient buffer
    // itself, MPI_IN_PLACE.)
    m.gradients += padded(v) * es;
    m.optimizer_state += slots * padded(v) / n * es;
  }
  // Reduce-scattered gradients (shard_state::gradients): this process's parts of the sums, and
  // the window the buckets take turns in, where the two take less than all the buckets
  // (gradient_window). The gradients are those the buckets take, in the order backward
  // completes them.
  // Split weights (shard_state::weights): this process's parts of the trainable variables, and
  // the same window, in which each layer's weights are all-gathered before it runs.
  if (split && d.shard >= shard_state::gradients) {
    std::array<bucketed_gradient, max_variables> g{};
    std::size_t count = 0, trainable = 0;
    for (const planned_step& s : p)
      if (s.when == phase::backward && is_gradient_of_variable(s.role) &&
          s.step.kind == collective::reduce_scatter && count < max_variables)
        g[count++] = {s.op, padded(p.variables[s.index])};
    // (Under shard_state::weights a bucket holds one layer at most.)
    const gradient_window_layout w = gradient_window(g.data(), count, bucket_elements, n, false,
                                                     o.overlap, d.shard == shard_state::weights);
    if (w.window > 0) m.gradients = (m.gradients / es / n + w.window) * es;
    if (d.shard == shard_state::weights) {
      for (std::size_t i = 0; i < count; ++i) trainable += g[i].size;
      const gradient_window_layout all =
          weights_window(g.data(), count, bucket_elements, n, o.overlap);
      m.weights = m.weights - trainable * es + (trainable / n + all.window) * es;
    }
  }
  for (std::size_t a = 0; a < p.activation_count; ++a) {
    const activation_plan& act = p.activations[a];
    if (!act.view) m.activations += detail::local_elements(act.shape, act.layout, p.mesh) * es;
  }
  // Backward: the loss's gradient (the output's shape), and the gradient of each layer's input
  // that backward computes (a node after a layer with variables to train), unless it is a
  // view (flatten passes its gradient on as it is).
  if (p.activation_count > 0) {
    const activation_plan& out = p.activations[p.activation_count - 1];
    m.activation_gradients += detail::local_elements(out.shape, out.layout, p.mesh) * es;
  }
  for (std::size_t a = 1; a + 1 < p.activation_count; ++a) {
    const activation_plan& act = p.activations[a];
    if (act.needs_grad && !act.view)
      m.activation_gradients += detail::local_elements(act.shape, act.layout, p.mesh) * es;
  }
  // The resharding steps' outputs (model parallelism): the layouts an op computes with.
  for (const planned_step& s : p) {
    if (s.step.bytes == unknown_bytes) continue;
    if (s.role == step_role::variable_gradient || s.role == step_role::loss ||
        s.role == step_role::statistic || s.runner == step_runner::after_update ||
        s.runner == step_runner::split_weights)
      continue;
    switch (s.step.kind) {
      case collective::all_gather:
        m.communication += s.step.bytes * p.mesh.sizes[s.step.axis];
        break;
      case collective::reduce_scatter:
        m.communication += s.step.bytes / p.mesh.sizes[s.step.axis];
        break;
      default:
        m.communication += s.step.bytes;
    }
  }
  return m;
}

// The memory plan when the program compiles (a static mesh): of a model described as `Model`
// (model_desc) under `Dist` for a global batch, with `Slots` optimizer slots per variable and
// the gradients reduced as `Options` says (memory_plan_v<D, M, 256, 2, {.overlap = false}>).
template <class Dist, model_desc Model, std::size_t GlobalBatch, std::size_t Slots,
          gradient_options Options = gradient_options{}>
inline constexpr memory_plan memory_plan_v =
    plan_memory(model_plan_v<Dist, Model, GlobalBatch>, Dist::value, Slots, 4, Options);

namespace detail {
template <class Dist, model_desc Model, std::size_t GlobalBatch, std::size_t Slots,
          std::size_t Budget>
struct memory_check {
  static constexpr memory_plan plan = memory_plan_v<Dist, Model, GlobalBatch, Slots>;
  static constexpr key_string largest_{plan.largest()};
  static constexpr std::size_t largest_bytes_ = plan.largest_bytes();
  static constexpr bool value = require<
      plan.peak() <= Budget,
      diagnostic::model_exceeds_device_memory<largest_, largest_bytes_, plan.peak(), Budget>>;
};
}  // namespace detail

// Whether the model fits `Budget` bytes per device; a static_assert of it that fails is a
// compile error naming the plan's largest part and its bytes:
//   static_assert(tessel::fits_in_memory<Dist, Model, 256, 2, 2ull << 30>);
template <class Dist, model_desc Model, std::size_t GlobalBatch, std::size_t Slots,
          std::size_t Budget>
inline constexpr bool fits_in_memory =
    detail::memory_check<Dist, Model, GlobalBatch, Slots, Budget>::value;

// The same for a model type (a sequential or functional model: its distribution and its
// description), with an optimizer's hyperparameters (optimizers::adam{}, ...).
template <class M, std::size_t GlobalBatch, auto Optimizer>
inline constexpr memory_plan memory_plan_of =
    memory_plan_v<typename M::distribution, M::describe(), GlobalBatch, Optimizer.slots()>;
template <class M, std::size_t GlobalBatch, auto Optimizer, std::size_t Budget>
inline constexpr bool model_fits_in_memory =
    fits_in_memory<typename M::distribution, M::describe(), GlobalBatch, Optimizer.slots(), Budget>;

}  // namespace tessel
