// The convolutional layers, channels last (NHWC) as Keras: conv2d (Keras's Conv2D, through one
// GEMM on the im2col matrix), max_pooling2d, average_pooling2d and global_average_pooling2d.
// Their arithmetic is backend/convolution_bodies.hpp's, which the backend runs through its
// for_each; the GEMMs are the backend's.
//
//   conv2d<12, 3, {.padding = "same", .use_bias = false}>
//   conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>
//   conv2d<8, {2, 3}, {.strides = {1, 2}}>           a rectangular kernel and strides
//   max_pooling2d<2>, average_pooling2d<3, {.strides = 2, .padding = "same"}>
//   global_average_pooling2d<>
#pragma once

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <string_view>

#include "../backend/convolution_bodies.hpp"
#include "../core/activations.hpp"
#include "../core/errors.hpp"
#include "../core/fixed_string.hpp"
#include "keras_config.hpp"
#include "layer.hpp"
#include "node.hpp"
#include "op.hpp"
#include "plan/convolution.hpp"

namespace tessel::layers {

// A size in height and width: one number for a square (`3`), or two (`{2, 3}`), as Keras takes
// kernel_size, strides and pool_size.
struct size2d {
  std::size_t h = 1, w = 1;
  constexpr size2d(std::size_t n) : h(n), w(n) {}  // NOLINT: implicit, as Keras's int
  constexpr size2d(std::size_t height, std::size_t width) : h(height), w(width) {}
};

constexpr bool is_padding_name(std::string_view p) { return p == "valid" || p == "same"; }

// Keras's Conv2D arguments, by the same names.
struct conv2d_args {
  size2d strides = 1;
  fixed_string<8> padding = "valid";
  fixed_string<16> activation = "linear";
  bool use_bias = true;
  fixed_string<24> kernel_initializer = "glorot_uniform";
  fixed_string<24> bias_initializer = "zeros";
  name_string name = "";
};

namespace detail {
template <class B>
void check_dense_rows(const typename B::matrix& m, const char* layer) {
  if (B::rows(m) > 1 && m.stride(0) != B::cols(m))
    throw value_error(std::string(layer) + ": its input's rows are not contiguous");
}
// The geometry of a window over x's local block (samples of `in`: height, width, channels).
template <class B>
backend::convolution::geometry geometry_of(const typename B::matrix& x, const shape_value& in,
                                           const layer_rules::window2d& w) {
  return backend::convolution::make_geometry(B::rows(x), in[0], in[1], in[2], w.kh, w.kw, w.sh,
                                             w.sw, w.same);
}
}  // namespace detail

template <std::size_t Filters, size2d KernelSize, conv2d_args Args = conv2d_args{}>
struct conv2d {
  static_assert(Filters > 0, "conv2d: filters must be positive");
  static_assert(KernelSize.h > 0 && KernelSize.w > 0, "conv2d: kernel_size must be positive");
  static_assert(Args.strides.h > 0 && Args.strides.w > 0, "conv2d: strides must be positive");
  static_assert(is_padding_name(Args.padding.view()),
                "conv2d: unknown padding; use \"valid\" or \"same\"");
  static_assert(is_activation_name(Args.activation.view()) &&
                    activation_from_name(Args.activation.view()) != activation_kind::softmax,
                "conv2d: unknown activation; use linear, relu, sigmoid or tanh");
  static constexpr std::string_view class_name = "Conv2D";
  static constexpr std::string_view base_name = "conv2d";
  static constexpr name_string given_name = Args.name;
  static constexpr bool has_variables = true;
  template <class... In>
  using on = node<conv2d, In...>;
  static constexpr activation_kind activation = activation_from_name(Args.activation.view());
  static constexpr layer_rules::window2d window{KernelSize.h, KernelSize.w, Args.strides.h,
                                                Args.strides.w, Args.padding.view() == "same"};

