// Layers without variables: input, flatten, dropout, relu, softmax, activation, rescaling.
#pragma once

#include <string>

#include "../core/activations.hpp"
#include "../core/fixed_string.hpp"
#include "../core/layer_planner.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/elementwise.hpp"
#include "split_rows.hpp"

namespace tessel::layers {

// The model's input: the shape of one sample, as `keras.Input(shape=(28, 28, 1))`.
template <std::size_t... Dims>
struct input {
  static_assert(sizeof...(Dims) >= 1, "input: give the shape of one sample, e.g. input<784>");
  static_assert(((Dims > 0) && ...), "input: every dimension of a sample must be positive");
  static constexpr shape_value shape{Dims...};
};

// Common parts of layers that hold no variables.
struct stateless_layer {
  static constexpr bool has_variables = false;
  static constexpr bool accepts(const shape_value&) { return true; }
  static constexpr shape_value output_shape(const shape_value& in) { return in; }
  static constexpr std::size_t param_count(const shape_value&) { return 0; }
  // What the planner needs to know of the layer: a linear element-wise op unless overridden.
  static constexpr op_desc plan_op(std::string_view name) {
    return activation_op<activation_kind::linear>(name);
  }
};

// Flatten: (28, 28, 1) -> (784,). Samples are stored flat, so the data does not move.
template <fixed_string Name = "">
struct flatten : stateless_layer {
  static constexpr std::string_view class_name = "Flatten";
  static constexpr std::string_view base_name = "flatten";
  static constexpr name_string given_name{Name.view()};
  template <class... In>
  using on = node<flatten, In...>;
  static constexpr shape_value output_shape(const shape_value& in) {
    return shape_value{in.elements()};
  }
  static constexpr op_desc plan_op(std::string_view name) { return flatten_op(name); }
  // Keras's Flatten.get_config().
  static void keras_config(layers::keras_config& c) { c.field("data_format", "channels_last"); }
  template <class B>
  struct runtime {
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    // The same memory as (batch, features): the block keeps x's rows; its columns start where
    // x's first split dimension (the outer one, the only one flatten lets be split) starts.
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      const tensor& x = *a.operands[0];
      const shape_value& g = x.global_shape();
      const block& b = x.shard();
      std::size_t features = 1, local = 1, inner = 1;
      for (std::size_t d = 1; d < g.rank; ++d) {
        features *= g[d];
        local *= b.extent[d];
        if (d >= 2) inner *= g[d];
      }
      layout_value l = layout_value::replicated(2);
      l.dims[0] = x.layout().dims[0];
      if (g.rank >= 2) l.dims[1] = x.layout().dims[1];
      const std::size_t first_col = g.rank >= 2 ? b.offset[1] * inner : 0;
      y_ = tensor(shape_value{g[0], features}, l,
                  block{shape_value{b.offset[0], first_col}, shape_value{b.extent[0], local}},
                  x.local());
      return y_;
    }
    // The gradient is the same memory again, seen as the input's block.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      if (a.wants_operand_gradients & 1u) out.operands[0] = a.operands[0]->like(dy);
      return out;
    }
    tensor y_;
  };
};

struct dropout_args {
  long long seed = -1;  // -1: derived from the model's seed and the layer's name
  name_string name = "";
};

// Dropout (inverted), `dropout<0.4>` or `dropout<0.4, {.seed = 7, .name = "drop"}>`: in training,
// zero each element with probability `rate` and scale the rest by 1 / (1 - rate); identity in
// inference. The mask is keyed by (seed, step, global element index).
template <double Rate, dropout_args Args = dropout_args{}>
struct dropout : stateless_layer {
  static_assert(Rate >= 0.0 && Rate < 1.0,
                "dropout: rate must be in [0, 1) (Keras: Invalid value received for argument "
                "`rate`. Expected a float value between 0 and 1.)");
  static constexpr std::string_view class_name = "Dropout";
  static constexpr std::string_view base_name = "dropout";
  static constexpr name_string given_name = Args.name;
  // It draws from the model's random stream: the model's state holds the stream's counter.
  static constexpr bool draws_random = true;
  template <class... In>
  using on = node<dropout, In...>;
  static constexpr op_desc plan_op(std::string_view name) { return dropout_op(name); }
  // Keras's Dropout.get_config() (built when made).
  static void keras_config(layers::keras_config& c) {
    c.build_config = false;
    c.field("rate", Rate);
    if (Args.seed >= 0)
      c.field("seed", Args.seed);
    else
      c.null("seed");
    c.null("noise_shape");
  }
  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    runtime(const layer_info& info, variable_store<B>&, std::uint64_t seed)
        : stream_id_(random::hash_name(info.name.view())),
          seed_(Args.seed >= 0 ? static_cast<std::uint64_t>(Args.seed) : seed) {}
    using tensor = basic_dtensor<B>;
    // The mask is keyed by each element's global (row, column) index in the batch, from x's
    // block, so a device draws exactly its part of the mask one device would draw.
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context& ctx, Reduce&) {
      const tensor& x = *a.operands[0];
      if (!ctx.training || Rate == 0.0) return x;
      key_ = columns_of(x);
      y_ = sized_like<B>(x, y_store_, "dropout");
      B::dropout(x.local(), y_.local(), stream(ctx), static_cast<float>(Rate), key_.first_row,
                 key_.first_col, key_.global_cols);
      return y_;
    }
    // The gradient through the same mask, in place on dy.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context& ctx, Reduce&) {
      op_gradients<B> out;
      if (!(a.wants_operand_gradients & 1u)) return out;
      if (ctx.training && Rate != 0.0)
        B::dropout(dy, dy, stream(ctx), static_cast<float>(Rate), key_.first_row, key_.first_col,
                   key_.global_cols);
      out.operands[0] = a.operands[0]->like(dy);
      return out;
    }

   private:
    random::stream stream(const pass_context& ctx) const {
      return random::stream(seed_, stream_id_, ctx.step);
    }
    // Where x's block lies in the batch seen as (rows, features): its first row, first feature
    // and the features of a sample. A block of a rank-3+ tensor split past its first feature
    // dimension is not one range of features: refused.
    struct mask_key {
      std::uint64_t first_row = 0, first_col = 0, global_cols = 1;
    };
    static mask_key columns_of(const tensor& x) {
      const shape_value& g = x.global_shape();
      const block& b = x.shard();
      mask_key k{b.offset[0], 0, 1};
      std::uint64_t inner = 1;
      for (std::size_t d = g.rank; d-- > 1;) {
        if (d >= 2 && (b.offset[d] != 0 || b.extent[d] != g[d]))
          throw value_error("dropout: a block split along dimension " + std::to_string(d) +
                            " of shape " + to_string(g) +
                            " has no single range of features; flatten first or split only "
                            "the batch and the first feature dimension");
        if (d == 1) k.first_col = b.offset[1] * inner;
        inner *= g[d];
      }
      k.global_cols = inner;
      return k;
    }
    std::uint64_t stream_id_, seed_;
    matrix y_store_;
    tensor y_;
    mask_key key_{};
  };
};

