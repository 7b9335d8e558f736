// Merge layers: add and concatenate, the joins of a functional model's branches (Keras's Add and
// Concatenate). Each takes two or more inputs: `add<"sum">::on<x, h>`.
#pragma once

#include <cstddef>
#include <string_view>

#include "../core/fixed_string.hpp"
#include "../core/model_plan.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/merge.hpp"

namespace tessel::layers {

// What the merge layers share: no variables, two to max_op_inputs inputs.
struct merge_layer {
  static constexpr bool has_variables = false;
  static constexpr std::size_t min_inputs = 2, max_inputs = max_op_inputs;
  static constexpr bool accepts(const shape_value&) { return true; }
  static constexpr std::size_t param_count(const shape_value&) { return 0; }
};

// Add: the element-wise sum of inputs of one shape (a residual connection's join).
template <fixed_string Name = "">
struct add : merge_layer {
  static constexpr std::string_view class_name = "Add";
  static constexpr std::string_view base_name = "add";
  static constexpr name_string given_name{Name.view()};
  template <class... In>
  using on = node<add, In...>;
  // The first input whose shape differs from input 0's (n: none).
  static constexpr std::size_t mismatch(const shape_value* in, std::size_t n) {
    for (std::size_t k = 1; k < n; ++k)
      if (!(in[k] == in[0])) return k;
    return n;
  }
  static constexpr shape_value merged_shape(const shape_value* in, std::size_t) { return in[0]; }
  static constexpr op_desc plan_op(std::string_view name) { return add_op(name); }
  // Keras's Add.get_config(): the common fields alone.
  static void keras_config(layers::keras_config&) {}

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    // The operands come in one layout (the plan reshards them to input 0's, complete).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      const tensor& x = *a.operands[0];
      y_ = sized_like<B>(x, y_store_, "add");
      B::add(x.local(), a.operands[1]->local(), y_.local());
      for (std::size_t k = 2; k < a.operand_count; ++k)
        B::add(y_.local(), a.operands[k]->local(), y_.local());
      return y_;
    }
    // Every operand's gradient is dy (the executor gives each reader its own copy).
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      for (std::size_t k = 0; k < a.operand_count; ++k)
        if ((a.wants_operand_gradients >> k) & 1u) out.operands[k] = a.operands[k]->like(dy);
      return out;
    }

   private:
    matrix y_store_;
    tensor y_;
  };
};

// Concatenate along the last axis (Keras's default, axis=-1): inputs whose shapes agree but for
// the last axis.
template <fixed_string Name = "">
struct concatenate : merge_layer {
  static constexpr std::string_view class_name = "Concatenate";
  static constexpr std::string_view base_name = "concatenate";
  static constexpr name_string given_name{Name.view()};
  template <class... In>
  using on = node<concatenate, In...>;
  static constexpr std::size_t mismatch(const shape_value* in, std::size_t n) {
    for (std::size_t k = 1; k < n; ++k) {
      if (in[k].rank != in[0].rank) return k;
      for (std::size_t d = 0; d + 1 < in[0].rank; ++d)
        if (in[k][d] != in[0][d]) return k;
    }
    return n;
  }
  static constexpr shape_value merged_shape(const shape_value* in, std::size_t n) {
    shape_value out = in[0];
    for (std::size_t k = 1; k < n; ++k) out.extents[out.rank - 1] += in[k][in[k].rank - 1];
    return out;
  }
  static constexpr op_desc plan_op(std::string_view name) { return concatenate_op(name); }
  // Keras's Concatenate.get_config() (tessel joins on the last axis).
  static void keras_config(layers::keras_config& c) { c.field("axis", -1); }

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    // Each sample's features side by side. The plan leaves the last axis whole on every device
    // (the operands' rows are this device's rows).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      const tensor& x = *a.operands[0];
      std::size_t cols = 0;
      for (std::size_t k = 0; k < a.operand_count; ++k) cols += B::cols(a.operands[k]->local());
      const std::size_t rows = B::rows(x.local());
      shape_value global = x.global_shape(), extent = x.shard().extent;
      for (std::size_t k = 1; k < a.operand_count; ++k)
        global.extents[global.rank - 1] +=
            a.operands[k]->global_shape()[a.operands[k]->global_shape().rank - 1];
      extent.extents[global.rank - 1] = global[global.rank - 1];
      y_ = tensor(global, x.layout(), block{x.shard().offset, extent},
                  sized<B>(y_store_, rows, cols, "concatenate"));
      std::size_t first = 0;
      for (std::size_t k = 0; k < a.operand_count; ++k) {
        const matrix& in = a.operands[k]->local();
        B::copy_columns(in, 0, y_.local(), first, B::cols(in));
        first += B::cols(in);
      }
      return y_;
    }
    // Each operand's gradient is its columns of dy.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      std::size_t first = 0;
      for (std::size_t k = 0; k < a.operand_count; ++k) {
        const tensor& in = *a.operands[k];
        const std::size_t cols = B::cols(in.local());
        if ((a.wants_operand_gradients >> k) & 1u) {
          matrix g = sized<B>(grad_stores_[k], B::rows(dy), cols, "concatenate_gradient");
          B::copy_columns(dy, first, g, 0, cols);
          out.operands[k] = in.like(g);
        }
        first += cols;
      }
      return out;
    }

   private:
    matrix y_store_;
    tensor y_;
    std::array<matrix, max_op_inputs> grad_stores_;
  };
};

}  // namespace tessel::layers
