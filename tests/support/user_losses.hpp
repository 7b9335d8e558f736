// A loss and a metric written outside the library, as a user writes them: Keras's Huber loss and
// MeanSquaredError metric, which tessel does not have, each a type of the protocols in
// losses.hpp and metrics.hpp with its own host kernel: a loop over the rows of the host backend's
// matrices (element access m(i, j), the sum into c.sums(c.slot)). Used by
// tests/unit/custom_loss_test.cpp (Keras parity) and tests/mpi/functional_test.cpp (distributed).
#pragma once

#include <cmath>
#include <concepts>
#include <string>
#include <tessel/tessel.hpp>

namespace user {

using host = tessel::backend::host;

// keras.losses.Huber: per element 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta),
// d = y_pred - y_true; per sample the mean over the last axis. Element-wise, so the planner
// needs nothing of it when the classes are split (each device sums its own elements).
struct huber {
  float delta = 1.0f;
  std::string name = "huber_loss";
  const tessel::loss_rule* plan_rule() const { return &tessel::loss_rules::elementwise; }
  std::string get_config() const { return "delta=" + std::to_string(delta); }

  template <class B>
    requires std::same_as<B, host>
  void compute(const tessel::loss_call<B>& c) const {
    const auto pred = c.local();
    const auto targets = c.targets;
    const auto grad = c.grad;
    const std::size_t n = pred.extent(1);
    const float inv_n = 1.0f / static_cast<float>(c.classes()), scale = c.grad_scale,
                delta_ = delta;
    double acc = 0.0;
    for (std::size_t i = 0; i < pred.extent(0); ++i) {
      float s = 0.0f;
      for (std::size_t j = 0; j < n; ++j) {
        const float d = pred(i, j) - targets(i, j), a = std::fabs(d);
        s += a <= delta_ ? 0.5f * d * d : delta_ * (a - 0.5f * delta_);
        grad(i, j) = scale * inv_n * (a <= delta_ ? d : (d > 0 ? delta_ : -delta_));
      }
      acc += static_cast<double>(s * inv_n);
    }
    c.sums(c.slot) = acc;
  }
};

// keras.metrics.MeanSquaredError: the running mean over samples of each sample's mean
// (y_pred - y_true)^2; smaller is better.
struct mean_squared_error_metric {
  std::string name = "mean_squared_error";
  static constexpr bool increases = false;

  template <class B>
    requires std::same_as<B, host>
  void local_sum(const tessel::metrics::metric_call<B>& c) const {
    const auto pred = c.pred;
    const auto targets = c.targets;
    const std::size_t n = pred.extent(1);
    double acc = 0.0;
    for (std::size_t i = 0; i < pred.extent(0); ++i) {
      float s = 0.0f;
      for (std::size_t j = 0; j < n; ++j) {
        const float d = pred(i, j) - targets(i, j);
        s += d * d;
      }
      acc += static_cast<double>(s / static_cast<float>(n));
    }
    c.sums(c.slot) = acc;
  }
};

// A metric that does not say which way is better (no `increases`).
struct undirected_metric {
  std::string name = "undirected";
  template <class B>
  void local_sum(const tessel::metrics::metric_call<B>& c) const {
    mean_squared_error_metric{}.local_sum<B>(c);
  }
};

}  // namespace user
