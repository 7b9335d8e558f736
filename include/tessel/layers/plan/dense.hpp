// Planning rule of dense (Keras's Dense): y = x @ kernel + bias under the kernel's and bias's
// layouts. It chooses, by the bytes each moves, between resharding the input to the kernel
// (column-parallel and data-parallel layers) and slicing the kernel to the input (row-parallel:
// partial output, then reduced), and records the layouts it computes with: the planner derives
// every collective of its forward and backward from them.
#pragma once

#include <optional>
#include <string_view>
#include <type_traits>

#include "../../core/compilation.hpp"
#include "../../core/layer_planner.hpp"
#include "../../core/activations.hpp"
#include "../../core/propagation.hpp"
#include "elementwise.hpp"

namespace tessel {

namespace layer_rules {

// Removes from `l`'s dimensions any axis in `mask` (a batch axis the weight needs).
constexpr layout_value drop_axes(layout_value l, std::uint32_t mask) noexcept {
  for (std::size_t d = 0; d < l.rank; ++d) {
    dim_sharding kept{};
    for (std::size_t k = 0; k < l.dims[d].count; ++k)
      if (!(mask & (1u << l.dims[d].axes[k]))) kept.push(l.dims[d].axes[k]);
    l.dims[d] = kept;
  }
  return l;
}

constexpr layout_value swap2(layout_value l) noexcept {
  const auto t = l.dims[0];
  l.dims[0] = l.dims[1];
  l.dims[1] = t;
  return l;
}

struct dense_choice {
  bool ok = false;
  layout_value x, w, y, out;  // input as used, weight as used, raw product, complete output
  std::size_t cost = 0;
};

// The bytes one choice of the input's and kernel's layouts moves in a training step.
constexpr dense_choice evaluate_dense(const layer_planner& p, const layout_value& x,
                                      const layout_value& xu, const layout_value& wu,
                                      const layout_value& w,
                                      const std::optional<layout_value>& forced,
                                      const shape_value& xs, const shape_value& ws,
                                      const shape_value& ys, bool needs_grad) noexcept {
  dense_choice c;
  const auto y = propagate_matmul(xu, wu);
  if (!y.ok) return c;
  // The complete output: the layout_map's "<name>/output" if given, else the product's layout
  // without its partial axes.
  c = {true, xu, wu, y.out, forced ? *forced : y.out.without_partial(), 0};
  const auto& m = p.mesh();
  const std::size_t es = p.element_size();
  auto cost = [&](const reshard_plan& r) {
    const auto b = r.wire_bytes();
    if (!r.ok) c.ok = false;
    c.cost += b == unknown_bytes ? 0 : b;
  };
  cost(plan_reshard(x, xu, m, xs, es));
  cost(plan_reshard(y.out, c.out, m, ys, es));
  // backward: the weight gradient reduced over the batch axes and returned to w's layout
  const auto dw = propagate_matmul(swap2(xu), c.out.without_partial());
  if (dw.ok) cost(plan_reshard(dw.out, wu, m, ws, es));
  cost(plan_reshard(wu, w, m, ws, es));
  if (needs_grad) {
    const auto dx = propagate_matmul(y.out.without_partial(), swap2(wu));
    if (dx.ok) cost(plan_reshard(dx.out, xu, m, xs, es));
  }
  return c;
}

// Dense's parameters, as its rule reads them: one rule per set (layers::dense makes it from its
// own arguments; dense_op<{.units = 64, .activation = activation_kind::relu}>("d1") spells one
// for a model described by hand).
struct dense_params {
  std::size_t units = 0;
  bool use_bias = true;
  activation_kind activation = activation_kind::linear;
};

// The rule, written once for every set of parameters (dense<P> below passes its own).
constexpr void plan_dense(layer_planner& p, const op_desc& op,
                          const dense_params& params) noexcept {
  const std::size_t units = params.units;
  const bool use_bias = params.use_bias;
  layout_value& layout = p.layout();
  shape_value& shape = p.shape();
  const bool needs_grad = p.needs_grad();
  if (shape.rank != 2) return p.fail("dense takes a 2-D input; flatten it first");
  const shape_value ws{shape.extents[1], units};
  const shape_value ys{shape.extents[0], units};
  const layout_value w = p.add_variable(op.name, "kernel", ws, true, variable_use::weight);
  if (use_bias) p.add_variable(op.name, "bias", shape_value{units}, true, variable_use::bias);
  if (!p.ok()) return;
  const key_string out_path = make_path(op.name, "output");
  const std::optional<layout_value> forced = p.find_layout(out_path);
  if (!p.ok()) return;
  if (forced && !p.check_divides(*forced, ys, out_path)) return;
  p.output_applied();

  // (a) reshard the input to the kernel: its contracting dimension sharded like the kernel's,
  //     its batch free of the axes the kernel uses.
  layout_value xa = drop_axes(layout, w.sharded_axes());
  xa.dims[1] = w.dims[0];
  xa.partial = 0;
  dense_choice best = evaluate_dense(p, layout, xa, w, w, forced, shape, ws, ys, needs_grad);
  // (b) keep the input, slice the kernel locally to match it (free), reduce the output.
  if (w.dims[0].is_prefix_of(layout.dims[1]) && !layout.partial) {
    layout_value wb = w;
    wb.dims[0] = layout.dims[1];
    bool free = !(layout.dims[1].mask() & ~w.dims[0].mask() & w.sharded_axes());
    if (free && !(wb.dims[0].mask() & wb.dims[1].mask())) {
      const dense_choice alt =
          evaluate_dense(p, layout, layout, wb, w, forced, shape, ws, ys, needs_grad);
      if (alt.ok && (!best.ok || alt.cost < best.cost)) best = alt;
    }
  }
  if (!best.ok) return p.fail("no layout of the input fits the kernel's layout");

  layout_value want_b = layout_value::replicated(1);
  want_b.dims[0] = best.out.dims[1];
  const layout_value g = best.y.without_partial();
  const auto dw = propagate_matmul(swap2(best.x), g);
  if (!dw.ok) return p.fail(dw.error);
  const auto db = propagate_reduce(g, 0);
  op_layouts used{};
  used.operands[0] = best.x;
  used.variables[0] = best.w;
  used.variables[1] = want_b;
  used.result = best.y;
  used.output = best.out;
  // The kernel's gradient goes back through the kernel as used; the bias's directly.
  used.variable_gradients[0] = dw.out;
  used.variable_gradients[1] = db.out;
  used.gradients_through_variables = 1u;
  if (needs_grad) {
    const auto dx = propagate_matmul(g, swap2(best.w));
    if (!dx.ok) return p.fail(dx.error);
    used.operand_gradients[0] = dx.out;
  }
  // The planner derives every reshard around the product from these layouts.
  p.record_layouts(used, ys);
  if (!p.ok()) return;
  // A softmax activation over classes split across devices: its row reductions forward, and
  // backward its row sum first (the activation's gradient comes before the product's).
  if (params.activation == activation_kind::softmax) softmax(p, best.out, ys);
  layout = best.out;
  shape = ys;
  p.needs_grad() = true;
}

// plan_dense when the program runs: compiled once in tessel::tessel (inline with headers only).
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_dense_at_run_time(layer_planner& p, const op_desc& op,
                                                const dense_params& params) noexcept;
}

template <dense_params P>
constexpr void dense(layer_planner& p, const op_desc& op) noexcept {
  static_assert(P.units > 0, "dense: units must be positive");
  if (std::is_constant_evaluated()) return plan_dense(p, op, P);
  plan_dense_at_run_time(p, op, P);
}

template <dense_params P>
inline constexpr plan_rule dense_rule{&dense<P>, "dense", true};

}  // namespace layer_rules

template <layer_rules::dense_params P>
constexpr op_desc dense_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::dense_rule<P>, .name = name_string(name)};
}

#if TESSEL_PLAN_DEFINITIONS
namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_dense_at_run_time(layer_planner& p, const op_desc& op,
                                                const dense_params& params) noexcept {
  plan_dense(p, op, params);
}
}  // namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
