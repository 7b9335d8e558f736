// Batch normalization's bodies, written once for the host and CUDA backends (g++ and nvcc, as
// backend/kernel_bodies.hpp's are). The input is an M x C matrix (rows `ld` apart): a channels-
// last array's positions (N H W of them, or N after a Dense layer) by its channels. Each
// channel's statistics are over its column, as Keras computes them (ops.moments: the mean, then
// the mean squared deviation from it, the biased variance). Under data parallelism the rows are
// split across processes: each body gives this device's partial sums (in double), and the layer
// all-reduces them before using them, so the statistics are the global batch's (synchronized
// batch normalization), as Keras's distribution computes them under JAX.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernel_bodies.hpp"

namespace tessel::backend::batch_normalization {

// The sum of channel c over the rows (first pass).
TESSEL_KERNEL_BODY double column_sum(const float* x, std::size_t rows, std::size_t ld,
                                     std::size_t c) {
  double s = 0;
  for (std::size_t i = 0; i < rows; ++i) s += x[i * ld + c];
  return s;
}
// The sum of squared deviations of channel c from its (global) mean (second pass).
TESSEL_KERNEL_BODY double column_squared_deviation(const float* x, std::size_t rows,
                                                   std::size_t ld, std::size_t c, float mean) {
  double s = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const double d = static_cast<double>(x[i * ld + c]) - mean;
    s += d * d;
  }
  return s;
}

// One channel's affine map, as Keras's batch_normalization (JAX backend) forms it:
// inv = 1 / sqrt(variance + epsilon), a = inv * gamma, b = beta - mean * a, y = x a + b.
struct channel_map {
  float a = 1.0f, b = 0.0f, inv = 1.0f, mean = 0.0f;
};
TESSEL_KERNEL_BODY channel_map make_map(float mean, float variance, float epsilon,
                                        const float* gamma, const float* beta, std::size_t c) {
  channel_map m;
  m.inv = 1.0f / std::sqrt(variance + epsilon);
  m.a = gamma != nullptr ? m.inv * gamma[c] : m.inv;
  m.b = (beta != nullptr ? beta[c] : 0.0f) - mean * m.a;
  m.mean = mean;
  return m;
}
// One element: y, and x-hat (the normalized value the backward pass reads).
TESSEL_KERNEL_BODY float normalize(const channel_map& m, float x, float& xhat) {
  xhat = (x - m.mean) * m.inv;
  return x * m.a + m.b;
}

// The backward pass's per-channel sums over this device's rows: sum dy (beta's gradient) and
// sum dy x-hat (gamma's gradient).
TESSEL_KERNEL_BODY void gradient_sums(const float* dy, const float* xhat, std::size_t rows,
                                      std::size_t ld, std::size_t c, double& sum_dy,
                                      double& sum_dy_xhat) {
  double s = 0, t = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    s += dy[i * ld + c];
    t += static_cast<double>(dy[i * ld + c]) * xhat[i * ld + c];
  }
  sum_dy = s;
  sum_dy_xhat = t;
}
// The input's gradient of one element in training, where the statistics depend on the batch:
// a (dy - mean dy - x-hat mean(dy x-hat)), the means over the whole batch (every process's rows:
// the global sums over the global row count). In inference the statistics are constants: a dy.
TESSEL_KERNEL_BODY float input_gradient(const channel_map& m, float dy, float xhat,
                                        float mean_dy, float mean_dy_xhat) {
  return m.a * (dy - mean_dy - xhat * mean_dy_xhat);
}

// A moving statistic after one training call, as Keras updates it:
// moving * momentum + batch * (1 - momentum), with 1 - momentum as Keras has it: computed from
// the Python float (double) and rounded to float32 (float(1.0 - momentum), not 1.0f - momentumf).
TESSEL_KERNEL_BODY float moving_update(float moving, float batch, float momentum,
                                       float one_minus_momentum) {
  return moving * momentum + batch * one_minus_momentum;
}

}  // namespace tessel::backend::batch_normalization
