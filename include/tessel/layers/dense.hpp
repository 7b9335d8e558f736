// dense: Keras's Dense layer, y = activation(x @ kernel + bias), forward and backward on the
// local shard.
#pragma once

#include <string>

#include "../core/fixed_string.hpp"
#include "../core/layer_planner.hpp"
#include "../core/propagation.hpp"
#include "../core/activations.hpp"
#include "layer.hpp"
#include "split_rows.hpp"
#include "plan/dense.hpp"

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

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    runtime(const layer_info& info, variable_store<B>& vars, std::uint64_t seed)
        : in_(info.input[0]) {
      const std::string name(info.name.view());
      kernel_ = &add_variable(vars, name + "/kernel", {in_, Units},
                              std::string(Args.kernel_initializer.view()), seed);
      if constexpr (Args.use_bias)
        bias_ = &add_variable(vars, name + "/bias", {Units},
                              std::string(Args.bias_initializer.view()), seed);
    }
    using tensor = basic_dtensor<B>;
    // x: this device's rows of the batch; the output holds the same rows, every unit.
    const tensor& forward(const tensor& x, const pass_context&) {
      y_ = rows_of<B>(x, shape_value{Units}, y_store_, "output");
      // One pass over y: the bias and the activation applied as the product is written.
      B::gemm_bias_activation(x.local(), kernel_->value.local(),
                              Args.use_bias ? bias_->value.local() : matrix(), activation,
                              y_.local());
      return y_;
    }
    // dy (the gradient of y's block) is this layer's scratch: it becomes d(pre-activation) in
    // place.
    const matrix& backward(const tensor& x, const matrix& dy, bool need_dx, const pass_context&) {
      // One pass over dy: the activation's gradient and the bias gradient.
      B::activation_backward_bias(activation, y_.local(), dy, dy,
                                  Args.use_bias ? bias_->gradient : matrix());
      B::gemm(true, false, 1.0f, x.local(), dy, 0.0f, kernel_->gradient);
      if (need_dx) {
        dx_ = sized<B>(dx_store_, B::rows(dy), in_, "input_gradient");
        B::gemm(false, true, 1.0f, dy, kernel_->value.local(), 0.0f, dx_);
      }
      return dx_;
    }

    // ---- model parallel: the layouts the plan chose (op_layouts), each planned step run by
    //      `reshard` (runtime/reshard.hpp's tensor_resharder), the local slices included.
    // Forward: the input and the kernel resharded as the product uses them; the product (partial
    // where the contraction is split; the bias added by the devices at coordinate 0 of the
    // partial axes, so that it is summed once); the output resharded as laid out; the activation.
    template <class Reshard>
    const tensor& forward(const tensor& x, const pass_context&, Reshard& reshard,
                          const op_layouts& l) {
      if (Args.use_bias && !(l.variables[1].dims[0] == l.result.dims[1]))
        throw value_error("dense: a bias laid out unlike the product's columns is not executed "
                          "yet; give the bias the kernel's column layout");
      x_used_ = reshard(x, l.operands[0], x_used_store_, "input_used");
      w_used_ = reshard(kernel_->value, l.variables[0], w_used_store_, "kernel_used");
      const shape_value yg{x.global_shape()[0], Units};
      product_ = reshard.make(yg, l.result, product_store_, "product");
      bool adds_bias = Args.use_bias;
      for (std::size_t a = 0; a < max_mesh_rank; ++a)
        if ((l.result.partial >> a) & 1u) adds_bias = adds_bias && reshard.coordinates()[a] == 0;
      if constexpr (Args.use_bias) {
        // Every device runs the bias's planned steps; only one per partial group adds it.
        b_used_ = reshard(bias_->value, l.variables[1], b_used_store_, "bias_used");
        if (adds_bias) B::broadcast_rows(b_used_.local(), product_.local());
      }
      B::gemm(false, false, 1.0f, x_used_.local(), w_used_.local(), adds_bias ? 1.0f : 0.0f,
              product_.local());
      y_ = reshard(product_, l.output, y_store_, "output");
      if (splits_softmax(reshard)) split_softmax_forward(y_, stats_, reshard);
      else B::activation_forward(activation, y_.local());
      return y_;
    }
    // Backward from dy, the gradient of this device's block of the output: the activation's
    // gradient; the output gradient resharded to the product's layout; the kernel's and bias's
    // gradients computed on the blocks as used and resharded to the variables' layouts (reduced
    // over the batch axes there); the input gradient resharded back to the input's layout.
    template <class Reshard>
    const matrix& backward(const tensor& x, const matrix& dy, bool need_dx, const pass_context&,
                           Reshard& reshard, const op_layouts& l) {
      if (splits_softmax(reshard)) split_softmax_backward(y_, dy, dy, stats_, reshard);
      else B::activation_backward(activation, y_.local(), dy, dy);
      const layout_value g_layout = l.result.without_partial();
      const tensor g = reshard(y_.like(dy), g_layout, g_store_, "output_gradient");
      const auto dw_layout = propagate_matmul(layer_rules::swap2(l.operands[0]), g_layout);
      if (kernel_->reduced_in_bucket ||
          moves_nothing(reshard, dw_layout.out, l.variables[0], kernel_->value)) {
        // The product's gradient is already the variable's block (a partial sum, when the
        // trainer's bucket reduces it): computed in place.
        B::gemm(true, false, 1.0f, x_used_.local(), g.local(), 0.0f, kernel_->gradient);
      } else {
        const tensor dw = reshard.make(kernel_->value.global_shape(), dw_layout.out, dw_store_,
                                       "kernel_gradient");
        B::gemm(true, false, 1.0f, x_used_.local(), g.local(), 0.0f, dw.local());
        const tensor dw_used = reshard(dw, l.variables[0], dw_used_store_, "kernel_gradient_used");
        B::copy(
            reshard(dw_used, kernel_->value.layout(), dw_var_store_, "kernel_gradient").local(),
            kernel_->gradient);
      }
      if constexpr (Args.use_bias) {
        if (bias_->reduced_in_bucket) {
          B::column_sums(g.local(), bias_->gradient);
        } else {
          const auto db_layout = propagate_reduce(g_layout, 0);
          const tensor db = reshard.make(bias_->value.global_shape(), db_layout.out, db_store_,
                                         "bias_gradient");
          B::column_sums(g.local(), db.local());
          B::copy(reshard(db, bias_->value.layout(), db_var_store_, "bias_gradient").local(),
                  bias_->gradient);
        }
      }
      if (!need_dx) return dx_;
      const auto dx_layout = propagate_matmul(g_layout, layer_rules::swap2(l.variables[0]));
      const tensor dx = reshard.make(x.global_shape(), dx_layout.out, dx_store_, "input_gradient");
      B::gemm(false, true, 1.0f, g.local(), w_used_.local(), 0.0f, dx.local());
      const tensor dx_used = reshard(dx, l.operands[0], dx_used_store_, "input_gradient_used");
      dx_ = reshard(dx_used, x.layout().without_partial(), dx_in_store_, "input_gradient")
                .local();
      return dx_;
    }

   private:
    // A softmax over classes split across devices (its output laid out with the last dimension
    // split): row max and sums all_reduced, as the plan's row reductions list them.
    template <class Reshard>
    bool splits_softmax(const Reshard& reshard) const {
      return activation == activation_kind::softmax && reshard.moves(class_axes(y_.layout()));
    }
    // Whether a gradient computed in layout `from` is already the variable's block: no step from
    // `from` to the layout the product used, nor from that to the variable's.
    template <class Reshard>
    static bool moves_nothing(const Reshard& reshard, const layout_value& from,
                              const layout_value& used, const tensor& var) {
      return plan_reshard(from, used, reshard.mesh(), var.global_shape()).empty() &&
             plan_reshard(used, var.layout(), reshard.mesh(), var.global_shape()).empty();
    }
    std::size_t in_;
    tensor x_used_, w_used_, product_, b_used_;
    row_statistics<B> stats_;
    matrix x_used_store_, w_used_store_, product_store_, b_used_store_, g_store_, dw_store_,
        dw_used_store_, dw_var_store_, db_store_, db_var_store_, dx_used_store_, dx_in_store_;
    variable<B>* kernel_ = nullptr;
    variable<B>* bias_ = nullptr;
    matrix y_store_, dx_store_, dx_;
    tensor y_;
  };
};

}  // namespace tessel::layers