  // (height, width, channels) samples, at least the kernel's size under "valid" padding.
  static constexpr bool accepts(const shape_value& in) {
    return in.rank == 3 && in[2] > 0 &&
           (window.same || (in[0] >= window.kh && in[1] >= window.kw));
  }
  static constexpr std::string_view input_requirement(const shape_value& in) {
    return in.rank != 3 ? "conv2d takes (height, width, channels) samples"
                        : "conv2d: the kernel is larger than its valid-padded input";
  }
  static constexpr shape_value output_shape(const shape_value& in) {
    return shape_value{window.out_h(in[0]), window.out_w(in[1]), Filters};
  }
  static constexpr std::size_t param_count(const shape_value& in) {
    return window.kh * window.kw * in[2] * Filters + (Args.use_bias ? Filters : 0);
  }
  static constexpr op_desc plan_op(std::string_view name) {
    return conv2d_op<{.filters = Filters, .window = window, .use_bias = Args.use_bias,
                      .activation = activation}>(name);
  }
  // Keras's Conv2D.get_config().
  static void keras_config(layers::keras_config& c) {
    c.field("filters", Filters);
    c.field("kernel_size", {window.kh, window.kw});
    c.field("strides", {window.sh, window.sw});
    c.field("padding", Args.padding.view());
    c.field("data_format", "channels_last");
    c.field("dilation_rate", {1, 1});
    c.field("groups", 1);
    c.field("activation", Args.activation.view());
    c.field("use_bias", Args.use_bias);
    c.initializer("kernel_initializer", Args.kernel_initializer.view());
    c.initializer("bias_initializer", Args.bias_initializer.view());
    for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                          "kernel_constraint", "bias_constraint"})
      c.null(k);
  }

  template <class B>
  class runtime {
   public:
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    // The kernel (kh, kw, in, filters), then the bias: Keras's order.
    runtime(const layer_info& info, variable_store<B>& vars, std::uint64_t seed)
        : in_(info.input), out_(info.output) {
      const std::string name(info.name.view());
      vars_[0] = &add_variable(vars, name + "/kernel", {window.kh, window.kw, in_[2], Filters},
                               std::string(Args.kernel_initializer.view()), seed);
      if constexpr (Args.use_bias)
        vars_[1] = &add_variable(vars, name + "/bias", {Filters},
                                 std::string(Args.bias_initializer.view()), seed);
    }
    std::span<variable<B>* const> variables() const noexcept {
      return {vars_.data(), Args.use_bias ? 2u : 1u};
    }

    // y = activation(im2col(x) @ kernel + bias), the im2col matrix kept for the backward pass.
    // On the blocks this device holds: the input's channels and the kernel's filters may be
    // split (the plan's layouts), so the sizes come from the blocks. A result partial over the
    // input channels' axes gets the bias on the devices that add constants, and its activation
    // waits for the output (finish).
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce& reduce) {
      const tensor& x = *a.operands[0];
      detail::check_dense_rows<B>(x.local(), "conv2d");
      const tensor& k = *a.variables[0];
      channels_ = k.shard().extent[2];
      filters_ = k.shard().extent[3];
      g_ = backend::convolution::make_geometry(B::rows(x.local()), in_[0], in_[1], channels_,
                                               window.kh, window.kw, window.sh, window.sw,
                                               window.same);
      cols_ = sized<B>(cols_store_, g_.out_rows(), g_.patch(), "conv2d_im2col");
      const bool bias = Args.use_bias && a.adds_constants;
      if (a.layouts == nullptr) {
        y_ = rows_of<B>(x, out_, y_store_, "conv2d");
      } else {
        y_ = reduce.make(shape_value{x.global_shape()[0], out_[0], out_[1], Filters},
                         a.layouts->result, y_store_, "conv2d");
      }
      const matrix kernel = as_kernel(k.local()), y = pixels(y_.local());
      for_blocks([&](std::size_t b0, const backend::convolution::geometry& g) {
        const std::size_t r0 = b0 * pixels_per_sample(), r1 = r0 + g.out_rows();
        B::for_each("conv2d_im2col", g.out_rows(), g.patch(),
                    backend::convolution::im2col_rows{g, x.local().data() + b0 * B::cols(x.local()),
                                                      cols_.data() + r0 * g.patch()});
        B::gemm_bias_activation(B::row_range(cols_, r0, r1), kernel,
                                bias ? a.variables[1]->local() : matrix(),
                                a.whole ? activation : activation_kind::linear,
                                B::row_range(y, r0, r1));
      });
      return y_;
    }
    // The activation on the output, where the result was resharded first.
    template <class Reduce>
    void finish(const tensor& y, const pass_context&, Reduce&) {
      B::activation_forward(activation, y.local());
    }
    template <class Reduce>
    void finish_backward(const tensor& y, const matrix& dy, const pass_context&, Reduce&) {
      B::activation_backward(activation, y.local(), dy, dy);
    }
    // From dy (the result's gradient; the output's when whole, the activation's gradient then
    // taken here first, fused with the bias's): the kernel's gradient cols^T dz, and the input's
    // col2im(dz kernel^T), partial over the filters' axes where the filters are split.
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>& grads,
                             const pass_context&, Reduce& reduce) {
      op_gradients<B> out;
      const matrix dz = pixels(dy);
      const matrix db = Args.use_bias && grads.wants(1) ? grads.variables[1] : matrix();
      if (a.whole) B::activation_backward_bias(activation, pixels(y_.local()), dz, dz, db);
      else if (db.data() != nullptr) B::column_sums(dz, db);
      if (grads.wants(0))
        B::gemm(true, false, 1.0f, cols_, dz, 0.0f, as_kernel(grads.variables[0]));
      if (a.wants_operand_gradients & 1u) {
        const tensor& x = *a.operands[0];
        const tensor dx =
            a.layouts == nullptr
                ? x.like(sized<B>(dx_store_, B::rows(x.local()), B::cols(x.local()), "conv2d_dx"))
                : reduce.make(x.global_shape(), with_partial(x.layout(), a.layouts->variables[0]),
                              dx_store_, "conv2d_dx");
        const matrix kernel = as_kernel(a.variables[0]->local());
        dcols_ = sized<B>(dcols_store_, block_samples() * pixels_per_sample(), g_.patch(),
                          "conv2d_dcols");
        for_blocks([&](std::size_t b0, const backend::convolution::geometry& g) {
          const std::size_t r0 = b0 * pixels_per_sample();
          const matrix dcols = B::alias(dcols_, 0, g.out_rows(), g.patch());
          B::gemm(false, true, 1.0f, B::row_range(dz, r0, r0 + g.out_rows()), kernel, 0.0f,
                  dcols);
          B::for_each("conv2d_col2im", g.in_size(), window.kh * window.kw,
                      backend::convolution::col2im_elements{
                          g, dcols.data(), dx.local().data() + b0 * B::cols(x.local())});
        });
        out.operands[0] = dx;
      }
      return out;
    }

   private:
    // The im2col matrix goes through the GEMMs in blocks of whole samples, each as large as the
    // backend's cache_block_bytes allows where it names one (the host: each block's im2col rows
    // are still in cache when the forward's GEMM reads them, and the input's gradient's dcols
    // block when col2im reads it, instead of the whole matrix, 8 MB for the seed's second
    // convolution at batch 32, going out to memory and back), else all at once (a GPU: one
    // launch each).
    std::size_t pixels_per_sample() const { return g_.h.out * g_.w.out; }
    std::size_t block_samples() const {
      const std::size_t all = std::max<std::size_t>(g_.batch, 1);
      if constexpr (requires { B::cache_block_bytes; }) {
        const std::size_t bytes = pixels_per_sample() * g_.patch() * sizeof(float);
        return std::clamp<std::size_t>(B::cache_block_bytes / std::max<std::size_t>(bytes, 1), 1,
                                       all);
      } else {
        return all;
      }
    }
    // f(first sample, the block's geometry) for each block, in order.
    template <class F>
    void for_blocks(F&& f) const {
      const std::size_t step = block_samples();
      for (std::size_t b0 = 0; b0 < g_.batch; b0 += step) {
        backend::convolution::geometry g = g_;
        g.batch = std::min(step, g_.batch - b0);
        f(b0, g);
      }
    }
    // The input's gradient's layout: the input's as used, partial over the kernel's filter axes.
    static layout_value with_partial(layout_value x, const layout_value& kernel) {
      x.partial = kernel.dims[3].mask();
      return x;
    }
    // The output's rows (N, oh ow filters) as N oh ow rows of this device's filters: the GEMM's
    // view.
    matrix pixels(const matrix& m) const {
      return B::alias(m, 0, B::rows(m) * out_[0] * out_[1], filters_);
    }
    // The kernel's block (kh, kw, in, filters), stored as kh rows, as the (kh kw in) x filters
    // matrix.
    matrix as_kernel(const matrix& k) const {
      return B::alias(k, 0, B::rows(k) * B::cols(k) / filters_, filters_);
    }

    shape_value in_, out_;
    std::size_t channels_ = 0, filters_ = Filters;  // this device's blocks'
    std::array<variable<B>*, 2> vars_{};
    backend::convolution::geometry g_{};
    matrix cols_store_, dcols_store_, y_store_, dx_store_, cols_, dcols_;
    tensor y_;
  };
};

