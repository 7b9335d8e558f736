// Planning rules of the layers without variables: flatten, dropout, the activations (softmax
// reduces over a sharded class dimension). Each is the op_desc's `rule` (core/model_plan.hpp).
#pragma once

#include <string_view>
#include <type_traits>

#include "../../core/activations.hpp"
#include "../../core/compilation.hpp"
#include "../../core/layer_planner.hpp"
#include "../../core/propagation.hpp"

namespace tessel {

namespace layer_rules {

// softmax over a sharded last dimension of an output laid out by `layout`: all_reduce of the
// row max and the row sum forward, and of the row sum of (gradient * output) backward. A softmax
// layer's, and a dense layer's softmax activation (on its product's layout).
constexpr void softmax(layer_planner& p, const layout_value& layout,
                       const shape_value& shape) noexcept {
  const auto r = propagate_softmax(layout);
  if (!r.ok) return p.fail(r.error);
  p.row_reduction(r.reduce_axes, layout, shape, phase::forward, "row max");
  p.row_reduction(r.reduce_axes, layout, shape, phase::forward, "row sum");
  p.row_reduction(r.reduce_axes, layout, shape, phase::backward, "row sum");
}

// An element-wise function: linear ones (identity, scaling) work on partial sums as they are;
// a nonlinear one needs its input complete; softmax reduces over the class dimension.
template <activation_kind A>
constexpr void activation(layer_planner& p, const op_desc&) noexcept {
  if constexpr (A == activation_kind::softmax) softmax(p, p.layout(), p.shape());
  else if constexpr (A != activation_kind::linear)
    p.reshard_forward(step_role::operand, p.layout(), p.layout().without_partial(), p.shape(),
                      p.needs_grad());
}

// Flatten of every dimension after the batch: the input's trailing dimensions may be split only
// as a flattened dimension can be (the outer one), so reshard to that first.
// (When the program runs, flatten_at_run_time's copy, compiled once in tessel::tessel.)
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void flatten_at_run_time(layer_planner& p) noexcept;
}
constexpr void plan_flatten(layer_planner& p) noexcept {
  shape_value& shape = p.shape();
  const std::size_t last = shape.rank - 1;
  const layout_value before = p.layout();
  p.reshard_forward(step_role::operand, p.layout(), flatten_input_requirement(p.layout(), 1, last),
                    shape, p.needs_grad());
  const auto r = propagate_flatten(p.layout(), 1, last);
  if (!r.ok) return p.fail(r.error);
  std::size_t n = 1;
  for (std::size_t d = 1; d <= last; ++d) n *= shape.extents[d];
  p.layout() = r.out;
  shape = shape_value{shape.extents[0], n};
  // Without a reshard the flattened rows are the input's memory.
  bool rows_whole = !before.partial;
  for (std::size_t d = 1; d < before.rank; ++d) rows_whole = rows_whole && before.dims[d].count == 0;
  if (rows_whole) p.output_is_view();
}
constexpr void flatten(layer_planner& p, const op_desc&) noexcept {
  if (std::is_constant_evaluated()) return plan_flatten(p);
  flatten_at_run_time(p);
}

// Dropout's mask is keyed by the global element index: a local, linear op on any layout.
constexpr void dropout(layer_planner&, const op_desc&) noexcept {}

inline constexpr plan_rule flatten_rule{&flatten, "flatten"};
template <activation_kind A>
inline constexpr plan_rule activation_rule{&activation<A>, "activation"};
inline constexpr plan_rule dropout_rule{&dropout, "dropout"};

}  // namespace layer_rules

constexpr op_desc flatten_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::flatten_rule, .name = name_string(name)};
}
template <activation_kind A>
constexpr op_desc activation_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::activation_rule<A>, .name = name_string(name)};
}
constexpr op_desc dropout_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::dropout_rule, .name = name_string(name)};
}

#if TESSEL_PLAN_DEFINITIONS
namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void flatten_at_run_time(layer_planner& p) noexcept { plan_flatten(p); }
}  // namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
