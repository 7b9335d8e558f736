// An optimizer's or a learning-rate schedule's hyperparameters as fields: Keras's name of each,
// the member that holds it and the range a value read from outside must be in, visited once
// wherever the hyperparameters go (optimizers/protocol.hpp, optimizers/schedules.hpp).
#pragma once

#include <array>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace tessel::optimizers {

// One hyperparameter: Keras's name of it, the member that holds it and, for a number, the range
// a config read from outside (a `.keras` file, a ps message) must be in.
template <class O, class T>
struct field {
  const char* name;
  T O::*member;
  double low = 0.0;
  double high = std::numeric_limits<double>::max();
};
template <class O, class T>
field(const char*, T O::*) -> field<O, T>;
template <class O, class T>
field(const char*, T O::*, double, double) -> field<O, T>;

template <class O>
concept has_fields = requires {
  std::tuple_size<decltype(O::fields())>::value;
};

// Calls f(name, member reference, low, high) for each of O's fields, in order.
template <class O, class F>
constexpr void for_each_field(O& o, F&& f) {
  std::apply([&](const auto&... fl) { (f(fl.name, o.*(fl.member), fl.low, fl.high), ...); },
             std::remove_cvref_t<O>::fields());
}

// A number as messages print it ("0.9", "1e-07", "inf").
inline std::string number_text(double x) {
  if (x == std::numeric_limits<double>::max()) return "inf";
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.9g", x);
  return buf.data();
}

}  // namespace tessel::optimizers