// Keras's MaxPooling2D and AveragePooling2D arguments: strides default to the pool size.
struct pooling2d_args {
  size2d strides = 0;  // 0: the pool size
  fixed_string<8> padding = "valid";
  name_string name = "";
};

namespace detail {
// A pooling layer's run time, max or average (Max), over a window fixed when the layer is made:
// the pooling layers' own, or the whole image for global average pooling.
template <class B, bool Max>
class pool_runtime {
 public:
  using matrix = typename B::matrix;
  using tensor = basic_dtensor<B>;
  pool_runtime(const layer_info& info, const layer_rules::window2d& window)
      : in_(info.input), out_(info.output), window_(window) {}
  template <class Reduce>
  const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
    const tensor& x = *a.operands[0];
    check_dense_rows<B>(x.local(), "pooling");
    g_ = geometry_of<B>(x.local(), in_, window_);
    y_ = rows_of<B>(x, out_, y_store_, "pooling");
    const std::size_t n = g_.out_rows() * g_.channels, cost = window_.kh * window_.kw;
    if constexpr (Max)
      B::for_each("max_pooling2d", n, cost,
                  backend::convolution::max_pool_elements{g_, x.local().data(), y_.local().data()});
    else
      B::for_each("average_pooling2d", n, cost,
                  backend::convolution::average_pool_elements{g_, x.local().data(),
                                                              y_.local().data()});
    return y_;
  }
  template <class Reduce>
  op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                           const pass_context&, Reduce&) {
    op_gradients<B> out;
    if (!(a.wants_operand_gradients & 1u)) return out;
    const tensor& x = *a.operands[0];
    matrix dx = sized<B>(dx_store_, B::rows(x.local()), B::cols(x.local()), "pooling_dx");
    if constexpr (Max)
      B::for_each("max_pooling2d_gradient", g_.in_size(), 2 * window_.kh * window_.kw,
                  backend::convolution::max_pool_gradient_elements{g_, x.local().data(),
                                                                   dy.data(), dx.data()});
    else
      B::for_each("average_pooling2d_gradient", g_.in_size(), window_.kh * window_.kw,
                  backend::convolution::average_pool_gradient_elements{g_, dy.data(),
                                                                       dx.data()});
    out.operands[0] = x.like(dx);
    return out;
  }

 private:
  shape_value in_, out_;
  layer_rules::window2d window_;
  backend::convolution::geometry g_{};
  matrix y_store_, dx_store_;
  tensor y_;
};

