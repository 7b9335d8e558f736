// Planning rule of batch_normalization (Keras's BatchNormalization on the last axis): each
// channel's statistics are over every other dimension of the batch, so the rule computes with
// the batch dimension as it comes and the rest whole, and lists the all-reduces over the batch
// axes that make them the global batch's (synchronized batch normalization): in training, the
// per-channel sums for the mean and for the variance forward, and, where the input's gradient is
// needed, the sums of dy and dy x-hat backward. gamma and beta are replicated, their gradients partial sums reduced over the batch
// axes; the moving statistics are replicated and have no gradient.
#pragma once

#include <string_view>
#include <type_traits>

#include "../../core/compilation.hpp"
#include "../../core/layer_planner.hpp"
#include "convolution.hpp"

namespace tessel {

namespace layer_rules {

struct batch_normalization_params {
  bool center = true;
  bool scale = true;
};

constexpr void plan_batch_normalization(layer_planner& p, const op_desc& op,
                                        const batch_normalization_params& P) noexcept {
  layout_value& layout = p.layout();
  const shape_value shape = p.shape();
  const bool needs_grad = p.needs_grad();
  const std::size_t channels = shape.extents[shape.rank - 1];
  const shape_value vs{channels};
  const layout_value rep = layout_value::replicated(1);
  auto variable = [&](std::string_view leaf, bool trainable = true) {
    const layout_value l = p.add_variable(op.name, leaf, vs, trainable);
    if (p.ok() && l.dims[0].count != 0)
      p.fail("batch_normalization: its variables are replicated", make_path(op.name, leaf));
  };
  if (P.scale) variable("gamma");
  if (P.center) variable("beta");
  variable("moving_mean", false);
  variable("moving_variance", false);
  if (!p.ok()) return;

  const layout_value used_x = batch_only(layout);
  const std::uint32_t batch_axes = used_x.sharded_axes();
  layout_value partial = rep;
  partial.partial = batch_axes;
  op_layouts used{};
  used.operands[0] = used_x;
  std::size_t v = 0;
  if (P.scale) used.variables[v] = rep, used.variable_gradients[v++] = partial;
  if (P.center) used.variables[v] = rep, used.variable_gradients[v++] = partial;
  used.variables[v++] = rep;
  used.variables[v++] = rep;
  used.result = used_x;
  used.output = used_x;
  // The planner derives the reshards around the op from these layouts; the rule adds the batch's
  // sums, reduced forward after the input's reshard and backward before the gradients'.
  p.record_layouts(used, shape);
  p.batch_reduction(batch_axes, phase::forward, "batch mean", channels);
  p.batch_reduction(batch_axes, phase::forward, "batch variance", channels);
  if (needs_grad)  // the input's gradient needs the batch's sums
    p.batch_reduction(batch_axes, phase::backward, "batch gradient sums", 2 * channels);
  layout = used_x;
  p.needs_grad() = true;
}

// plan_batch_normalization when the program runs: compiled once in tessel::tessel (inline
// with headers only), at the default limits (core/model_plan.hpp).
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_batch_normalization_at_run_time(
    layer_planner& p, const op_desc& op, const batch_normalization_params& params) noexcept;
}

template <batch_normalization_params P>
constexpr void batch_normalization(layer_planner& p, const op_desc& op) noexcept {
  if (std::is_constant_evaluated()) return plan_batch_normalization(p, op, P);
  plan_batch_normalization_at_run_time(p, op, P);
}

template <batch_normalization_params P>
inline constexpr plan_rule batch_normalization_rule{&batch_normalization<P>,
                                                    "batch_normalization"};

}  // namespace layer_rules

template <layer_rules::batch_normalization_params P = {}>
constexpr op_desc batch_normalization_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::batch_normalization_rule<P>, .name = name_string(name)};
}

#if TESSEL_PLAN_DEFINITIONS
namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_batch_normalization_at_run_time(
    layer_planner& p, const op_desc& op, const batch_normalization_params& params) noexcept {
  plan_batch_normalization(p, op, params);
}
}  // namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
