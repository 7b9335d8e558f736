// Convolution and pooling bodies, written once for the host and CUDA backends (compiled by g++ and
// by nvcc, as backend/kernel_bodies.hpp's are): the window arithmetic of Keras's "valid" and
// "same" padding, the im2col gather that turns a 2-D convolution into one GEMM, its inverse for
// the input's gradient (a gather too: each input element sums the patch entries it appears in,
// in a fixed order, so no two threads write one element and the bits never depend on threads),
// and max and average pooling with their gradients in the same gather form.
//
// Layout: channels last, as Keras (NHWC), each array dense: element (b, y, x, c) of an
// (N, H, W, C) array at ((b H + y) W + x) C + c. A convolution's kernel is Keras's
// (kh, kw, C, filters), which read as a (kh kw C) x filters matrix multiplies the im2col matrix:
// row (b, oy, ox), column (ky kw + kx) C + c. So
//   y (N oh ow x filters) = cols (N oh ow x kh kw C) @ kernel,
//   dkernel = cols^T @ dy,  dcols = dy @ kernel^T,  dx = col2im(dcols).
#pragma once

#include <cstddef>

#include "kernel_bodies.hpp"

namespace tessel::backend::convolution {

// One spatial dimension of a window (a convolution's kernel or a pooling window) sliding over
// an input of `in` with `stride`: its output size and the padding before the input. "same"
// follows jax.lax.padtype_to_pads (what Keras runs): out = ceil(in / stride), total padding
// max((out - 1) stride + size - in, 0), the odd one at the end (after). "valid": no padding,
// out = (in - size) / stride + 1 (0 when the window is larger than the input).
struct window {
  std::size_t in = 0, size = 1, stride = 1, before = 0, out = 0;
};
constexpr window make_window(std::size_t in, std::size_t size, std::size_t stride, bool same) {
  window w{in, size, stride, 0, 0};
  if (same) {
    w.out = (in + stride - 1) / stride;
    const std::size_t span = (w.out == 0 ? 0 : (w.out - 1) * stride) + size;
    w.before = span > in ? (span - in) / 2 : 0;
  } else {
    w.out = in >= size ? (in - size) / stride + 1 : 0;
  }
  return w;
}

// A 2-D window over an (N, H, W, C) input.
struct geometry {
  std::size_t batch = 0, channels = 0;
  window h, w;
  // The im2col matrix's columns (kh kw C) and rows (N oh ow); the input's elements.
  TESSEL_KERNEL_BODY std::size_t patch() const { return h.size * w.size * channels; }
  TESSEL_KERNEL_BODY std::size_t out_rows() const { return batch * h.out * w.out; }
  TESSEL_KERNEL_BODY std::size_t in_size() const { return batch * h.in * w.in * channels; }
};
constexpr geometry make_geometry(std::size_t batch, std::size_t height, std::size_t width,
                                 std::size_t channels, std::size_t kh, std::size_t kw,
                                 std::size_t sh, std::size_t sw, bool same) {
  return {batch, channels, make_window(height, kh, sh, same), make_window(width, kw, sw, same)};
}

// The input position a window offset k reaches from output position o, or false where it falls
// in the padding.
TESSEL_KERNEL_BODY bool input_at(const window& d, std::size_t o, std::size_t k, std::size_t& i) {
  const std::size_t p = o * d.stride + k;  // in the padded input
  if (p < d.before || p - d.before >= d.in) return false;
  i = p - d.before;
  return true;
}

// ---- convolution -------------------------------------------------------------------------------
// Element `col` of im2col row `row` (row: (b, oy, ox); col: (ky, kx, c)): the input under that
// kernel tap, 0 in the padding.
TESSEL_KERNEL_BODY float im2col_value(const geometry& g, const float* x, std::size_t row,
                                      std::size_t col) {
  const std::size_t c = col % g.channels, tap = col / g.channels;
  const std::size_t kx = tap % g.w.size, ky = tap / g.w.size;
  const std::size_t ox = row % g.w.out, oy = (row / g.w.out) % g.h.out;
  const std::size_t b = row / (g.w.out * g.h.out);
  std::size_t iy = 0, ix = 0;
  if (!input_at(g.h, oy, ky, iy) || !input_at(g.w, ox, kx, ix)) return 0.0f;
  return x[((b * g.h.in + iy) * g.w.in + ix) * g.channels + c];
}
// One whole row of the im2col matrix, into out[0, patch()).
TESSEL_KERNEL_BODY void im2col_row(const geometry& g, const float* x, std::size_t row,
                                   float* out) {
  const std::size_t ox = row % g.w.out, oy = (row / g.w.out) % g.h.out;
  const std::size_t b = row / (g.w.out * g.h.out);
  for (std::size_t ky = 0; ky < g.h.size; ++ky)
    for (std::size_t kx = 0; kx < g.w.size; ++kx) {
      float* dst = out + (ky * g.w.size + kx) * g.channels;
      std::size_t iy = 0, ix = 0;
      if (input_at(g.h, oy, ky, iy) && input_at(g.w, ox, kx, ix)) {
        const float* src = x + ((b * g.h.in + iy) * g.w.in + ix) * g.channels;
        for (std::size_t c = 0; c < g.channels; ++c) dst[c] = src[c];
      } else {
        for (std::size_t c = 0; c < g.channels; ++c) dst[c] = 0.0f;
      }
    }
}

// The output positions along one dimension whose window covers input position i: o with
// o stride + k = i + before for a tap k in [0, size). Calls f(o, k) for each, o ascending.
template <class F>
TESSEL_KERNEL_BODY void covering(const window& d, std::size_t i, F&& f) {
  const std::size_t p = i + d.before;  // in the padded input
  // o stride <= p and o stride > p - size
  const std::size_t first = p + 1 > d.size ? (p + 1 - d.size + d.stride - 1) / d.stride : 0;
  for (std::size_t o = first; o < d.out && o * d.stride <= p; ++o) f(o, p - o * d.stride);
}

// The windows that cover input element `index` (b, iy, ix, c) of x: calls f(row, tap, c) for
// each, row the output pixel (b, oy, ox) whose window covers it and tap its kernel offset
// ky kw + kx there, rows ascending, then taps. The gather every gradient below sums over.
template <class F>
TESSEL_KERNEL_BODY void covering_windows(const geometry& g, std::size_t index, F&& f) {
  const std::size_t c = index % g.channels, ix = (index / g.channels) % g.w.in;
  const std::size_t iy = (index / (g.channels * g.w.in)) % g.h.in;
  const std::size_t b = index / (g.channels * g.w.in * g.h.in);
  covering(g.h, iy, [&](std::size_t oy, std::size_t ky) {
    covering(g.w, ix, [&](std::size_t ox, std::size_t kx) {
      f((b * g.h.out + oy) * g.w.out + ox, ky * g.w.size + kx, c);
    });
  });
}

// The input's gradient at element `index` of x from dcols = dy @ kernel^T (N oh ow x patch,
// rows `ld` apart): the sum of the entries that im2col copied from it.
TESSEL_KERNEL_BODY float col2im_value(const geometry& g, const float* dcols, std::size_t ld,
                                      std::size_t index) {
  float s = 0.0f;
  covering_windows(g, index, [&](std::size_t row, std::size_t tap, std::size_t c) {
    s += dcols[row * ld + tap * g.channels + c];
  });
  return s;
}

// ---- pooling -----------------------------------------------------------------------------------
// Pooling windows run over each channel alone; the padding holds no values (max ignores it,
// the average divides by the values the window covers, as Keras's average_pool counts them).
// Output element `index` (b, oy, ox, c) of an (N, oh, ow, C) array.
TESSEL_KERNEL_BODY void pool_position(const geometry& g, std::size_t index, std::size_t& b,
                                      std::size_t& oy, std::size_t& ox, std::size_t& c) {
  c = index % g.channels;
  ox = (index / g.channels) % g.w.out;
  oy = (index / (g.channels * g.w.out)) % g.h.out;
  b = index / (g.channels * g.w.out * g.h.out);
}
// The largest value under the window (the first of equal ones, taps in row-major order), and
// the input element it came from in `from`.
TESSEL_KERNEL_BODY float max_pool_value(const geometry& g, const float* x, std::size_t index,
                                        std::size_t& from) {
  std::size_t b = 0, oy = 0, ox = 0, c = 0;
  pool_position(g, index, b, oy, ox, c);
  float best = 0.0f;
  bool any = false;
  for (std::size_t ky = 0; ky < g.h.size; ++ky) {
    std::size_t iy = 0;
    if (!input_at(g.h, oy, ky, iy)) continue;
    for (std::size_t kx = 0; kx < g.w.size; ++kx) {
      std::size_t ix = 0;
      if (!input_at(g.w, ox, kx, ix)) continue;
      const std::size_t at = ((b * g.h.in + iy) * g.w.in + ix) * g.channels + c;
      // NaN wins, as jax's max passes it
      if (!any || x[at] > best || (x[at] != x[at] && best == best)) {
        best = x[at];
        from = at;
        any = true;
      }
    }
  }
  return best;
}
// The number of input values under output position (oy, ox)'s window.
TESSEL_KERNEL_BODY std::size_t pool_count(const geometry& g, std::size_t oy, std::size_t ox) {
  std::size_t ny = 0, nx = 0, i = 0;
  for (std::size_t k = 0; k < g.h.size; ++k) ny += input_at(g.h, oy, k, i) ? 1 : 0;
  for (std::size_t k = 0; k < g.w.size; ++k) nx += input_at(g.w, ox, k, i) ? 1 : 0;
  return ny * nx;
}
TESSEL_KERNEL_BODY float average_pool_value(const geometry& g, const float* x,
                                            std::size_t index) {
  std::size_t b = 0, oy = 0, ox = 0, c = 0;
  pool_position(g, index, b, oy, ox, c);
  float s = 0.0f;
  for (std::size_t ky = 0; ky < g.h.size; ++ky) {
    std::size_t iy = 0;
    if (!input_at(g.h, oy, ky, iy)) continue;
    for (std::size_t kx = 0; kx < g.w.size; ++kx) {
      std::size_t ix = 0;
      if (input_at(g.w, ox, kx, ix)) s += x[((b * g.h.in + iy) * g.w.in + ix) * g.channels + c];
    }
  }
  return s / static_cast<float>(pool_count(g, oy, ox));
}
// The input's gradient at element `index` of x: for max pooling, the gradients of the outputs
// whose maximum came from it (each covering output's maximum found again: no indices kept);
// for average pooling, each covering output's gradient over its count.
TESSEL_KERNEL_BODY float max_pool_gradient(const geometry& g, const float* x, const float* dy,
                                           std::size_t index) {
  float s = 0.0f;
  covering_windows(g, index, [&](std::size_t row, std::size_t, std::size_t c) {
    const std::size_t o = row * g.channels + c;
    std::size_t from = 0;
    max_pool_value(g, x, o, from);
    if (from == index) s += dy[o];
  });
  return s;
}
TESSEL_KERNEL_BODY float average_pool_gradient(const geometry& g, const float* dy,
                                               std::size_t index) {
  float s = 0.0f;
  covering_windows(g, index, [&](std::size_t row, std::size_t, std::size_t c) {
    const std::size_t o = row * g.channels + c;
    s += dy[o] / static_cast<float>(pool_count(g, (row / g.w.out) % g.h.out, row % g.w.out));
  });
  return s;
}

// ---- the launches ------------------------------------------------------------------------------
// Each a functor f(i) for i in [0, n) that a backend's for_each runs (the host on its threads,
// CUDA one thread per i): every i writes only its own outputs.

// Row r of the im2col matrix (n = out_rows(); about patch() values each).
struct im2col_rows {
  geometry g;
  const float* x;
  float* cols;
  TESSEL_KERNEL_BODY void operator()(std::size_t r) const {
    im2col_row(g, x, r, cols + r * g.patch());
  }
};
// Element i of the input's gradient from dcols (n = in_size()).
struct col2im_elements {
  geometry g;
  const float* dcols;
  float* dx;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    dx[i] = col2im_value(g, dcols, g.patch(), i);
  }
};
// Output element o of a pooling (n = out_rows() channels).
struct max_pool_elements {
  geometry g;
  const float* x;
  float* y;
  TESSEL_KERNEL_BODY void operator()(std::size_t o) const {
    std::size_t from = 0;
    y[o] = max_pool_value(g, x, o, from);
  }
};
struct average_pool_elements {
  geometry g;
  const float* x;
  float* y;
  TESSEL_KERNEL_BODY void operator()(std::size_t o) const { y[o] = average_pool_value(g, x, o); }
};
// Input element i of a pooling's gradient (n = in_size()).
struct max_pool_gradient_elements {
  geometry g;
  const float* x;
  const float* dy;
  float* dx;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    dx[i] = max_pool_gradient(g, x, dy, i);
  }
};
struct average_pool_gradient_elements {
  geometry g;
  const float* dy;
  float* dx;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    dx[i] = average_pool_gradient(g, dy, i);
  }
};

}  // namespace tessel::backend::convolution
