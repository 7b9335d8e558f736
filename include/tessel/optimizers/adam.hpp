// keras.optimizers.Adam (Keras's arguments, defaults and update formula), written against the
// optimizer protocol (optimizers/protocol.hpp).
#pragma once

#include <array>
#include <cmath>
#include <string_view>
#include <tuple>
#include <utility>

#include "protocol.hpp"

namespace tessel::optimizers {

struct adam {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;

  static constexpr std::string_view class_name = "Adam";
  static constexpr std::string_view name = "adam";
  static constexpr std::string_view keras_module = "keras.optimizers";
  static constexpr auto fields() {
    return std::tuple{field{"learning_rate", &adam::learning_rate},
                      field{"beta_1", &adam::beta_1, 0.0, 1.0},
                      field{"beta_2", &adam::beta_2, 0.0, 1.0}, field{"epsilon", &adam::epsilon}};
  }
  // Keras writes amsgrad; this Adam is Keras's without it.
  static std::array<std::pair<const char*, value>, 1> keras_constants() {
    return {{{"amsgrad", value(false)}}};
  }
  [[nodiscard]] static constexpr std::array<const char*, 3> slot_names() noexcept {
    return {"momentum", "velocity", nullptr};
  }
  [[nodiscard]] static constexpr std::size_t slots() noexcept { return count_slots(slot_names()); }
  // Keras's form: alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t); m += (g - m)(1 - beta_1);
  // v += (g^2 - v)(1 - beta_2); w -= alpha m / (sqrt(v) + epsilon).
  template <class B>
  void update(const step<B>& s) const {
    const auto t = static_cast<double>(s.iteration);
    const double alpha =
        s.learning_rate * std::sqrt(1.0 - std::pow(beta_2, t)) / (1.0 - std::pow(beta_1, t));
    B::adam_update(s.tensors, static_cast<float>(alpha), static_cast<float>(beta_1),
                   static_cast<float>(beta_2), static_cast<float>(epsilon));
  }
};

}  // namespace tessel::optimizers
