// keras.optimizers.RMSprop, plain, with momentum or centered (Keras's arguments, defaults and
// update formula), written against the optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "protocol.hpp"

namespace tessel::optimizers {

struct rmsprop {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  // Keras's base arguments (0: none), applied before the update (optimizers/protocol.hpp).
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "RMSprop";
  static constexpr std::string_view name = "rmsprop";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &rmsprop::learning_rate},
                      field{"rho", &rmsprop::rho, 0.0, 1.0},
                      field{"momentum", &rmsprop::momentum, 0.0, 1.0},
                      field{"epsilon", &rmsprop::epsilon}, field{"centered", &rmsprop::centered}};
  }
  // velocity, then momentum's and the centered average's when asked for (their places are
  // backend::rmsprop_update's slot_b and slot_c).
  [[nodiscard]] constexpr std::array<const char*, 3> slot_names() const noexcept {
    return {"velocity", momentum > 0.0 ? "momentum" : nullptr,
            centered ? "average_gradient" : nullptr};
  }
  // Keras makes every velocity, then every momentum, then every average gradient.
  static constexpr std::array<int, 3> keras_slot_passes() noexcept { return {0, 1, 2}; }
  [[nodiscard]] constexpr std::size_t slots() const noexcept { return count_slots(slot_names()); }
  template <class B>
  void update(const step<B>& s) const {
    B::rmsprop_update(s.tensors, static_cast<float>(s.learning_rate), static_cast<float>(rho),
                      static_cast<float>(momentum), static_cast<float>(epsilon), centered);
  }
};

}  // namespace tessel::optimizers
