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
  std::size_t gamma = 0, beta = 0;
  layout_value gamma_layout = rep, beta_layout = rep;
  auto variable = [&](std::string_view leaf, layout_value& l, std::size_t& index,
                      bool trainable = true) {
    l = p.add_variable(op.name, leaf, vs, trainable);
    index = p.last_variable();
    if (p.ok() && l.dims[0].count != 0)
      p.fail("batch_normalization: its variables are replicated", make_path(op.name, leaf));
  };
  if (P.scale) variable("gamma", gamma_layout, gamma);
  if (P.center) variable("beta", beta_layout, beta);
  layout_value moving = rep;
  std::size_t unused = 0;
  variable("moving_mean", moving, unused, false);
  variable("moving_variance", moving, unused, false);
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
  p.record_layouts(used);

  const auto& m = p.mesh();
  const std::size_t es = p.element_size();
  p.add(phase::forward, step_role::operand, plan_reshard(layout, used_x, m, shape, es));
  p.batch_reduction(batch_axes, phase::forward, "batch mean", channels);
  p.batch_reduction(batch_axes, phase::forward, "batch variance", channels);
  // backward, in execution order
  if (needs_grad)  // the input's gradient needs the batch's sums
    p.batch_reduction(batch_axes, phase::backward, "batch gradient sums", 2 * channels);
  if (P.scale)
    p.add(phase::backward, step_role::variable_gradient,
          plan_reshard(partial, gamma_layout, m, vs, es), gamma);
  if (P.center)
    p.add(phase::backward, step_role::variable_gradient,
          plan_reshard(partial, beta_layout, m, vs, es), beta);
  if (needs_grad)
    p.add(phase::backward, step_role::operand_gradient,
          plan_reshard_backward(layout, used_x, m, shape, es));
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
