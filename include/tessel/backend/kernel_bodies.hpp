// Kernel bodies written once: the per-element and per-row arithmetic that the host backend
// (backend/host.hpp, on its thread pool) and the CUDA backend (src/cuda/kernels.cu, one thread
// per element or row) both run, so that the CPU test suite exercises every body the GPU runs, at
// the same bits. Compiled by g++ and by nvcc (as __host__ __device__ functions): plain C++17
// arithmetic on floats, no library beyond <cmath> and the Philox stream (random/philox.hpp,
// constexpr, which nvcc compiles with --expt-relaxed-constexpr), nothing nvcc's front end refuses.
//
// Written this way: the activations and their gradients, softmax over a row and its gradient,
// the row reductions (maximum, sum, dot product, exp and its sum, the division by a sum, argmax),
// column sums, Rescaling's scale and shift, dropout's element, a row's targets (a label or dense
// values, offset for a split class dimension), the losses (their element terms and their rows:
// cross-entropy on probabilities and on logits, whole or in the two halves of a split class
// dimension, squared error, binary cross-entropy, absolute error), the arg-max metric, layer
// normalization's forward over one row and its backward (the variables' terms, x's gradient over
// one row), and the optimizers' updates of one element (SGD with momentum and Nesterov, Adam,
// RMSprop). The loops over rows, the threads and the sums over rows are each backend's own.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../core/activations.hpp"
#include "../random/philox.hpp"

#if defined(__CUDACC__)
#define TESSEL_KERNEL_BODY __host__ __device__ __forceinline__
#else
#define TESSEL_KERNEL_BODY inline
#endif

namespace tessel::backend::kernel_bodies {

// ---- activations -------------------------------------------------------------------------------
// NaN stays NaN, as jax.nn.relu's max(x, 0) gives it.
TESSEL_KERNEL_BODY float relu(float x) { return x > 0.0f || std::isnan(x) ? x : 0.0f; }
TESSEL_KERNEL_BODY float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
TESSEL_KERNEL_BODY float tanh(float x) { return std::tanh(x); }
// An element-wise activation (softmax is a row's, not an element's: linear here).
TESSEL_KERNEL_BODY float activate(activation_kind a, float x) {
  switch (a) {
    case activation_kind::relu: return relu(x);
    case activation_kind::sigmoid: return sigmoid(x);
    case activation_kind::tanh: return tanh(x);
    default: return x;
  }
}

// The gradient of an element-wise activation from its output y and the output's gradient g.
TESSEL_KERNEL_BODY float relu_gradient(float y, float g) { return y > 0.0f ? g : 0.0f; }
TESSEL_KERNEL_BODY float sigmoid_gradient(float y, float g) { return g * y * (1.0f - y); }
TESSEL_KERNEL_BODY float tanh_gradient(float y, float g) { return g * (1.0f - y * y); }
TESSEL_KERNEL_BODY float activation_gradient(activation_kind a, float y, float g) {
  switch (a) {
    case activation_kind::relu: return relu_gradient(y, g);
    case activation_kind::sigmoid: return sigmoid_gradient(y, g);
    case activation_kind::tanh: return tanh_gradient(y, g);
    default: return g;
  }
}

// ---- rows: one row of n values, along the row --------------------------------------------------
// The row's maximum, compared as std::max(mx, r[j]) compares (a NaN element is passed over);
// -inf for an empty row.
TESSEL_KERNEL_BODY float row_max(const float* r, std::size_t n) {
  float mx = -INFINITY;
  for (std::size_t j = 0; j < n; ++j) mx = mx < r[j] ? r[j] : mx;
  return mx;
}
TESSEL_KERNEL_BODY float row_sum(const float* r, std::size_t n) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j) s += r[j];
  return s;
}
TESSEL_KERNEL_BODY float row_dot(const float* a, const float* b, std::size_t n) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}
// dst = exp(src - mx) (dst may be src); returns the sum of dst.
TESSEL_KERNEL_BODY float exp_row(const float* src, float mx, float* dst, std::size_t n) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j) s += (dst[j] = std::exp(src[j] - mx));
  return s;
}
// r *= 1 / s, as a softmax scales its row.
TESSEL_KERNEL_BODY void divide_row(float* r, float s, std::size_t n) {
  const float inv = 1.0f / s;
  for (std::size_t j = 0; j < n; ++j) r[j] *= inv;
}
// The first index of the row's maximum, as NumPy's argmax (0 for an empty row).
TESSEL_KERNEL_BODY std::size_t argmax_row(const float* r, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t j = 1; j < n; ++j)
    if (r[j] > r[best]) best = j;
  return best;
}

