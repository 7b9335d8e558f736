// Batch normalization (Keras's BatchNormalization, on the last axis): in training each channel
// is normalized with the batch's mean and (biased) variance over every other dimension, and the
// moving statistics follow them (moving * momentum + batch * (1 - momentum)); in inference the
// moving statistics are used. Under a distribution the statistics are the global batch's: the
// per-channel sums are all-reduced over the batch axes (synchronized batch normalization), so
// data parallelism equals one device here too.
//
//   batch_normalization<>, batch_normalization<{.center = true, .scale = false}>,
//   batch_normalization<{.momentum = 0.9, .epsilon = 1e-5, .name = "bn1"}>
#pragma once

#include <array>
#include <span>
#include <string>

#include "../backend/batch_normalization_bodies.hpp"
#include "../core/fixed_string.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/batch_normalization.hpp"

namespace tessel::layers {

struct batch_normalization_args {
  double momentum = 0.99;  // Keras's defaults
  double epsilon = 1e-3;
  bool center = true;  // beta
  bool scale = true;   // gamma
  fixed_string<24> beta_initializer = "zeros";
  fixed_string<24> gamma_initializer = "ones";
  fixed_string<24> moving_mean_initializer = "zeros";
  fixed_string<24> moving_variance_initializer = "ones";
  name_string name = "";
};

template <batch_normalization_args Args = batch_normalization_args{}>
struct batch_normalization {
  static_assert(Args.epsilon > 0, "batch_normalization: epsilon must be positive");
  static_assert(Args.momentum >= 0 && Args.momentum <= 1,
                "batch_normalization: momentum must be in [0, 1]");
  static constexpr std::string_view class_name = "BatchNormalization";
  static constexpr std::string_view base_name = "batch_normalization";
  static constexpr name_string given_name = Args.name;
  static constexpr bool has_variables = true;
  template <class... In>
  using on = node<batch_normalization, In...>;

