// Layer normalization (Keras's LayerNormalization, on the last axis): each sample's last-axis
// values normalized to mean 0 and variance 1, then scaled by gamma and shifted by beta:
// `layer_normalization<>`, `layer_normalization<{.epsilon = 1e-5, .name = "ln"}>`.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "../core/fixed_string.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/normalization.hpp"

namespace tessel::layers {

struct layer_normalization_args {
  double epsilon = 1e-3;  // Keras's default
  bool center = true;     // beta
  bool scale = true;      // gamma
  fixed_string<24> beta_initializer = "zeros";
  fixed_string<24> gamma_initializer = "ones";
  name_string name = "";
};

template <layer_normalization_args Args = layer_normalization_args{}>
struct layer_normalization {
  static_assert(Args.epsilon > 0, "layer_normalization: epsilon must be positive");
  static constexpr std::string_view class_name = "LayerNormalization";
  static constexpr std::string_view base_name = "layer_normalization";
  static constexpr name_string given_name = Args.name;
  static constexpr bool has_variables = Args.center || Args.scale;
  template <class... In>
  using on = node<layer_normalization, In...>;

  static constexpr bool accepts(const shape_value& in) { return in.rank >= 1; }
  static constexpr shape_value output_shape(const shape_value& in) { return in; }
  static constexpr std::size_t param_count(const shape_value& in) {
    return in[in.rank - 1] * ((Args.center ? 1 : 0) + (Args.scale ? 1 : 0));
  }
  static constexpr op_desc plan_op(std::string_view name) {
    return layer_normalization_op<{.center = Args.center, .scale = Args.scale}>(name);
  }
  // Keras's LayerNormalization.get_config() (on the last axis).
  static void keras_config(layers::keras_config& c) {
    c.raw("axis", "[-1]");
    c.field("epsilon", Args.epsilon);
    c.field("center", Args.center);
    c.field("scale", Args.scale);
    c.field("rms_scaling", false);
    c.initializer("beta_initializer", Args.beta_initializer.view());
    c.initializer("gamma_initializer", Args.gamma_initializer.view());
    for (const char* k :
         {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"})
      c.null(k);
  }

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    // gamma, then beta (Keras's order), each of the last axis's size.
    runtime(const layer_info& info, variable_store<B>& vars, std::uint64_t seed)
        : features_(info.input[info.input.rank - 1]) {
      const std::string name(info.name.view());
      if (Args.scale)
        vars_[count_++] = &add_variable(vars, name + "/gamma", {features_},
                                        std::string(Args.gamma_initializer.view()), seed);
      if (Args.center)
        vars_[count_++] = &add_variable(vars, name + "/beta", {features_},
                                        std::string(Args.beta_initializer.view()), seed);
    }
    std::span<variable<B>* const> variables() const { return {vars_.data(), count_}; }

    // On this device's rows, the last axis whole (the plan reshards it so).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      const tensor& x = *a.operands[0];
      const std::size_t rows = B::rows(x.local()), cols = B::cols(x.local());
      y_ = x.like(sized<B>(y_store_, rows, cols, "layer_normalization"));
      xhat_ = sized<B>(xhat_store_, rows, cols, "layer_normalization_xhat");
      inv_ = sized<B>(inv_store_, rows * cols / features_, 1, "layer_normalization_inv");
      const matrix& gamma = Args.scale ? a.variables[0]->local() : x.local();
      const matrix& beta = Args.center ? a.variables[Args.scale ? 1 : 0]->local() : x.local();
      B::layer_normalization(x.local(), features_, gamma, Args.scale, beta, Args.center,
                             static_cast<float>(Args.epsilon), xhat_, inv_, y_.local());
      return y_;
    }
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>& g,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      const bool want_dx = a.wants_operand_gradients & 1u;
      const std::size_t beta_index = Args.scale ? 1 : 0;
      const bool want_gamma = Args.scale && g.wants(0);
      const bool want_beta = Args.center && g.wants(beta_index);
      const matrix& gamma = Args.scale ? a.variables[0]->local() : dy;
      if (want_dx) dx_ = sized<B>(dx_store_, B::rows(dy), B::cols(dy), "layer_normalization_dx");
      B::layer_normalization_backward(dy, xhat_, inv_, features_, gamma, Args.scale,
                                      want_dx ? dx_ : dy, want_dx,
                                      want_gamma ? g.variables[0] : dy, want_gamma,
                                      want_beta ? g.variables[beta_index] : dy, want_beta);
      if (want_dx) out.operands[0] = a.operands[0]->like(dx_);
      return out;
    }

   private:
    std::size_t features_;
    std::array<variable<B>*, 2> vars_{};
    std::size_t count_ = 0;
    matrix y_store_, xhat_store_, inv_store_, dx_store_, xhat_, inv_, dx_;
    tensor y_;
  };
};

}  // namespace tessel::layers
