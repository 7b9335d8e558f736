// keras.optimizers.SGD: plain, with momentum, or Nesterov's (Keras's arguments, defaults and
// update formula), written against the optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "protocol.hpp"

namespace tessel::optimizers {

struct sgd {
  learning_rate_value learning_rate = 0.01;  // a number or a schedule
  double momentum = 0.0;
  bool nesterov = false;
  // Keras's base arguments (0: none), applied before the update (optimizers/protocol.hpp).
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "SGD";
  static constexpr std::string_view name = "sgd";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &sgd::learning_rate},
                      field{"momentum", &sgd::momentum, 0.0, 1.0},
                      field{"nesterov", &sgd::nesterov}};
  }
  // Keras's names of its slots per variable (null: none): momentum's, when there is momentum.
  [[nodiscard]] constexpr std::array<const char*, 3> slot_names() const noexcept {
    return {momentum != 0.0 ? "momentum" : nullptr, nullptr, nullptr};
  }
  [[nodiscard]] constexpr std::size_t slots() const noexcept { return count_slots(slot_names()); }
  // m = momentum * m - lr * g; w += m (Nesterov: w += momentum * m - lr * g); without
  // momentum w -= lr * g.
  template <class B>
  void update(const step<B>& s) const {
    B::sgd_update(s.tensors, static_cast<float>(s.learning_rate), static_cast<float>(momentum),
                  nesterov);
  }
};

}  // namespace tessel::optimizers