  static constexpr bool accepts(const shape_value& in) { return in.rank >= 1; }
  static constexpr shape_value output_shape(const shape_value& in) { return in; }
  static constexpr std::size_t param_count(const shape_value& in) {
    return in[in.rank - 1] * ((Args.center ? 1 : 0) + (Args.scale ? 1 : 0) + 2);
  }
  static constexpr op_desc plan_op(std::string_view name) {
    return batch_normalization_op<{.center = Args.center, .scale = Args.scale}>(name);
  }
  // Keras's BatchNormalization.get_config() (on the last axis).
  static void keras_config(layers::keras_config& c) {
    c.field("axis", -1);
    c.field("momentum", Args.momentum);
    c.field("epsilon", Args.epsilon);
    c.field("center", Args.center);
    c.field("scale", Args.scale);
    c.initializer("beta_initializer", Args.beta_initializer.view());
    c.initializer("gamma_initializer", Args.gamma_initializer.view());
    c.initializer("moving_mean_initializer", Args.moving_mean_initializer.view());
    c.initializer("moving_variance_initializer", Args.moving_variance_initializer.view());
    for (const char* k :
         {"beta_regularizer", "gamma_regularizer", "beta_constraint", "gamma_constraint"})
      c.null(k);
    c.field("synchronized", false);
    c.field("renorm", false);
    c.null("renorm_clipping");
    c.field("renorm_momentum", 0.99);
  }

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    // gamma, beta, moving_mean, moving_variance: Keras's order (the last two not trainable).
    runtime(const layer_info& info, variable_store<B>& vars, std::uint64_t seed)
        : channels_(info.input[info.input.rank - 1]), per_sample_(info.input.elements()) {
      const std::string name(info.name.view());
      auto add = [&](const char* leaf, const auto& init, bool trainable) {
        vars_[count_++] = &add_variable(vars, name + "/" + leaf, {channels_},
                                        std::string(init.view()), seed, trainable);
      };
      if (Args.scale) add("gamma", Args.gamma_initializer, true);
      if (Args.center) add("beta", Args.beta_initializer, true);
      add("moving_mean", Args.moving_mean_initializer, false);
      add("moving_variance", Args.moving_variance_initializer, false);
    }
    std::span<variable<B>* const> variables() const { return {vars_.data(), count_}; }

    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context& c, Reduce& reduce) {
      namespace bn = backend::batch_normalization;
      const tensor& x = *a.operands[0];
      const std::size_t rows = B::rows(x.local()) * per_sample_ / channels_;
      y_ = sized_like<B>(x, y_store_, "batch_normalization");
      xhat_ = sized<B>(xhat_store_, B::rows(x.local()), B::cols(x.local()),
                       "batch_normalization_xhat");
      maps_ = sized<B>(maps_store_, 1, 5 * channels_, "batch_normalization_maps");
      training_ = c.training;
      count_rows_ = static_cast<double>(x.global_shape()[0]) * (per_sample_ / channels_);
      const std::uint32_t axes = x.layout().dims[0].mask();
      float* sums = nullptr;
      if (training_) {
        sums_ = sized<B>(sums_store_, 1, 2 * channels_, "batch_normalization_sums");
        sums = sums_.data();
        B::for_each("batch_normalization_sums", channels_, rows,
                    bn::channel_sums{x.local().data(), rows, channels_, sums});
        reduce.reduce_rows(B::alias(sums_, 0, 1, channels_), axes, comm::reduce_op::sum);
        B::for_each("batch_normalization_deviations", channels_, rows,
                    bn::channel_deviations{x.local().data(), rows, channels_, sums, count_rows_});
        reduce.reduce_rows(B::alias(sums_, channels_, 1, channels_), axes, comm::reduce_op::sum);
      }
      const std::size_t v = (Args.scale ? 1 : 0) + (Args.center ? 1 : 0);
      B::for_each("batch_normalization_maps", channels_, 1,
                  bn::channel_maps{sums, count_rows_, a.variables[v]->local().data(),
                                   a.variables[v + 1]->local().data(),
                                   Args.scale ? a.variables[0]->local().data() : nullptr,
                                   Args.center ? a.variables[Args.scale ? 1 : 0]->local().data()
                                               : nullptr,
                                   static_cast<float>(Args.epsilon),
                                   static_cast<float>(Args.momentum),
                                   static_cast<float>(1.0 - Args.momentum), channels_,
                                   maps_.data()});
      B::for_each("batch_normalization", rows * channels_, 1,
                  bn::normalize_elements{x.local().data(), maps_.data(), channels_,
                                         y_.local().data(), xhat_.data()});
      return y_;
    }
    // gamma's and beta's gradients are this device's sums (the plan reduces them over the batch
    // axes); the input's uses the batch's, reduced here first.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>& g,
                             const pass_context&, Reduce& reduce) {
      namespace bn = backend::batch_normalization;
      op_gradients<B> out;
      const tensor& x = *a.operands[0];
      const std::size_t rows = B::rows(dy) * per_sample_ / channels_;
      const bool want_gamma = Args.scale && g.wants(0);
      const bool want_beta = Args.center && g.wants(Args.scale ? 1 : 0);
      grad_sums_ = sized<B>(grad_sums_store_, 1, 2 * channels_, "batch_normalization_dsums");
      B::for_each("batch_normalization_gradient_sums", channels_, rows,
                  bn::channel_gradient_sums{
                      dy.data(), xhat_.data(), rows, channels_, grad_sums_.data(),
                      want_gamma ? g.variables[0].data() : nullptr,
                      want_beta ? g.variables[Args.scale ? 1 : 0].data() : nullptr});
      if (!(a.wants_operand_gradients & 1u)) return out;
      if (training_)
        reduce.reduce_rows(grad_sums_, x.layout().dims[0].mask(), comm::reduce_op::sum);
      dx_ = sized<B>(dx_store_, B::rows(dy), B::cols(dy), "batch_normalization_dx");
      B::for_each("batch_normalization_gradient", rows * channels_, 1,
                  bn::input_gradient_elements{dy.data(), xhat_.data(), maps_.data(),
                                              training_ ? grad_sums_.data() : nullptr,
                                              count_rows_, channels_, dx_.data()});
      out.operands[0] = x.like(dx_);
      return out;
    }

   private:
    std::size_t channels_, per_sample_;
    std::array<variable<B>*, 4> vars_{};
    std::size_t count_ = 0;
    bool training_ = false;
    double count_rows_ = 0;
    matrix y_store_, xhat_store_, maps_store_, sums_store_, grad_sums_store_, dx_store_;
    matrix xhat_, maps_, sums_, grad_sums_, dx_;
    tensor y_;
  };
};

}  // namespace tessel::layers
