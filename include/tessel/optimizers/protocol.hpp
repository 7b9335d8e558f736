// The optimizer protocol: what a type must have to be compiled into a model as its optimizer,
// the library's (optimizers/sgd.hpp, adam.hpp, rmsprop.hpp) and a user's alike.
//
// An optimizer is a copyable type with
//   - `class_name`: Keras's class ("Adam"), as the `.keras` config and the logs name it;
//   - `name`: its default name, the prefix of its variables' paths ("adam/iteration");
//   - `learning_rate`, a double member;
//   - `fields()`: a static tuple of `field{"beta_1", &adam::beta_1}`, one per hyperparameter
//     (double or bool members, `learning_rate` first), each visited once wherever the
//     hyperparameters go: the Keras config, the parameter servers' `create` message, the
//     processes' agreement check and the registry's reading of a config;
//   - `slot_names()`: the slots it keeps per variable, at most three, as
//     backend::update_tensors' slot_a, slot_b and slot_c (nullptr: none), Keras's names
//     ("momentum", "velocity"): the slots' paths are Keras's ("adam/dense_kernel_momentum");
//   - `update<B>(const step<B>&) const`: one step of every listed variable, on backend B;
// and, where it has them,
//   - `keras_module`: the module Keras finds the class in (the library's: "keras.optimizers");
//     without it the `.keras` config names the class as registered (Keras's
//     `register_keras_serializable`), its module null: `keras_registered_name` ("user>Signum"),
//     else Keras's default package's "Custom>" and the class name;
//   - `check()`: throws value_error, naming the field, when a value is out of its range;
//   - `weight_decay`, `clipnorm`, `clipvalue`, `global_clipnorm` (doubles, 0: none): Keras's
//     base arguments, which the optimizer state (optimizer<B>) applies before the update: the
//     gradients clipped (each variable's to a norm of at most clipnorm, each value to
//     [-clipvalue, clipvalue], or all of them together to a norm of at most global_clipnorm;
//     one of the three at most, as Keras allows), then w -= w * weight_decay * lr on every
//     variable not excluded (optimizer<B>::exclude_from_weight_decay); written in the Keras
//     config's base part;
//   - `slot_initial_values()`: each slot's initial value (default 0; Adagrad's accumulator 0.1);
//   - `keras_slot_passes()`: in which of Keras's `add_optimizer_variables` calls each slot is
//     made (default all in one, slots kept together per variable; RMSprop makes each kind in a
//     call of its own), which fixes the slots' order in Keras's weights files;
//   - `scalar_name`, `scalar_initial()` and `scalar_after(t, previous)`: one scalar of the
//     optimizer's own, a function of the update count (Nadam's product of momentum factors,
//     Keras's float32 variable "variable", after the slots): its value after update t from
//     that after t - 1. The state derives it from the count (so that a split state, a checkpoint
//     or a restored ps holds it without carrying it); the update receives it in step::scalar.
// optimizer_function<B> (optimizers/function.hpp) holds any such type; the trainer, saving and
// the parameter servers ask nothing else of an optimizer.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../backend/interface.hpp"
#include "../core/errors.hpp"
#include "fields.hpp"
#include "schedules.hpp"

namespace tessel::optimizers {

// A hyperparameter's value as configs and messages carry it.
using value = std::variant<double, bool>;

// What one step gives an optimizer's update: every variable's tensors (its value, updated in
// place, its gradient and its slots, empty where slot_names() has none), the step's number
// counted from 1, and the learning rate it uses.
template <class B>
struct step {
  std::span<const backend::update_tensors<typename B::matrix>> tensors;
  std::size_t iteration = 1;
  double learning_rate = 0.0;
  double scalar = 0.0;  // the optimizer's own scalar after this step, where it has one (Nadam)
};

// An optimizer described as data: Keras's class and module, its name and its hyperparameters
// in its fields' order (learning_rate first).
struct config {
  std::string class_name;
  std::string name;
  std::string module;           // empty: a class Keras finds as registered (a user's)
  std::string registered_name;  // a user's: "Custom>Signum", or its keras_registered_name
  std::vector<std::pair<std::string, value>> values;
  // The learning rate's schedule (keras.optimizers.schedules), where it has one: `values` then
  // holds its first learning rate.
  std::optional<schedule_config> schedule;
  double weight_decay = 0.0;  // Keras's base arguments (0: none)
  double clipnorm = 0.0;
  double clipvalue = 0.0;
  double global_clipnorm = 0.0;
  bool use_ema = false;
  double ema_momentum = 0.99;
  std::int64_t ema_overwrite_frequency = 0;      // 0: None
  std::int64_t gradient_accumulation_steps = 0;  // 0: None
  // The variables' names (their last path component) that weight decay leaves alone, as
  // optimizer<B>::exclude_from_weight_decay was given them (the parameter servers need them).
  std::vector<std::string> exclude_from_weight_decay;