// An element-wise activation as a layer (Keras's Activation, ReLU and Softmax layers).
template <activation_kind A, fixed_string ClassName, fixed_string BaseName, fixed_string Name>
struct activation_layer : stateless_layer {
  static constexpr std::string_view class_name = ClassName;
  static constexpr std::string_view base_name = BaseName;
  static constexpr name_string given_name{Name.view()};
  template <class... In>
  using on = node<activation_layer, In...>;
  static constexpr op_desc plan_op(std::string_view name) { return activation_op<A>(name); }
  // Keras's ReLU, Softmax and Activation get_config() (built when made).
  static void keras_config(layers::keras_config& c) {
    c.build_config = false;
    if constexpr (ClassName.view() == "ReLU") {
      c.null("max_value");
      c.field("negative_slope", 0.0);
      c.field("threshold", 0.0);
    } else if constexpr (ClassName.view() == "Softmax") {
      c.field("axis", -1);
    } else {
      c.field("activation", activation_name(A));
    }
  }
  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    // A softmax over a block whose classes are split across devices completes its rows with the
    // row reductions the plan lists (`reduce`, layers/split_rows.hpp).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce& reduce) {
      const tensor& x = *a.operands[0];
      y_ = sized_like<B>(x, y_store_, "activation");
      B::copy(x.local(), y_.local());
      if (splits(y_, reduce))
        split_softmax_forward(y_, stats_, reduce);
      else
        B::activation_forward(A, y_.local());
      return y_;
    }
    // In place on dy.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce& reduce) {
      op_gradients<B> out;
      if (!(a.wants_operand_gradients & 1u)) return out;
      if (splits(y_, reduce))
        split_softmax_backward(y_, dy, dy, stats_, reduce);
      else
        B::activation_backward(A, y_.local(), dy, dy);
      out.operands[0] = a.operands[0]->like(dy);
      return out;
    }

   private:
    template <class Reduce>
    static bool splits(const tensor& y, const Reduce& reduce) {
      return A == activation_kind::softmax && reduce.moves(class_axes(y.layout()));
    }
    matrix y_store_;
    tensor y_;
    row_statistics<B> stats_;
  };
};

template <fixed_string Name = "">
using relu = activation_layer<activation_kind::relu, "ReLU", "re_lu", Name>;
template <fixed_string Name = "">
using softmax = activation_layer<activation_kind::softmax, "Softmax", "softmax", Name>;
template <fixed_string Fn, fixed_string Name = "">
struct activation
    : activation_layer<activation_from_name(Fn.view()), "Activation", "activation", Name> {
  static_assert(is_activation_name(Fn.view()),
                "activation: unknown activation; use linear, relu, sigmoid, tanh or softmax");
};

struct rescaling_args {
  double offset = 0.0;
  name_string name = "";
};

// Rescaling: y = x * scale + offset (`rescaling<1.0 / 255>`, `rescaling<2.0, {.offset = -1}>`).
template <double Scale, rescaling_args Args = rescaling_args{}>
struct rescaling : stateless_layer {
  static constexpr std::string_view class_name = "Rescaling";
  static constexpr std::string_view base_name = "rescaling";
  static constexpr name_string given_name = Args.name;
  template <class... In>
  using on = node<rescaling, In...>;
  // Keras's Rescaling.get_config().
  static void keras_config(layers::keras_config& c) {
    c.field("scale", Scale);
    c.field("offset", Args.offset);
  }
  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      const tensor& x = *a.operands[0];
      y_ = sized_like<B>(x, y_store_, "rescaling");
      B::scale_shift(x.local(), y_.local(), static_cast<float>(Scale),
                     static_cast<float>(Args.offset));
      return y_;
    }
    // In place on dy.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      if (!(a.wants_operand_gradients & 1u)) return out;
      B::scale_shift(dy, dy, static_cast<float>(Scale), 0.0f);
      out.operands[0] = a.operands[0]->like(dy);
      return out;
    }

   private:
    matrix y_store_;
    tensor y_;
  };
};

}  // namespace tessel::layers
