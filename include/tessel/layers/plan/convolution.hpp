// Planning rules of the convolutional layers (Keras's Conv2D, MaxPooling2D, AveragePooling2D,
// GlobalAveragePooling2D), on channels-last (N, H, W, C) tensors. A window slides over whole
// images, so each computes with its input's batch dimension as it comes and the other dimensions
// whole: a layout that splits the height or width (of the input, or of a kernel) fails the plan,
// naming the layer. A convolution's kernel and bias are replicated; their gradients are partial
// sums over the rows this device holds, reduced over the batch axes, as a dense layer's are
// under data parallelism.
#pragma once

#include <optional>
#include <string_view>
#include <type_traits>

#include "../../core/activations.hpp"
#include "../../core/compilation.hpp"
#include "../../core/layer_planner.hpp"
#include "dense.hpp"

namespace tessel {

namespace layer_rules {

// The layout a windowed op computes with: the batch dimension as `l` has it, the rest whole.
constexpr layout_value batch_only(const layout_value& l) noexcept {
  layout_value u = l.without_partial();
  for (std::size_t d = 1; d < u.rank; ++d) u.dims[d] = dim_sharding{};
  return u;
}
// Whether `l` splits a spatial dimension (1 or 2) of an (N, H, W, C) tensor.
constexpr bool splits_spatial(const layout_value& l) noexcept {
  return l.rank == 4 && (l.dims[1].count != 0 || l.dims[2].count != 0);
}

// A 2-D window's sizes: its output's height and width for an input's, as Keras's padding gives
// them (backend/convolution_bodies.hpp's make_window).
struct window2d {
  std::size_t kh = 1, kw = 1, sh = 1, sw = 1;
  bool same = false;
  [[nodiscard]] static constexpr std::size_t out(std::size_t in, std::size_t k, std::size_t s,
                                                 bool same) noexcept {
    if (same) return (in + s - 1) / s;
    return in >= k ? (in - k) / s + 1 : 0;
  }
  [[nodiscard]] constexpr std::size_t out_h(std::size_t h) const noexcept {
    return out(h, kh, sh, same);
  }
  [[nodiscard]] constexpr std::size_t out_w(std::size_t w) const noexcept {
    return out(w, kw, sw, same);
  }
};

struct conv2d_params {
  std::size_t filters = 0;
  window2d window;
  bool use_bias = true;
  activation_kind activation = activation_kind::linear;
};

constexpr void plan_conv2d(layer_planner& p, const op_desc& op, const conv2d_params& P) noexcept {
  layout_value& layout = p.layout();
  shape_value& shape = p.shape();  // (N, H, W, C)
  if (shape.rank != 4) return p.fail("conv2d takes (height, width, channels) samples");
  if (splits_spatial(layout)) return p.fail("conv2d: its input is split over height or width");
  const shape_value ks{P.window.kh, P.window.kw, shape.extents[3], P.filters};
  const shape_value bs{P.filters};
  const layout_value kernel_layout = p.add_variable(op.name, "kernel", ks, true, variable_use::weight);
  if (!p.ok()) return;
  if (kernel_layout.dims[0].count != 0 || kernel_layout.dims[1].count != 0)
    return p.fail("conv2d: the kernel is split over its height or width",
                  make_path(op.name, "kernel"));
  // The kernel's input channels (Sc) and output channels (Sf) as it lies: the convolution is a
  // dense layer on the im2col matrix, whose contraction runs over (kh, kw, C), so it computes
  // with the input's channels split as the kernel's (each device's partial sums, reduced over
  // Sc: row parallel) and gives its filters split as the kernel's (column parallel).
  const dim_sharding in_channels = kernel_layout.dims[2], filters = kernel_layout.dims[3];
  if (P.use_bias) {
    p.add_variable(op.name, "bias", bs, true, variable_use::bias);
    if (!p.ok()) return;
  }
  // The input as used: its batch dimension as it comes, less the axes the kernel uses; the
  // image whole; the channels split as the kernel's.
  layout_value used_x = drop_axes(batch_only(layout), kernel_layout.sharded_axes());
  used_x.dims[3] = in_channels;
  const std::uint32_t batch_axes = used_x.dims[0].mask();
  shape_value out_shape{shape.extents[0], P.window.out_h(shape.extents[1]),
                        P.window.out_w(shape.extents[2]), P.filters};
  layout_value result = layout_value::replicated(4);
  result.dims[0] = used_x.dims[0];
  result.dims[3] = filters;
  result.partial = in_channels.mask();
  // The output: the layout_map's "<name>/output" if given (reached from the partial result in
  // one reshard, a reduce_scatter where it splits the filters), else the result, reduced.
  const key_string out_path = make_path(op.name, "output");
  const std::optional<layout_value> forced = p.find_layout(out_path);
  if (!p.ok()) return;
  if (forced && !p.check_divides(*forced, out_shape, out_path)) return;
  p.output_applied();
  const layout_value out = forced ? *forced : result.without_partial();
  layout_value want_bias = layout_value::replicated(1);
  want_bias.dims[0] = filters;
  // The variables' gradients: partial sums over the rows this device holds; the input's, partial
  // over the filters' axes (each device's filters contribute to every input channel).
  layout_value kernel_gradient = kernel_layout, bias_gradient = want_bias, dx = used_x;
  kernel_gradient.partial = bias_gradient.partial = batch_axes;
  dx.partial = filters.mask();
  op_layouts used{};
  used.operands[0] = used_x;
  used.variables[0] = kernel_layout;
  used.variable_gradients[0] = kernel_gradient;
  if (P.use_bias) used.variables[1] = want_bias, used.variable_gradients[1] = bias_gradient;
  used.result = result;
  used.output = out;
  used.operand_gradients[0] = dx;
  // The planner derives every reshard around the product from these layouts.
  p.record_layouts(used, out_shape);
  layout = out;
  shape = out_shape;
  p.needs_grad() = true;
}

// plan_conv2d when the program runs: compiled once in tessel::tessel (inline with headers only),
// at the default limits (core/model_plan.hpp).
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_conv2d_at_run_time(layer_planner& p, const op_desc& op,
                                                const conv2d_params& params) noexcept;
}

template <conv2d_params P>
constexpr void conv2d(layer_planner& p, const op_desc& op) noexcept {
  if (std::is_constant_evaluated()) return plan_conv2d(p, op, P);
  plan_conv2d_at_run_time(p, op, P);
}

// Max and average pooling: each channel alone, over whole images.
template <window2d W>
constexpr void pooling2d(layer_planner& p, const op_desc&) noexcept {
  layout_value& layout = p.layout();
  shape_value& shape = p.shape();
  if (shape.rank != 4) return p.fail("pooling takes (height, width, channels) samples");
  if (splits_spatial(layout)) return p.fail("pooling: its input is split over height or width");
  p.reshard_forward(step_role::operand, layout, batch_only(layout), shape, p.needs_grad());
  shape = shape_value{shape.extents[0], W.out_h(shape.extents[1]), W.out_w(shape.extents[2]),
                      shape.extents[3]};
}

// Global average pooling: (N, H, W, C) to (N, C).
constexpr void global_average_pooling2d(layer_planner& p, const op_desc&) noexcept {
  layout_value& layout = p.layout();
  shape_value& shape = p.shape();
  if (shape.rank != 4) return p.fail("pooling takes (height, width, channels) samples");
  if (splits_spatial(layout)) return p.fail("pooling: its input is split over height or width");
  p.reshard_forward(step_role::operand, layout, batch_only(layout), shape, p.needs_grad());
  layout_value out = layout_value::replicated(2);
  out.dims[0] = layout.dims[0];
  layout = out;
  shape = shape_value{shape.extents[0], shape.extents[3]};
}

template <conv2d_params P>
inline constexpr plan_rule conv2d_rule{&conv2d<P>, "conv2d"};
template <window2d W>
inline constexpr plan_rule pooling2d_rule{&pooling2d<W>, "pooling2d"};
inline constexpr plan_rule global_average_pooling2d_rule{&global_average_pooling2d,
                                                         "global_average_pooling2d"};

}  // namespace layer_rules

template <layer_rules::conv2d_params P>
constexpr op_desc conv2d_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::conv2d_rule<P>, .name = name_string(name)};
}
template <layer_rules::window2d W>
constexpr op_desc pooling2d_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::pooling2d_rule<W>, .name = name_string(name)};
}
constexpr op_desc global_average_pooling2d_op(std::string_view name) noexcept {
  return {.rule = &layer_rules::global_average_pooling2d_rule, .name = name_string(name)};
}

#if TESSEL_PLAN_DEFINITIONS
namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE void plan_conv2d_at_run_time(layer_planner& p, const op_desc& op,
                                                const conv2d_params& params) noexcept {
  plan_conv2d(p, op, params);
}
}  // namespace layer_rules::inline TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
