// Planning rules of the layers with several inputs: add (Keras's Add), the join of a residual
// connection, and concatenate (Keras's Concatenate, on the last axis).
#pragma once

#include <initializer_list>
#include <string_view>

#include "../../core/layer_planner.hpp"

namespace tessel {

namespace layer_rules {

// The sum of inputs of one shape: each input is resharded to input 0's layout, made complete
// (an element-wise sum of partial sums over different axes has no layout), and added locally.
// Backward, the output gradient goes to every input unchanged, through each input's transposed
// resharding.
constexpr void add(layer_planner& p, const op_desc&) noexcept {
  if (p.input_count() < 2) return p.fail("add takes two or more inputs");
  const layout_value out = p.input(0).layout.without_partial();
  bool needs_grad = false;
  for (std::size_t k = 0; k < p.input_count(); ++k) {
    const auto& in = p.input(k);
    if (!(in.shape == p.input(0).shape))
      return p.fail("add takes inputs of one shape; reshape or project them first");
    layout_value l = in.layout;
    p.reshard_forward(step_role::operand, l, out, in.shape, in.needs_grad, k);
    needs_grad = needs_grad || in.needs_grad;
  }
  p.layout() = out;
  p.needs_grad() = needs_grad;
}

// Concatenation on the last axis: each input resharded to input 0's layout (complete) with the
// last axis whole on every device, so that each device joins its rows' features locally.
// Backward, each input's gradient is its columns of the output's gradient, through its
// transposed resharding.
constexpr void concatenate(layer_planner& p, const op_desc&) noexcept {
  if (p.input_count() < 2) return p.fail("concatenate takes two or more inputs");
  layout_value out = p.input(0).layout.without_partial();
  const std::size_t last = out.rank - 1;
  out.dims[last] = dim_sharding{};
  shape_value shape = p.input(0).shape;
  shape.extents[last] = 0;
  bool needs_grad = false;
  for (std::size_t k = 0; k < p.input_count(); ++k) {
    const auto& in = p.input(k);
    if (in.shape.rank != shape.rank)
      return p.fail("concatenate takes inputs of one rank; reshape or flatten them first");
    layout_value l = in.layout;
    p.reshard_forward(step_role::operand, l, out, in.shape, in.needs_grad, k);
    shape.extents[last] += in.shape[last];
    needs_grad = needs_grad || in.needs_grad;
  }
  p.layout() = out;
  p.shape() = shape;
  p.needs_grad() = needs_grad;
}

inline constexpr plan_rule add_rule{&add, "add"};
inline constexpr plan_rule concatenate_rule{&concatenate, "concatenate"};

}  // namespace layer_rules

// `reads(add_op("sum"), {2, 4})`: the sum of the outputs of layers 1 and 3.
constexpr op_desc add_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::add_rule, .name = name_string(name)};
}

// `reads(concatenate_op("join"), {1, 2})`: the outputs of layers 0 and 1 side by side.
constexpr op_desc concatenate_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::concatenate_rule, .name = name_string(name)};
}

}  // namespace tessel
