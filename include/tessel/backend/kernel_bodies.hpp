// Kernel bodies written once: the per-element arithmetic that the host backend (backend/host.hpp,
// on its thread pool) and the CUDA backend (src/cuda/kernels.cu, one thread per element) both
// run, so that the CPU test suite exercises every body the GPU runs, at the same bits. Compiled
// by g++ and by nvcc (as __host__ __device__ functions): plain C++17 arithmetic on floats, no
// library beyond <cmath>, nothing nvcc's front end refuses.
//
// Written this way so far: the activations and their gradients (softmax's over a row), the
// element terms of the losses (one class of a cross-entropy on probabilities, squared error,
// binary cross-entropy, absolute error), layer normalization's forward over one row, and the
// optimizers' updates of one element (SGD with momentum and Nesterov, Adam, RMSprop).
#pragma once

#include <cmath>
#include <cstddef>

#include "../core/activations.hpp"

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
// Softmax's gradient over one row of n: z = y (g - y . g).
TESSEL_KERNEL_BODY void softmax_gradient_row(const float* y, const float* g, float* z,
                                             std::size_t n) {
  float dot = 0.0f;
  for (std::size_t j = 0; j < n; ++j) dot += y[j] * g[j];
  for (std::size_t j = 0; j < n; ++j) z[j] = y[j] * (g[j] - dot);
}

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
// increment lr g / sqrt(denominator).
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

}  // namespace tessel::backend::kernel_bodies