// A pooling layer: Max picks max or average pooling.
template <bool Max, size2d Pool, pooling2d_args Args>
struct pooling2d {
  static_assert(Pool.h > 0 && Pool.w > 0, "pooling: pool_size must be positive");
  static_assert(is_padding_name(Args.padding.view()),
                "pooling: unknown padding; use \"valid\" or \"same\"");
  static constexpr bool has_variables = false;
  static constexpr layer_rules::window2d window{
      Pool.h, Pool.w, Args.strides.h == 0 ? Pool.h : Args.strides.h,
      Args.strides.w == 0 ? Pool.w : Args.strides.w, Args.padding.view() == "same"};
  static constexpr bool accepts(const shape_value& in) {
    return in.rank == 3 && (window.same || (in[0] >= window.kh && in[1] >= window.kw));
  }
  static constexpr std::string_view input_requirement(const shape_value& in) {
    return in.rank != 3 ? "pooling takes (height, width, channels) samples"
                        : "pooling: the window is larger than its valid-padded input";
  }
  static constexpr shape_value output_shape(const shape_value& in) {
    return shape_value{window.out_h(in[0]), window.out_w(in[1]), in[2]};
  }
  static constexpr std::size_t param_count(const shape_value&) { return 0; }
  static constexpr op_desc plan_op(std::string_view name) { return pooling2d_op<window>(name); }
  // Keras's MaxPooling2D / AveragePooling2D.get_config() (built when made).
  static void keras_config(layers::keras_config& c) {
    c.build_config = false;
    c.field("pool_size", {window.kh, window.kw});
    c.field("padding", Args.padding.view());
    c.field("strides", {window.sh, window.sw});
    c.field("data_format", "channels_last");
  }

