// keras.optimizers.Adagrad (Keras's arguments, defaults and update formula), written against the
// optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "bodies.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct adagrad {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double initial_accumulator_value = 0.1;
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

  static constexpr std::string_view class_name = "Adagrad";
  static constexpr std::string_view name = "adagrad";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &adagrad::learning_rate},
                      field{"initial_accumulator_value", &adagrad::initial_accumulator_value},
                      field{"epsilon", &adagrad::epsilon}};
  }
  [[nodiscard]] static constexpr std::array<const char*, 3> slot_names() noexcept {
    return {"accumulator", nullptr, nullptr};
  }
  [[nodiscard]] constexpr std::array<double, 3> slot_initial_values() const noexcept {
    return {initial_accumulator_value, 0.0, 0.0};
  }
  [[nodiscard]] static constexpr std::size_t slots() noexcept { return count_slots(slot_names()); }
  // acc += g^2; w -= lr g / sqrt(acc + epsilon).
  template <class B>
  void update(const step<B>& s) const {
    for (const auto& u : s.tensors)
      B::for_each(
          "adagrad", elements<B>(u.value), 1,
          bodies::adagrad{u.value.data(), u.gradient.data(), u.slot_a.data(),
                          static_cast<float>(s.learning_rate), static_cast<float>(epsilon)});
  }
};

}  // namespace tessel::optimizers
