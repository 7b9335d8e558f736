// keras.optimizers.Lion (Keras's arguments, defaults and update formula), written against the
// optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <tuple>

#include "bodies.hpp"
#include "protocol.hpp"

namespace tessel::optimizers {

struct lion {
  learning_rate_value learning_rate = 0.001;  // a number or a schedule
  double beta_1 = 0.9;
  double beta_2 = 0.99;
  // Keras's base arguments (0: none), applied before the update (optimizers/protocol.hpp).
  double weight_decay = 0.0;
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;  // keep a moving average of each variable (Keras's EMA)
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None (each step updates)

  static constexpr std::string_view class_name = "Lion";
  static constexpr std::string_view name = "lion";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &lion::learning_rate},
                      field{"beta_1", &lion::beta_1, 0.0, 1.0},
                      field{"beta_2", &lion::beta_2, 0.0, 1.0}};
  }
  // Keras refuses beta_1 <= 0 (the update would be the gradient's sign alone, m never read).
  void check() const {
    if (!(beta_1 > 0.0))
      throw value_error(
          "Lion: Argument `beta_1` must be in the [0, 1] range. Otherwise, the "
          "optimizer degenerates to SignSGD. Received: beta_1=" +
          number_text(beta_1) + ".");
  }
  [[nodiscard]] static constexpr std::array<const char*, 3> slot_names() noexcept {
    return {"momentum", nullptr, nullptr};
  }
  [[nodiscard]] static constexpr std::size_t slots() noexcept { return count_slots(slot_names()); }
  // w -= lr sign(beta_1 m + (1 - beta_1) g); m = beta_2 m + (1 - beta_2) g.
  template <class B>
  void update(const step<B>& s) const {
    for (const auto& u : s.tensors)
      B::for_each("lion", elements<B>(u.value), 1,
                  bodies::lion{u.value.data(), u.gradient.data(), u.slot_a.data(),
                               static_cast<float>(s.learning_rate), static_cast<float>(beta_1),
                               static_cast<float>(1.0 - beta_1), static_cast<float>(beta_2),
                               static_cast<float>(1.0 - beta_2)});
  }
};

}  // namespace tessel::optimizers