// Softmax over one row, in place: the maximum subtracted, exp, divided by the sum.
TESSEL_KERNEL_BODY void softmax_row(float* r, std::size_t n) {
  divide_row(r, exp_row(r, row_max(r, n), r, n), n);
}
// Softmax's gradient over one row with dot = y . g given (summed over devices when the row is
// split): z = y (g - dot).
TESSEL_KERNEL_BODY void softmax_gradient_given_dot(const float* y, const float* g, float dot,
                                                   float* z, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) z[j] = y[j] * (g[j] - dot);
}
// Softmax's gradient over one whole row: z = y (g - y . g).
TESSEL_KERNEL_BODY void softmax_gradient_row(const float* y, const float* g, float* z,
                                             std::size_t n) {
  softmax_gradient_given_dot(y, g, row_dot(y, g, n), z, n);
}

// ---- columns and elements ----------------------------------------------------------------------
// out[j] = the sum of column j over `rows` rows (`ld` apart), in row order, for j in [0, n): the
// host takes a block of columns (the inner loop along a row, vectorised), the GPU one column
// (n = 1, out its register).
TESSEL_KERNEL_BODY void column_sums(const float* __restrict__ in, std::size_t ld,
                                    std::size_t rows, std::size_t n, float* __restrict__ out) {
  for (std::size_t j = 0; j < n; ++j) out[j] = 0.0f;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < n; ++j) out[j] += in[i * ld + j];
}
// Rescaling: x * scale + offset.
TESSEL_KERNEL_BODY float scale_shift(float x, float scale, float offset) {
  return x * scale + offset;
}
// Inverted dropout of x, the element at global row-major index `index` of the whole batch's
// activation: kept where the stream's uniform draw there is >= rate, and then scaled by
// keep_scale = dropout_keep_scale(rate); else 0.
TESSEL_KERNEL_BODY float dropout_keep_scale(float rate) { return 1.0f / (1.0f - rate); }
TESSEL_KERNEL_BODY float dropout(const random::stream& st, std::uint64_t index, float x,
                                 float rate, float keep_scale) {
  return st.uniform(index) >= rate ? x * keep_scale : 0.0f;
}

// ---- targets -----------------------------------------------------------------------------------
// One row's targets: a class label (1 at the label's column, 0 at the others; a label outside
// this row's columns gives 0 everywhere) or dense values. col0 is the global column of the row's
// column 0 when the class dimension is split across devices (0 otherwise).
struct target_row {
  bool sparse;
  std::size_t label;
  const float* dense;
  std::size_t col0;
  TESSEL_KERNEL_BODY float operator()(std::size_t j) const {
    return sparse ? (label == col0 + j ? 1.0f : 0.0f) : dense[j];
  }
};
// A loss's or metric's targets: `labels` (a class index per row), or where it is null the dense
// targets, rows `ld` apart.
struct targets {
  const std::int32_t* labels;
  const float* dense;
  std::size_t ld;
  std::size_t col0;
  TESSEL_KERNEL_BODY target_row row(std::size_t i) const {
    if (labels != nullptr) return {true, static_cast<std::size_t>(labels[i]), nullptr, col0};
    return {false, 0, dense + i * ld, col0};
  }
};

// ---- losses ------------------------------------------------------------------------------------
// One class of a cross-entropy on probabilities, as Keras computes it (the row normalised by its
// sum s, clipped to [eps, 1 - eps], a NaN passing through as jnp.clip passes it): adds
// -t log(clip(q)) to `loss` and dL/dq * q to `dot`, and returns dL/dq (the clip passes no
// gradient).
TESSEL_KERNEL_BODY float crossentropy_term(float t, float p, float s, float eps, float& loss,
                                           float& dot) {
  const float q = p / s;
  const float low = q < eps ? eps : q;                       // std::max(q, eps)
  const float c = 1.0f - eps < low ? 1.0f - eps : low;       // std::min(low, 1 - eps)
  loss -= t * std::log(c);
  const float inside = (q >= eps && q <= 1.0f - eps) ? 1.0f : 0.0f;
  const float dq = -t / c * inside;
  dot += dq * q;
  return dq;
}