  [[nodiscard]] const value* find(std::string_view key) const {
    for (const auto& [k, v] : values)
      if (k == key) return &v;
    return nullptr;
  }
  // Calls f(name, value) for each of Keras's base arguments, in Keras's order (a double, a bool or
  // an std::int64_t).
  template <class F>
  void for_each_base(F&& f) const {
    bases(*this, f);
  }
  template <class F>
  void for_each_base(F&& f) {
    bases(*this, f);
  }
  // Whether the gradients are clipped by a norm (clipnorm or global_clipnorm).
  [[nodiscard]] bool clips_norms() const noexcept {
    return clipnorm > 0.0 || global_clipnorm > 0.0;
  }
  [[nodiscard]] double learning_rate() const {
    const value* v = find("learning_rate");
    return v != nullptr && std::holds_alternative<double>(*v) ? std::get<double>(*v) : 0.0;
  }
  bool operator==(const config&) const = default;

 private:
  template <class Self, class F>
  static void bases(Self& self, F& f) {
    f("weight_decay", self.weight_decay);
    f("clipnorm", self.clipnorm);
    f("clipvalue", self.clipvalue);
    f("global_clipnorm", self.global_clipnorm);
    f("use_ema", self.use_ema);
    f("ema_momentum", self.ema_momentum);
    f("ema_overwrite_frequency", self.ema_overwrite_frequency);
    f("gradient_accumulation_steps", self.gradient_accumulation_steps);
  }
};

// The compile-time checks of the protocol, one member at a time, each naming what is missing.
template <class O, class B>
concept optimizer_for = std::copy_constructible<O> && requires(const O& o, const step<B>& s) {
  {std::string_view(O::class_name)};
  {std::string_view(O::name)};
  { o.learning_rate } -> std::convertible_to<double>;
  requires has_fields<O>;
  { o.slot_names() } -> std::same_as<std::array<const char*, 3>>;
  o.template update<B>(s);
};

// Calls f(name, member reference) for each of Keras's base arguments O has as a member.
template <class O, class F>
constexpr void for_each_base_member(O& o, F&& f) {
  if constexpr (requires { o.weight_decay; }) f("weight_decay", o.weight_decay);
  if constexpr (requires { o.clipnorm; }) f("clipnorm", o.clipnorm);
  if constexpr (requires { o.clipvalue; }) f("clipvalue", o.clipvalue);
  if constexpr (requires { o.global_clipnorm; }) f("global_clipnorm", o.global_clipnorm);
  if constexpr (requires { o.use_ema; }) f("use_ema", o.use_ema);
  if constexpr (requires { o.ema_momentum; }) f("ema_momentum", o.ema_momentum);
  if constexpr (requires { o.ema_overwrite_frequency; })
    f("ema_overwrite_frequency", o.ema_overwrite_frequency);
  if constexpr (requires { o.gradient_accumulation_steps; })
    f("gradient_accumulation_steps", o.gradient_accumulation_steps);
}

// O's description as data.
template <class O>
config config_of(const O& o) {
  config c;
  c.class_name = std::string(std::string_view(O::class_name));
  c.name = std::string(std::string_view(O::name));
  if constexpr (requires { O::keras_module; }) c.module = std::string(O::keras_module);
  if constexpr (requires { O::keras_registered_name; })
    c.registered_name = std::string(O::keras_registered_name);
  else if (c.module.empty())
    c.registered_name = "Custom>" + c.class_name;
  for_each_field(o, [&](const char* n, const auto& v, double, double) {
    using T = std::remove_cvref_t<decltype(v)>;
    static_assert(std::is_same_v<T, double> || std::is_same_v<T, bool> ||
                      std::is_same_v<T, learning_rate_value>,
                  "tessel::optimizers::field: a hyperparameter is a double or a bool member (the "
                  "learning rate: a double or a learning_rate_value)");
    if constexpr (std::is_same_v<T, learning_rate_value>) {
      c.values.emplace_back(n, value(static_cast<double>(v)));
      if (v.schedule()) c.schedule = v.schedule().config();
    } else {
      c.values.emplace_back(n, value(v));
    }
  });
  for_each_base_member(o, [&](const char* n, const auto& v) {
    c.for_each_base([&](const char* k, auto& to) {
      if (std::string_view(k) == n) to = static_cast<std::remove_cvref_t<decltype(to)>>(v);
    });
  });
  return c;
}

// The range checks of O's numeric fields, then O's own check().
template <class O>
void check(const O& o, std::string_view where) {
  for_each_field(o, [&](const char* n, const auto& field_value, double low, double high) {
    using T = std::remove_cvref_t<decltype(field_value)>;
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, learning_rate_value>) {
      const auto v = static_cast<double>(field_value);
      if (!(v >= low && v <= high))  // also false for NaN
        throw value_error(std::string(where) + ": " + std::string(O::class_name) + "'s " + n +
                          " is " + number_text(v) + "; it must be in [" + number_text(low) + ", " +
                          number_text(high) + "].");
    }
  });
  auto base = [&](const char* n, double v) {
    if (!(v >= 0.0 && v <= std::numeric_limits<double>::max()))
      throw value_error(std::string(where) + ": " + std::string(O::class_name) + "'s " + n +
                        " is " + number_text(v) + "; it must be 0 (none) or more.");
  };
  for_each_base_member(o, [&](const char* n, const auto& v) {
    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(v)>, bool>)
      base(n, static_cast<double>(v));
  });
  // Keras's rules and words.
  const config c = config_of(o);
  if (c.gradient_accumulation_steps == 1)
    throw value_error(std::string(where) +
                      ": `gradient_accumulation_steps` must be an integer >= 2. Received: "
                      "gradient_accumulation_steps=1");
  if (c.ema_momentum > 1.0)
    throw value_error(std::string(where) +
                      ": `ema_momentum` must be in the range [0, 1]. Received: ema_momentum=" +
                      number_text(c.ema_momentum));
  if ((c.clipnorm > 0.0) + (c.clipvalue > 0.0) + (c.global_clipnorm > 0.0) > 1)
    throw value_error(std::string(where) +
                      ": Only one of `clipnorm`, `clipvalue` and "
                      "`global_clipnorm` can be set. Received: clipnorm=" +
                      number_text(c.clipnorm) + ", clipvalue=" + number_text(c.clipvalue) +
                      ", global_clipnorm=" + number_text(c.global_clipnorm));
  if constexpr (requires { o.check(); }) o.check();
}

