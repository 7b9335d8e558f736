// keras.optimizers.Adamax (Keras's arguments, defaults and update formula), written against the
// optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "bodies.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct adamax {
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

  static constexpr std::string_view class_name = "Adamax";
  static constexpr std::string_view name = "adamax";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{
        field{"learning_rate", &adamax::learning_rate}, field{"beta_1", &adamax::beta_1, 0.0, 1.0},
        field{"beta_2", &adamax::beta_2, 0.0, 1.0}, field{"epsilon", &adamax::epsilon}};
  }
  // Keras's names: the first moment and the exponentially weighted infinity norm.
  [[nodiscard]] static constexpr std::array<const char*, 3> slot_names() noexcept {
    return {"momentum", "norm", nullptr};
  }
  [[nodiscard]] static constexpr std::size_t slots() noexcept { return count_slots(slot_names()); }
  // m += (g - m)(1 - beta_1); u = max(beta_2 u, |g|); w -= lr m / ((1 - beta_1^t)(u + eps)),
  // beta_1^t in float32 as Keras computes it.
  template <class B>
  void update(const step<B>& s) const {
    const float power = std::pow(static_cast<float>(beta_1), static_cast<float>(s.iteration));
    for (const auto& u : s.tensors)
      B::for_each(
          "adamax", elements<B>(u.value), 1,
          bodies::adamax{u.value.data(), u.gradient.data(), u.slot_a.data(), u.slot_b.data(),
                         static_cast<float>(s.learning_rate), static_cast<float>(1.0 - beta_1),
                         static_cast<float>(beta_2), 1.0f - power, static_cast<float>(epsilon)});
  }
};

}  // namespace tessel::optimizers