// Squared error of one element: returns (p - t)^2 and sets g to its gradient, scaled by
// grad_scale and 1/n.
TESSEL_KERNEL_BODY float squared_error(float p, float t, float grad_scale, float inv_n, float& g) {
  const float d = p - t;
  g = grad_scale * 2.0f * d * inv_n;
  return d * d;
}
// Absolute error of one element.
TESSEL_KERNEL_BODY float absolute_error(float p, float t) { return std::fabs(p - t); }
// Binary cross-entropy of one element, as Keras computes it: on logits z through log sigmoid
// (-(max(-z, 0) + log1p(exp(-|z|))), stable for any z); on probabilities clipped to
// [eps, 1 - eps] (the clip passes no gradient). Returns the term and sets g, scaled by
// grad_scale and 1/n.
TESSEL_KERNEL_BODY float binary_crossentropy(float t, float z, bool from_logits, float epsilon,
                                             float grad_scale, float inv_n, float& g) {
  if (from_logits) {
    const float soft = std::log1p(std::exp(-std::fabs(z)));
    const float log_sig = -((-z < 0.0f ? 0.0f : -z) + soft);     // std::max(-z, 0)
    const float log_sig_neg = -((z < 0.0f ? 0.0f : z) + soft);   // std::max(z, 0)
    const float sig = 1.0f / (1.0f + std::exp(-z));
    g = grad_scale * (sig - t) * inv_n;
    return -t * log_sig - (1.0f - t) * log_sig_neg;
  }
  const bool clipped = z < epsilon || z > 1.0f - epsilon;
  const float low = z < epsilon ? epsilon : z;               // std::max(z, eps)
  const float p = 1.0f - epsilon < low ? 1.0f - epsilon : low;  // std::min(low, 1 - eps)
  g = clipped ? 0.0f : grad_scale * (-t / p + (1.0f - t) / (1.0f - p)) * inv_n;
  return -(t * std::log(p) + (1.0f - t) * std::log(1.0f - p));
}

// ---- losses over one row of n (the predictions p, the gradient g) ------------------------------
// Cross-entropy on probabilities with the row's sum s given: g = dL/dq of each class (before the
// normalisation's share), and the row's loss and sum_k dL/dq_k * q_k (this device's part, when
// the row is split).
TESSEL_KERNEL_BODY void crossentropy_terms_row(const float* p, std::size_t n, const target_row& t,
                                               float s, float eps, float* g, float& loss,
                                               float& dot) {
  loss = 0.0f;
  dot = 0.0f;
  for (std::size_t j = 0; j < n; ++j) g[j] = crossentropy_term(t(j), p[j], s, eps, loss, dot);
}
// Finishes its gradient with the row's dot and sum: g = grad_scale * (g - dot) / s.
TESSEL_KERNEL_BODY void crossentropy_gradient_row(float* g, std::size_t n, float dot, float s,
                                                  float grad_scale) {
  for (std::size_t j = 0; j < n; ++j) g[j] = grad_scale * (g[j] - dot) / s;
}
// The whole row's: returns its loss.
TESSEL_KERNEL_BODY float crossentropy_row(const float* p, std::size_t n, const target_row& t,
                                          float eps, float grad_scale, float* g) {
  const float s = row_sum(p, n);
  float loss = 0.0f, dot = 0.0f;
  crossentropy_terms_row(p, n, t, s, eps, g, loss, dot);
  crossentropy_gradient_row(g, n, dot, s, grad_scale);
  return loss;
}

