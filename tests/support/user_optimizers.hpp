// An optimizer written outside the library, as a user writes one: Signum (signSGD with momentum,
// Bernstein et al. 2018), which neither Keras nor tessel has, a type of the optimizer protocol
// (tessel/optimizers/protocol.hpp) with its own host kernel, an element-wise body launched with
// the backend's for_each. Its Keras twin is a subclass of keras.optimizers.Optimizer
// (tests/golden/make_golden.py, make_user_optimizer). Used by tests/unit/user_optimizer_test.cpp
// (Keras parity, saving), tests/mpi/sharded_state_test.cpp (split state) and
// tests/ps/ps_train_test.cpp (the parameter servers).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <tessel/tessel.hpp>
#include <tuple>

namespace user {

// m = beta m + (1 - beta) g; w -= lr sign(m), sign(0) = 0.
struct signum_body {
  float* w;
  const float* g;
  float* m;
  float lr, beta;
  void operator()(std::size_t i) const {
    const float v = beta * m[i] + (1.0f - beta) * g[i];
    m[i] = v;
    w[i] -= lr * static_cast<float>((v > 0.0f) - (v < 0.0f));
  }
};

struct signum {
  double learning_rate = 0.01;
  double beta = 0.9;

  static constexpr std::string_view class_name = "Signum";
  static constexpr std::string_view name = "signum";
  // As Keras's twin is registered: @keras.saving.register_keras_serializable(package="user").
  static constexpr std::string_view keras_registered_name = "user>Signum";
  static constexpr auto fields() {
    using tessel::optimizers::field;
    return std::tuple{field{"learning_rate", &signum::learning_rate},
                      field{"beta", &signum::beta, 0.0, 1.0}};
  }
  [[nodiscard]] std::array<const char*, 3> slot_names() const {
    return {"momentum", nullptr, nullptr};
  }

  template <class B>
  requires std::same_as<B, tessel::backend::host>
  void update(const tessel::optimizers::step<B>& s) const {
    for (const auto& u : s.tensors)
      B::for_each("signum", B::rows(u.value) * B::cols(u.value), 1,
                  signum_body{u.value.data(), u.gradient.data(), u.slot_a.data(),
                              static_cast<float>(s.learning_rate), static_cast<float>(beta)});
  }
};

// Registered on the host backend: a parameter server, a `compile("signum")`, a config naming
// "Signum" find it.
inline const bool signum_registered = tessel::register_optimizer<signum, tessel::backend::host>();

}  // namespace user
