// dense: Keras's Dense layer, y = activation(x @ kernel + bias), forward and backward on the
// local shard.
#pragma once

#include <string>

#include "../core/fixed_string.hpp"
#include "../core/model_plan.hpp"
#include "../core/activations.hpp"
#include "layer.hpp"
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
    return dense_op(name, Units, Args.use_bias, activation_name(activation));
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
      const matrix& y = y_.local();
      if constexpr (Args.use_bias) {
        B::broadcast_rows(bias_->value.local(), y);
        B::gemm(false, false, 1.0f, x.local(), kernel_->value.local(), 1.0f, y);
      } else {
        B::gemm(false, false, 1.0f, x.local(), kernel_->value.local(), 0.0f, y);
      }
      B::activation_forward(activation, y);
      return y_;
    }
    // dy (the gradient of y's block) is this layer's scratch: it becomes d(pre-activation) in
    // place.
    const matrix& backward(const tensor& x, const matrix& dy, bool need_dx, const pass_context&) {
      B::activation_backward(activation, y_.local(), dy, dy);
      B::gemm(true, false, 1.0f, x.local(), dy, 0.0f, kernel_->gradient);
      if constexpr (Args.use_bias) B::column_sums(dy, bias_->gradient);
      if (need_dx) {
        dx_ = sized<B>(dx_store_, B::rows(dy), in_, "input_gradient");
        B::gemm(false, true, 1.0f, dy, kernel_->value.local(), 0.0f, dx_);
      }
      return dx_;
    }

   private:
    std::size_t in_;
    variable<B>* kernel_ = nullptr;
    variable<B>* bias_ = nullptr;
    matrix y_store_, dx_store_, dx_;
    tensor y_;
  };
};

}  // namespace tessel::layers