// Cross-entropy on logits z through a stable log-softmax: returns -sum(t * log_softmax(z)), and
// g = grad_scale * (softmax(z) * sum(t) - t).
TESSEL_KERNEL_BODY float softmax_crossentropy_row(const float* z, std::size_t n,
                                                  const target_row& t, float grad_scale,
                                                  float* g) {
  const float mx = row_max(z, n);
  float s = 0.0f, tsum = 0.0f;
  for (std::size_t j = 0; j < n; ++j) {
    s += std::exp(z[j] - mx);
    tsum += t(j);
  }
  const float log_s = std::log(s);
  float loss = 0.0f;
  for (std::size_t j = 0; j < n; ++j) {
    const float tj = t(j);
    loss -= tj * (z[j] - mx - log_s);
    g[j] = grad_scale * (std::exp(z[j] - mx) / s * tsum - tj);
  }
  return loss;
}
// The same with the class dimension split across devices, in two halves around the all-reduces
// of the row's statistics. First this device's part of sum_j t_j (z_j - mx) and of sum_j t_j,
// with the row's (global) maximum mx.
TESSEL_KERNEL_BODY void target_terms_row(const float* z, std::size_t n, const target_row& t,
                                         float mx, float& tz, float& ts) {
  tz = 0.0f;
  ts = 0.0f;
  if (t.sparse) {
    if (t.label >= t.col0 && t.label < t.col0 + n) {
      tz = z[t.label - t.col0] - mx;
      ts = 1.0f;
    }
  } else {
    for (std::size_t j = 0; j < n; ++j) {
      tz += t.dense[j] * (z[j] - mx);
      ts += t.dense[j];
    }
  }
}
// Then, g holding exp(z - mx) and s, tz, tsum the completed sums: g = grad_scale * (g / s *
// tsum - t); returns the row's loss, tsum * log(s) - tz.
TESSEL_KERNEL_BODY float split_softmax_crossentropy_row(float* g, std::size_t n,
                                                        const target_row& t, float s, float tz,
                                                        float tsum, float grad_scale) {
  const float inv = 1.0f / s;
  for (std::size_t j = 0; j < n; ++j) g[j] = grad_scale * (g[j] * inv * tsum - t(j));
  return tsum * std::log(s) - tz;
}

// The row's mean over inv_n = 1 / (the class count) of the element terms above.
TESSEL_KERNEL_BODY float squared_error_row(const float* p, const float* t, std::size_t n,
                                           float grad_scale, float inv_n, float* g) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j) s += squared_error(p[j], t[j], grad_scale, inv_n, g[j]);
  return s * inv_n;
}
TESSEL_KERNEL_BODY float binary_crossentropy_row(const float* p, const float* t, std::size_t n,
                                                 bool from_logits, float epsilon,
                                                 float grad_scale, float inv_n, float* g) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j)
    s += binary_crossentropy(t[j], p[j], from_logits, epsilon, grad_scale, inv_n, g[j]);
  return s * inv_n;
}
TESSEL_KERNEL_BODY float absolute_error_row(const float* p, const float* t, std::size_t n,
                                            float inv_n) {
  float s = 0.0f;
  for (std::size_t j = 0; j < n; ++j) s += absolute_error(p[j], t[j]);
  return s * inv_n;
}

// ---- metrics -----------------------------------------------------------------------------------
// Whether the row's arg-max (the first maximum) is the target's class: its label, or the dense
// targets' arg-max.
TESSEL_KERNEL_BODY bool argmax_matches(const float* p, std::size_t n, const target_row& t) {
  const std::size_t want = t.sparse ? t.label : argmax_row(t.dense, n);
  return argmax_row(p, n) == want;
}

// ---- normalization ------------------------------------------------------------------------------
// Layer normalization of one run of n values xr (a sample's last axis): its mean and variance
// summed in double, y = (x - mean) / sqrt(var + epsilon) * gamma + beta (gamma, beta: null when
// the layer has none), x-hat for the backward pass; returns 1 / sqrt(var + epsilon).
TESSEL_KERNEL_BODY float layer_normalization_row(const float* xr, std::size_t n,
                                                 const float* gamma, const float* beta,
                                                 float epsilon, float* y, float* xhat) {
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) sum += xr[j];
  const auto mean = static_cast<float>(sum / static_cast<double>(n));
  double squares = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(xr[j]) - mean;
    squares += d * d;
  }
  const auto var = static_cast<float>(squares / static_cast<double>(n));
  const float iv = 1.0f / std::sqrt(var + epsilon);
  for (std::size_t j = 0; j < n; ++j) {
    const float a = gamma != nullptr ? iv * gamma[j] : iv;
    const float b = (beta != nullptr ? beta[j] : 0.0f) - mean * a;
    y[j] = xr[j] * a + b;
    xhat[j] = (xr[j] - mean) * iv;
  }
  return iv;
}

