// The element-wise bodies of the library's optimizers that have no fused backend update
// (Adagrad, Adamax, Lion, Adam with amsgrad) and of the steps every optimizer may take first
// (the gradients' clipping, weight decay): one element each, Keras's float32 arithmetic, run by
// the host backend's for_each and, on the GPU, by the launcher's instantiations in
// src/cuda/optimizers.cu.
#pragma once

#include <cmath>
#include <cstddef>

#include "../backend/kernel_bodies.hpp"

namespace tessel::optimizers::bodies {

// Keras's _apply_weight_decay: w = w - w * wd * lr (wd_lr holding wd, then lr applied: the
// order Keras multiplies in).
struct weight_decay {
  float* w;
  float wd, lr;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const { w[i] = w[i] - w[i] * wd * lr; }
};

// Keras's clipvalue: g = clip(g, -v, v).
struct clip_value {
  float* g;
  float v;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    const float x = g[i];
    g[i] = x < -v ? -v : (x > v ? v : x);
  }
};

// Keras's clipnorm and global_clipnorm: g = g * numerator / denominator (clipnorm: the clip
// norm over the larger of the variable's norm and it; global_clipnorm: the scale over 1).
struct scale_gradient {
  float* g;
  float numerator, denominator;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const { g[i] = g[i] * numerator / denominator; }
};

// Keras's gradient accumulation, a step that does not update: acc = g + acc.
struct accumulate {
  float* acc;
  const float* g;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const { acc[i] = g[i] + acc[i]; }
};
// The updating step: g = (g + acc) / steps, the accumulator emptied.
struct accumulated_mean {
  float* g;
  float* acc;
  float steps;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    g[i] = (g[i] + acc[i]) / steps;
    acc[i] = 0.0f;
  }
};
// Keras's EMA of a variable: avg = m * avg + (1 - m) * w.
struct moving_average {
  float* avg;
  const float* w;
  float m;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    avg[i] = m * avg[i] + (1.0f - m) * w[i];
  }
};

// keras.optimizers.Nadam: m += (g - m) b1c; v += (g^2 - v) b2c; m_hat = u_next m / next_den +
// (1 - u_t) g / den; w -= m_hat lr / (sqrt(v / v_den) + epsilon), in Keras's order of operations.
struct nadam {
  float* w;
  const float* g;
  float* m;
  float* v;
  float lr, b1c, b2c, u_next, next_den, one_minus_u, den, v_den, epsilon;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    m[i] += (g[i] - m[i]) * b1c;
    v[i] += (g[i] * g[i] - v[i]) * b2c;
    const float m_hat = u_next * m[i] / next_den + one_minus_u * g[i] / den;
    w[i] -= m_hat * lr / (std::sqrt(v[i] / v_den) + epsilon);
  }
};

// keras.optimizers.Adagrad: acc += g^2; w -= lr g / sqrt(acc + epsilon).
struct adagrad {
  float* w;
  const float* g;
  float* acc;
  float lr, epsilon;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    acc[i] += g[i] * g[i];
    w[i] -= (lr * g[i]) / std::sqrt(acc[i] + epsilon);
  }
};

// keras.optimizers.Adamax: m += (g - m)(1 - beta_1); u = max(beta_2 u, |g|);
// w -= lr m / ((1 - beta_1^t)(u + epsilon)).
struct adamax {
  float* w;
  const float* g;
  float* m;
  float* u;
  float lr, one_minus_beta_1, beta_2, one_minus_beta_1_power, epsilon;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    m[i] += (g[i] - m[i]) * one_minus_beta_1;
    const float a = beta_2 * u[i], b = std::fabs(g[i]);
    u[i] = a > b ? a : b;
    w[i] -= (lr * m[i]) / (one_minus_beta_1_power * (u[i] + epsilon));
  }
};

// keras.optimizers.Lion: w -= lr sign(beta_1 m + (1 - beta_1) g); m = beta_2 m + (1 - beta_2) g.
struct lion {
  float* w;
  const float* g;
  float* m;
  float lr, beta_1, one_minus_beta_1, beta_2, one_minus_beta_2;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    const float c = m[i] * beta_1 + g[i] * one_minus_beta_1;
    w[i] -= lr * static_cast<float>((c > 0.0f) - (c < 0.0f));
    m[i] = m[i] * beta_2 + g[i] * one_minus_beta_2;
  }
};

// keras.optimizers.Adam with amsgrad: Adam's moments, v_hat = max(v_hat, v), the step with v_hat.
struct adam_amsgrad {
  float* w;
  const float* g;
  float* m;
  float* v;
  float* v_hat;
  float alpha, one_minus_beta_1, one_minus_beta_2, epsilon;
  TESSEL_KERNEL_BODY void operator()(std::size_t i) const {
    backend::kernel_bodies::adam_moments(g[i], m[i], v[i], one_minus_beta_1, one_minus_beta_2);
    v_hat[i] = v_hat[i] > v[i] ? v_hat[i] : v[i];
    w[i] -= backend::kernel_bodies::adam_step(m[i], v_hat[i], alpha, epsilon);
  }
};

}  // namespace tessel::optimizers::bodies
