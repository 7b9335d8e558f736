// keras.optimizers.AdamW: Adam with decoupled weight decay (Keras's arguments, defaults and
// update formula; weight_decay 0.004), written against the optimizer protocol
// (optimizers/protocol.hpp). The decay is the optimizer state's (optimizer<B>), as for every
// optimizer with a `weight_decay`: w -= w * weight_decay * lr before Adam's step, on every
// variable that optimizer<B>::exclude_from_weight_decay does not name (without it AdamW decays
// the biases and the normalizations' scales too, as Keras's does).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "adam.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct adamw {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  // Keras's base arguments (0: none)
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "AdamW";
  static constexpr std::string_view name = "adamw";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &adamw::learning_rate},
                      field{"beta_1", &adamw::beta_1, 0.0, 1.0},
                      field{"beta_2", &adamw::beta_2, 0.0, 1.0}, field{"epsilon", &adamw::epsilon},
                      field{"amsgrad", &adamw::amsgrad}};
  }
  [[nodiscard]] adam as_adam() const {
    return {learning_rate, beta_1, beta_2, epsilon, amsgrad};  // (its decay is the state's)
  }
  [[nodiscard]] constexpr std::array<const char*, 3> slot_names() const noexcept {
    return {"momentum", "velocity", amsgrad ? "velocity_hat" : nullptr};
  }
  static constexpr std::array<int, 3> keras_slot_passes() noexcept {
    return adam::keras_slot_passes();
  }
  [[nodiscard]] constexpr std::size_t slots() const noexcept { return count_slots(slot_names()); }
  template <class B>
  void update(const step<B>& s) const {
    as_adam().template update<B>(s);
  }
};

}  // namespace tessel::optimizers