// Its backward pass. The variables' gradients at one feature: over the runs in order, gamma's
// sums dy * xhat and beta's sums dy, in double.
TESSEL_KERNEL_BODY void layer_normalization_variable_terms(float dy, float xhat, double& dgamma,
                                                           double& dbeta) {
  dgamma += static_cast<double>(dy) * xhat;
  dbeta += dy;
}
// x's gradient over one run: with g = dy * gamma (gamma null: dy), dx = inv * (g - mean(g) -
// xhat * mean(g * xhat)), the means summed in double.
TESSEL_KERNEL_BODY void layer_normalization_backward_row(const float* dy, const float* xhat,
                                                         float inv, const float* gamma,
                                                         std::size_t n, float* dx) {
  double m1 = 0, m2 = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float g = gamma != nullptr ? dy[j] * gamma[j] : dy[j];
    m1 += g;
    m2 += static_cast<double>(g) * xhat[j];
  }
  const auto mean_g = static_cast<float>(m1 / static_cast<double>(n));
  const auto mean_gh = static_cast<float>(m2 / static_cast<double>(n));
  for (std::size_t j = 0; j < n; ++j) {
    const float g = gamma != nullptr ? dy[j] * gamma[j] : dy[j];
    dx[j] = inv * (g - mean_g - xhat[j] * mean_gh);
  }
}

// ---- optimizers (one element; Keras's update rules) --------------------------------------------
// SGD: momentum 0 (m null) w -= lr g; else m = momentum m - lr g, then w += m, or with Nesterov
// w += momentum m - lr g.
TESSEL_KERNEL_BODY void sgd(float& w, float g, float* m, float lr, float momentum, bool nesterov) {
  if (m == nullptr) {
    w -= lr * g;
  } else if (nesterov) {
    *m = momentum * *m - lr * g;
    w += momentum * *m - lr * g;
  } else {
    *m = momentum * *m - lr * g;
    w += *m;
  }
}
// Adam's moments (m += (g - m)(1 - beta_1), v += (g^2 - v)(1 - beta_2)), then its step
// alpha m / (sqrt(v) + epsilon), alpha holding the bias corrections.
TESSEL_KERNEL_BODY void adam_moments(float g, float& m, float& v, float one_minus_beta_1,
                                     float one_minus_beta_2) {
  m += (g - m) * one_minus_beta_1;
  v += (g * g - v) * one_minus_beta_2;
}
TESSEL_KERNEL_BODY float adam_step(float m, float v, float alpha, float epsilon) {
  return alpha * m / (std::sqrt(v) + epsilon);
}
// RMSprop's averages (the velocity, and with `centered` the average gradient), then its
// increment lr g / sqrt(denominator), then its step.
TESSEL_KERNEL_BODY void rmsprop_averages(float g, float& velocity, float* average, float rho) {
  velocity = rho * velocity + (1.0f - rho) * g * g;
  if (average != nullptr) *average = rho * *average + (1.0f - rho) * g;
}
TESSEL_KERNEL_BODY float rmsprop_increment(float g, float velocity, const float* average,
                                           float lr, float epsilon) {
  const float denominator =
      average != nullptr ? velocity - *average * *average + epsilon : velocity + epsilon;
  return lr * g / std::sqrt(denominator);
}
// Then the step: with momentum (m not null) m = momentum m + increment and w -= m, else
// w -= increment.
TESSEL_KERNEL_BODY void rmsprop_step(float& w, float increment, float* m, float momentum) {
  if (m != nullptr) {
    *m = momentum * *m + increment;
    w -= *m;
  } else {
    w -= increment;
  }
}

}  // namespace tessel::backend::kernel_bodies
