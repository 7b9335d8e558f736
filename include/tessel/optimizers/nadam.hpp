// keras.optimizers.Nadam (Keras's arguments, defaults and update formula: Adam with Nesterov
// momentum, Dozat 2015), written against the optimizer protocol (optimizers/protocol.hpp). Its
// product of momentum factors is the optimizer's own scalar (Keras's float32 "variable", after
// the slots), a function of the update count.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "bodies.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct nadam {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  // Keras's base arguments (0: none), applied before the update (optimizers/protocol.hpp).
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "Nadam";
  static constexpr std::string_view name = "nadam";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr std::string_view scalar_name = "variable";  // Keras's unnamed variable
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &nadam::learning_rate},
                      field{"beta_1", &nadam::beta_1, 0.0, 1.0},
                      field{"beta_2", &nadam::beta_2, 0.0, 1.0}, field{"epsilon", &nadam::epsilon}};
  }
  [[nodiscard]] static constexpr std::array<const char*, 3> slot_names() noexcept {
    return {"momentum", "velocity", nullptr};
  }
  [[nodiscard]] static constexpr std::size_t slots() noexcept { return count_slots(slot_names()); }

  // u_t = beta_1 (1 - 0.5 * 0.96^t), in float32 as Keras computes it.
  [[nodiscard]] float momentum_factor(std::size_t t) const {
    return static_cast<float>(beta_1) * (1.0f - 0.5f * std::pow(0.96f, static_cast<float>(t)));
  }
  // The product of the factors: 1 before the first update, u_product * beta_1 * (1 - 0.5 *
  // 0.96^t) after update t (Keras's _backend_update_step, its order of products).
  [[nodiscard]] static constexpr double scalar_initial() noexcept { return 1.0; }
  [[nodiscard]] double scalar_after(std::size_t t, double previous) const {
    return static_cast<float>(static_cast<float>(previous) * static_cast<float>(beta_1)) *
           (1.0f - 0.5f * std::pow(0.96f, static_cast<float>(t)));
  }

  // m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
  // m_hat = u_{t+1} m / (1 - u_product u_{t+1}) + (1 - u_t) g / (1 - u_product);
  // w -= m_hat lr / (sqrt(v / (1 - beta_2^t)) + epsilon).
  template <class B>
  void update(const step<B>& s) const {
    const float u_t = momentum_factor(s.iteration), u_next = momentum_factor(s.iteration + 1);
    const auto product = static_cast<float>(s.scalar);
    const float beta_2_power =
        std::pow(static_cast<float>(beta_2), static_cast<float>(s.iteration));
    for (const auto& u : s.tensors)
      B::for_each("nadam", elements<B>(u.value), 1,
                  bodies::nadam{u.value.data(), u.gradient.data(), u.slot_a.data(), u.slot_b.data(),
                                static_cast<float>(s.learning_rate),
                                static_cast<float>(1.0 - beta_1), static_cast<float>(1.0 - beta_2),
                                u_next, 1.0f - product * u_next, 1.0f - u_t, 1.0f - product,
                                1.0f - beta_2_power, static_cast<float>(epsilon)});
  }
};

}  // namespace tessel::optimizers