// An O from a config (a `.keras` file's, a ps message's): each of O's fields from the value of
// its name, of its type (a missing one keeps O's default), every other entry refused, the
// result checked. Throws value_error naming the field.
template <class O>
O from_config(const config& c, std::string_view where) {
  O o{};
  std::size_t used = 0;
  for_each_field(o, [&](const char* n, auto& v, double, double) {
    const value* given = c.find(n);
    if (given == nullptr) return;
    ++used;
    using T = std::remove_cvref_t<decltype(v)>;
    using held = std::conditional_t<std::is_same_v<T, learning_rate_value>, double, T>;
    if (!std::holds_alternative<held>(*given))
      throw value_error(std::string(where) + ": " + std::string(O::class_name) + "'s " + n +
                        " must be " + (std::is_same_v<T, bool> ? "true or false" : "a number") +
                        ".");
    v = std::get<held>(*given);
  });
  // The schedule into the learning rate, which must be able to hold one.
  if (c.schedule) {
    bool held = false;
    for_each_field(o, [&](const char* n, auto& v, double, double) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, learning_rate_value>)
        if (std::string_view(n) == "learning_rate") {
          v = make_schedule(*c.schedule, where);
          held = true;
        }
    });
    if (!held)
      throw value_error(std::string(where) + ": " + std::string(O::class_name) +
                        "'s learning_rate is a number and takes no schedule; declare it as "
                        "tessel::optimizers::learning_rate_value to take one.");
  }
  if (used != c.values.size())
    for (const auto& entry : c.values) {
      bool known = false;
      for_each_field(o, [&](const char* n, const auto&, double, double) {
        known = known || entry.first == n;
      });
      if (!known)
        throw value_error(std::string(where) + ": " + std::string(O::class_name) +
                          " has no argument '" + entry.first + "'.");
    }
  // Each base argument to its member; one O does not have, given other than Keras's default, is
  // refused.
  const config defaults{};
  c.for_each_base([&](const char* k, const auto& given) {
    using G = std::remove_cvref_t<decltype(given)>;
    bool found = false;
    for_each_base_member(o, [&](const char* n, auto& member) {
      if (std::string_view(k) != n) return;
      found = true;
      member = static_cast<std::remove_cvref_t<decltype(member)>>(given);
    });
    G fallback{};
    defaults.for_each_base([&](const char* d, const auto& v) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, G>)
        if (std::string_view(d) == k) fallback = v;
    });
    if (!found && given != fallback)
      throw value_error(std::string(where) + ": " + std::string(O::class_name) +
                        " has no argument '" + k + "'.");
  });
  check(o, where);
  return o;
}

// The number of values of a backend matrix (a variable's block, its gradient, a slot).
template <class B>
std::size_t elements(const typename B::matrix& m) {
  return B::rows(m) * B::cols(m);
}

// The slots an optimizer keeps per variable: its slot names that are not null.
constexpr std::size_t count_slots(const std::array<const char*, 3>& names) noexcept {
  std::size_t n = 0;
  for (const char* name : names) n += name != nullptr;
  return n;
}

}  // namespace tessel::optimizers
