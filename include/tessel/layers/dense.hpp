// dense: Keras's Dense layer, y = activation(x @ kernel + bias), forward and backward on the
// local shard.
#pragma once

#include <array>
#include <span>
#include <string>

#include "../core/activations.hpp"
#include "../core/fixed_string.hpp"
#include "../core/layer_planner.hpp"
#include "../core/propagation.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/dense.hpp"
#include "split_rows.hpp"

namespace tessel::layers {

// Keras's Dense arguments, by the same names: `dense<200, {.activation = "relu", .use_bias =
// false, .name = "d1"}>`.
struct dense_args {
  fixed_string<16> activation = "linear";
  bool use_bias = true;
  fixed_string<24> kernel_initializer = "glorot_uniform";
  fixed_string<24> bias_initializer = "zeros";
  name_string name = "";
};

template <std::size_t Units, dense_args Args = dense_args{}>
struct dense {
  static_assert(Units > 0, "dense: units must be positive");
  static_assert(is_activation_name(Args.activation.view()),
                "dense: unknown activation; use linear, relu, sigmoid, tanh or softmax");
  static constexpr std::string_view class_name = "Dense";
  static constexpr std::string_view base_name = "dense";
  static constexpr name_string given_name = Args.name;
  static constexpr bool has_variables = true;
  template <class... In>
  using on = node<dense, In...>;
  static constexpr activation_kind activation = activation_from_name(Args.activation.view());

  // Dense works on the last axis; tessel's dense takes rank-1 samples (flatten first).
  static constexpr bool accepts(const shape_value& in) { return in.rank == 1; }
  static constexpr shape_value output_shape(const shape_value&) { return shape_value{Units}; }
  static constexpr std::size_t param_count(const shape_value& in) {
    return in[0] * Units + (Args.use_bias ? Units : 0);
  }
  static constexpr op_desc plan_op(std::string_view name) {
    return dense_op<{.units = Units, .use_bias = Args.use_bias, .activation = activation}>(name);
  }
  // Keras's Dense.get_config().
  static void keras_config(layers::keras_config& c) {
    c.field("units", Units);
    c.field("activation", Args.activation.view());
    c.field("use_bias", Args.use_bias);
    c.initializer("kernel_initializer", Args.kernel_initializer.view());
    c.initializer("bias_initializer", Args.bias_initializer.view());
    for (const char* k :
         {"kernel_regularizer", "bias_regularizer", "kernel_constraint", "bias_constraint",
          "quantization_config"})
      c.null(k);
  }

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info& info, variable_store<B>& vars, std::uint64_t seed)
        : in_(info.input[0]) {
      const std::string name(info.name.view());
      vars_[0] = &add_variable(vars, name + "/kernel", {in_, Units},
                               std::string(Args.kernel_initializer.view()), seed);
      if constexpr (Args.use_bias)
        vars_[1] = &add_variable(vars, name + "/bias", {Units},
                                 std::string(Args.bias_initializer.view()), seed);
    }
    // The kernel, then the bias: the order the rule lists them.
    std::span<variable<B>* const> variables() const noexcept {
      return {vars_.data(), Args.use_bias ? 2u : 1u};
    }

    // y = x @ kernel (+ bias). On local blocks (no layouts) and wherever the result is the output
    // (`whole`), the bias and the activation are applied as the product is written, in one pass
    // over y. A result partial over some axes (the contraction split) gets the bias on the
    // devices that add constants (coordinate 0 of those axes), so that it is summed once; its
    // activation waits for the output (finish).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce& reduce) {
      const tensor& x = *a.operands[0];
      const matrix bias = Args.use_bias ? a.variables[1]->local() : matrix();
      if (a.layouts == nullptr) {
        y_ = rows_of<B>(x, shape_value{Units}, y_store_, "output");
        B::gemm_bias_activation(x.local(), a.variables[0]->local(), bias, activation, y_.local());
        return y_;
      }
      if (Args.use_bias && !(a.layouts->variables[1].dims[0] == a.layouts->result.dims[1]))
        throw value_error(
            "dense: a bias laid out unlike the product's columns is not executed "
            "yet; give the bias the kernel's column layout");
      y_ = reduce.make(shape_value{x.global_shape()[0], Units}, a.layouts->result, y_store_,
                       "product");
      const bool adds_bias = Args.use_bias && a.adds_constants;
      if (adds_bias) B::broadcast_rows(bias, y_.local());
      B::gemm(false, false, 1.0f, x.local(), a.variables[0]->local(), adds_bias ? 1.0f : 0.0f,
              y_.local());
      if (a.whole) finish(y_, pass_context{}, reduce);
      return y_;
    }
    // The activation on the output (a softmax over classes split across devices completes its
    // rows with the row reductions the plan lists).
    template <class Reduce>
    void finish(const tensor& y, const pass_context&, Reduce& reduce) {
      if (splits_softmax(y, reduce))
        split_softmax_forward(y, stats_, reduce);
      else
        B::activation_forward(activation, y.local());
    }
    // Its gradient, in place on dy (the output's gradient).
    template <class Reduce>
    void finish_backward(const tensor& y, const matrix& dy, const pass_context&, Reduce& reduce) {
      if (splits_softmax(y, reduce))
        split_softmax_backward(y, dy, dy, stats_, reduce);
      else
        B::activation_backward(activation, y.local(), dy, dy);
    }
    // From dy (the result's gradient; the output's when whole, the activation's gradient then
    // taken here first, fused with the bias's): the kernel's gradient x^T g, the bias's column
    // sums of g, where `grads` says; the input's gradient g kernel^T, returned.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>& grads,
                             const pass_context& c, Reduce& reduce) {
      const tensor& x = *a.operands[0];
      const tensor& w = *a.variables[0];
      op_gradients<B> out;
      if (a.layouts == nullptr) {
        // One pass over dy: the activation's gradient and the bias gradient.
        B::activation_backward_bias(
            activation, y_.local(), dy, dy,
            Args.use_bias && grads.wants(1) ? grads.variables[1] : matrix());
        if (grads.wants(0)) B::gemm(true, false, 1.0f, x.local(), dy, 0.0f, grads.variables[0]);
        if (a.wants_operand_gradients & 1u) {
          matrix dx = sized<B>(dx_store_, B::rows(dy), in_, "input_gradient");
          B::gemm(false, true, 1.0f, dy, w.local(), 0.0f, dx);
          out.operands[0] = x.like(dx);
        }
        return out;
      }
      if (a.whole) finish_backward(y_, dy, c, reduce);
      if (grads.wants(0)) B::gemm(true, false, 1.0f, x.local(), dy, 0.0f, grads.variables[0]);
      if (Args.use_bias && grads.wants(1)) B::column_sums(dy, grads.variables[1]);
      if (a.wants_operand_gradients & 1u) {
        const layout_value g_layout = a.layouts->result.without_partial();
        const auto dx_layout = propagate_matmul(g_layout, layer_rules::swap2(w.layout()));
        const tensor dx = reduce.make(x.global_shape(), dx_layout.out, dx_store_, "input_gradient");
        B::gemm(false, true, 1.0f, dy, w.local(), 0.0f, dx.local());
        out.operands[0] = dx;
      }
      return out;
    }

   private:
    template <class Reduce>
    bool splits_softmax(const tensor& y, const Reduce& reduce) const {
      return activation == activation_kind::softmax && reduce.moves(class_axes(y.layout()));
    }
    std::size_t in_;
    std::array<variable<B>*, 2> vars_{};
    row_statistics<B> stats_;
    matrix y_store_, dx_store_;
    tensor y_;
  };
};

}  // namespace tessel::layers
