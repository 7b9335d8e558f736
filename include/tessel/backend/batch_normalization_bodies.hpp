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

// ---- the launches ------------------------------------------------------------------------------
// Functors a backend's for_each runs (backend/cuda_launch.hpp lists why they are types). The
// statistics live in one row of floats per layer: `maps` holds, per channel, the mean, the
// variance, a, b and 1 / sqrt(variance + epsilon), each block C long; `sums` the per-channel
// sums being reduced.

// n = C: sums[c] = the sum of channel c over this device's rows.
struct channel_sums {
  const float* x;
  std::size_t rows, channels;
  float* sums;
  TESSEL_KERNEL_BODY void operator()(std::size_t c) const {
    sums[c] = static_cast<float>(column_sum(x, rows, channels, c));
  }
};
// n = C: sums[C + c] = the squared deviations of channel c from the mean sums[c] / count.
struct channel_deviations {
  const float* x;
  std::size_t rows, channels;
  float* sums;
  double count;
  // Channel c's mean, from its sum (every launch of this functor takes it from here).
  TESSEL_KERNEL_BODY float mean(std::size_t c) const {
    return static_cast<float>(sums[c] / count);
  }
  TESSEL_KERNEL_BODY void operator()(std::size_t c) const {
    sums[channels + c] =
        static_cast<float>(column_squared_deviation(x, rows, channels, c, mean(c)));
  }
};
// n = C: the maps from the batch's sums (training) or from the moving statistics (inference:
// sums null), and in training the moving statistics updated.
struct channel_maps {
  const float* sums;
  double count;
  float* moving_mean;
  float* moving_variance;
  const float* gamma;
  const float* beta;
  float epsilon, momentum, one_minus_momentum;
  std::size_t channels;
  float* maps;
  TESSEL_KERNEL_BODY void operator()(std::size_t c) const {
    float mean = moving_mean[c], variance = moving_variance[c];
    if (sums != nullptr) {
      mean = static_cast<float>(sums[c] / count);
      variance = static_cast<float>(sums[channels + c] / count);
      moving_mean[c] = moving_update(moving_mean[c], mean, momentum, one_minus_momentum);
      moving_variance[c] = moving_update(moving_variance[c], variance, momentum,
                                         one_minus_momentum);
    }
    const channel_map m = make_map(mean, variance, epsilon, gamma, beta, c);
    maps[c] = mean;
    maps[channels + c] = variance;
    maps[2 * channels + c] = m.a;
    maps[3 * channels + c] = m.b;
    maps[4 * channels + c] = m.inv;
  }
};
TESSEL_KERNEL_BODY channel_map map_of(const float* maps, std::size_t channels, std::size_t c) {
  channel_map m;
  m.mean = maps[c];
  m.a = maps[2 * channels + c];
  m.b = maps[3 * channels + c];
  m.inv = maps[4 * channels + c];
  return m;
}
// n = rows C: y and x-hat of element i.
struct normalize_elements {
  const float* x;
  const float* maps;
  std::size_t channels;
  float* y;
  float* xhat;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    y[i] = normalize(map_of(maps, channels, i % channels), x[i], xhat[i]);
  }
};
// n = C: sums[c] = the sum of dy, sums[C + c] = the sum of dy x-hat, over this device's rows;
// also into dgamma and dbeta (the variables' gradients, where not null), before any reduction.
struct channel_gradient_sums {
  const float* dy;
  const float* xhat;
  std::size_t rows, channels;
  float* sums;
  float* dgamma;
  float* dbeta;
  // Channel c's two sums stored where they go (every launch of this functor stores them here).
  TESSEL_KERNEL_BODY void store(std::size_t c, double sum_dy, double sum_dy_xhat) const {
    sums[c] = static_cast<float>(sum_dy);
    sums[channels + c] = static_cast<float>(sum_dy_xhat);
    if (dgamma != nullptr) dgamma[c] = sums[channels + c];
    if (dbeta != nullptr) dbeta[c] = sums[c];
  }
  TESSEL_KERNEL_BODY void operator()(std::size_t c) const {
    double sum_dy = 0, sum_dy_xhat = 0;
    gradient_sums(dy, xhat, rows, channels, c, sum_dy, sum_dy_xhat);
    store(c, sum_dy, sum_dy_xhat);
  }
};
// n = rows C: the input's gradient of element i, in training (sums: the batch's, reduced) or
// in inference (sums null: a dy).
struct input_gradient_elements {
  const float* dy;
  const float* xhat;
  const float* maps;
  const float* sums;
  double count;
  std::size_t channels;
  float* dx;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    const std::size_t c = i % channels;
    const channel_map m = map_of(maps, channels, c);
    if (sums == nullptr) {
      dx[i] = m.a * dy[i];
      return;
    }
    dx[i] = input_gradient(m, dy[i], xhat[i], static_cast<float>(sums[c] / count),
                           static_cast<float>(sums[channels + c] / count));
  }
};

}  // namespace tessel::backend::batch_normalization
