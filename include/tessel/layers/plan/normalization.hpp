// Planning rule of layer_normalization (Keras's LayerNormalization on the last axis): each
// sample's features are normalized together, so the rule computes with the last axis whole on
// every device (the input resharded to it, complete) and gamma and beta replicated; their
// gradients are sums over this device's rows, reduced over the axes the rows are split over.
#pragma once

#include <optional>
#include <string_view>

#include "../../core/layer_planner.hpp"

namespace tessel {

namespace layer_rules {

// Which of its variables the layer has (Keras's `scale`: gamma, `center`: beta).
struct layer_normalization_params {
  bool center = true;
  bool scale = true;
};

template <layer_normalization_params P>
constexpr void layer_normalization(layer_planner& p, const op_desc& op) noexcept {
  layout_value& layout = p.layout();
  const shape_value shape = p.shape();
  const std::size_t last = shape.rank - 1;
  const shape_value vs{shape.extents[last]};
  const layout_value rep = layout_value::replicated(1);
  if (P.scale) p.add_variable(op.name, "gamma", vs);
  if (P.center) p.add_variable(op.name, "beta", vs);
  if (!p.ok()) return;
  const key_string out_path = make_path(op.name, "output");
  const std::optional<layout_value> forced = p.find_layout(out_path);
  if (!p.ok()) return;
  if (forced && !p.check_divides(*forced, shape, out_path)) return;
  p.output_applied();

  layout_value used_x = layout.without_partial();
  used_x.dims[last] = dim_sharding{};
  const layout_value out = forced ? *forced : used_x;
  // The variables' gradients: partial sums over the rows this device holds.
  layout_value partial = rep;
  partial.partial = used_x.sharded_axes();
  op_layouts used{};
  used.operands[0] = used_x;
  std::size_t v = 0;
  if (P.scale) used.variables[v] = rep, used.variable_gradients[v++] = partial;
  if (P.center) used.variables[v] = rep, used.variable_gradients[v++] = partial;
  used.result = used_x;
  used.output = out;
  // The planner derives every reshard around the op from these layouts.
  p.record_layouts(used, shape);
  layout = out;
  p.needs_grad() = true;
}

template <layer_normalization_params P>
inline constexpr plan_rule layer_normalization_rule{&layer_normalization<P>,
                                                    "layer_normalization"};

}  // namespace layer_rules

template <layer_rules::layer_normalization_params P = {}>
constexpr op_desc layer_normalization_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::layer_normalization_rule<P>, .name = name_string(name)};
}

}  // namespace tessel