  template <class B>
  struct runtime : pool_runtime<B, Max> {
    runtime(const layer_info& info, variable_store<B>&, std::uint64_t)
        : pool_runtime<B, Max>(info, window) {}
  };
};
}  // namespace detail

template <size2d Pool, pooling2d_args Args = pooling2d_args{}>
struct max_pooling2d : detail::pooling2d<true, Pool, Args> {
  static constexpr std::string_view class_name = "MaxPooling2D";
  static constexpr std::string_view base_name = "max_pooling2d";
  static constexpr name_string given_name = Args.name;
  template <class... In>
  using on = node<max_pooling2d, In...>;
};
template <size2d Pool, pooling2d_args Args = pooling2d_args{}>
struct average_pooling2d : detail::pooling2d<false, Pool, Args> {
  static constexpr std::string_view class_name = "AveragePooling2D";
  static constexpr std::string_view base_name = "average_pooling2d";
  static constexpr name_string given_name = Args.name;
  template <class... In>
  using on = node<average_pooling2d, In...>;
};

// Keras's GlobalAveragePooling2D: (H, W, C) samples to (C): each channel's mean over the image.
template <fixed_string Name = "">
struct global_average_pooling2d {
  static constexpr std::string_view class_name = "GlobalAveragePooling2D";
  static constexpr std::string_view base_name = "global_average_pooling2d";
  static constexpr name_string given_name{Name.view()};
  static constexpr bool has_variables = false;
  template <class... In>
  using on = node<global_average_pooling2d, In...>;
  static constexpr bool accepts(const shape_value& in) { return in.rank == 3; }
  static constexpr std::string_view input_requirement(const shape_value&) {
    return "pooling takes (height, width, channels) samples";
  }
  static constexpr shape_value output_shape(const shape_value& in) { return shape_value{in[2]}; }
  static constexpr std::size_t param_count(const shape_value&) { return 0; }
  static constexpr op_desc plan_op(std::string_view name) {
    return global_average_pooling2d_op(name);
  }
  // Keras's GlobalAveragePooling2D.get_config() (built when made).
  static void keras_config(layers::keras_config& c) {
    c.build_config = false;
    c.field("data_format", "channels_last");
    c.field("keepdims", false);
  }

  // Average pooling with one window over the whole image.
  template <class B>
  struct runtime : detail::pool_runtime<B, false> {
    runtime(const layer_info& info, variable_store<B>&, std::uint64_t)
        : detail::pool_runtime<B, false>(info, {info.input[0], info.input[1], 1, 1, false}) {}
  };
};

}  // namespace tessel::layers
