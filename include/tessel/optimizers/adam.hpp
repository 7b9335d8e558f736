// keras.optimizers.Adam (Keras's arguments, defaults and update formula), written against the
// optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <utility>

#include "bodies.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct adam {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;  // keep the maximum of the second moments (a third slot)
  // Keras's base arguments (0: none), applied before the update (optimizers/protocol.hpp).
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "Adam";
  static constexpr std::string_view name = "adam";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &adam::learning_rate},
                      field{"beta_1", &adam::beta_1, 0.0, 1.0},
                      field{"beta_2", &adam::beta_2, 0.0, 1.0}, field{"epsilon", &adam::epsilon},
                      field{"amsgrad", &adam::amsgrad}};
  }
  [[nodiscard]] constexpr std::array<const char*, 3> slot_names() const noexcept {
    return {"momentum", "velocity", amsgrad ? "velocity_hat" : nullptr};
  }
  // Keras makes the moments together per variable, then every velocity_hat.
  static constexpr std::array<int, 3> keras_slot_passes() noexcept { return {0, 0, 1}; }
  [[nodiscard]] constexpr std::size_t slots() const noexcept { return count_slots(slot_names()); }
  // Keras's form: alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
  // v += (g^2 - v)(1 - beta_2); w -= alpha m / (sqrt(v) + epsilon).
  // With amsgrad: v_hat = max(v_hat, v), the step with v_hat.
  template <class B>
  void update(const step<B>& s) const {
    const auto t = static_cast<double>(s.iteration);
    const double alpha =
        s.learning_rate * std::sqrt(1.0 - std::pow(beta_2, t)) / (1.0 - std::pow(beta_1, t));
    if (!amsgrad) {
      B::adam_update(s.tensors, static_cast<float>(alpha), static_cast<float>(beta_1),
                     static_cast<float>(beta_2), static_cast<float>(epsilon));
      return;
    }
    for (const auto& u : s.tensors)
      B::for_each("adam_amsgrad", elements<B>(u.value), 1,
                  bodies::adam_amsgrad{
                      u.value.data(), u.gradient.data(), u.slot_a.data(), u.slot_b.data(),
                      u.slot_c.data(), static_cast<float>(alpha), static_cast<float>(1.0 - beta_1),
                      static_cast<float>(1.0 - beta_2), static_cast<float>(epsilon)});
  }
};

}  // namespace tessel::optimizers
