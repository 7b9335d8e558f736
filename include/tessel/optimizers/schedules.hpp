// keras.optimizers.schedules: learning-rate schedules, each a type with Keras's class name, its
// arguments as fields (as the optimizers': visited once by the `.keras` config, the parameter
// servers' messages, the processes' agreement and the registry) and its value at a step, in
// Keras's float32 arithmetic; `learning_rate_schedule` holds any of them, the library's or a
// user's; `learning_rate_value` is what an optimizer's `learning_rate` holds: a number or a
// schedule (`adam{.learning_rate = schedules::cosine_decay{.initial_learning_rate = 0.1,
// .decay_steps = 1000}}`).
//
// A schedule is a copyable type with
//   - `class_name` ("CosineDecay") and `name`, Keras's default name ("CosineDecay";
//     PiecewiseConstantDecay's is "PiecewiseConstant");
//   - `fields()`: a static tuple of `field{"decay_steps", &cosine_decay::decay_steps, low, high}`
//     over double, bool, std::int64_t, std::vector<double> and std::optional<double> (None)
//     members;
//   - `float operator()(std::int64_t step) const`: the learning rate of the step that follows
//     `step` updates (Keras calls the schedule with the optimizer's iteration count);
// and, where it has them, `keras_module` (the library's: "keras.optimizers.schedules"),
// `keras_registered_name` and `check()` (throws value_error).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/errors.hpp"
#include "fields.hpp"

namespace tessel::optimizers {

// A schedule's argument as configs carry it: None, a number, a flag, an integer or a list.
using schedule_value =
    std::variant<std::monostate, double, bool, std::int64_t, std::vector<double>>;

// A schedule described as data: Keras's class, module and name, and its arguments in its
// fields' order.
struct schedule_config {
  std::string class_name;
  std::string name;
  std::string module;           // empty: a user's class, found as registered
  std::string registered_name;  // a user's: "Custom>WarmupRsqrt", or its keras_registered_name
  std::vector<std::pair<std::string, schedule_value>> values;
  bool operator==(const schedule_config&) const = default;
};

template <class S>
concept schedule = std::copy_constructible<S> && has_fields<S> &&
    requires(const S& s, std::int64_t step) {
  {std::string_view(S::class_name)};
  {std::string_view(S::name)};
  { s(step) } -> std::same_as<float>;
};

class learning_rate_schedule;
class learning_rate_value;
// A schedule type, other than the holders below (whose converting constructors take one).
template <class S>
concept schedule_type = !std::is_same_v<S, learning_rate_schedule> &&
                        !std::is_same_v<S, learning_rate_value> && schedule<S>;

namespace detail {
template <class T>
inline constexpr bool schedule_field_type =
    std::is_same_v<T, double> || std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t> ||
    std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::optional<double>>;

template <class T>
schedule_value to_value(const T& v) {
  static_assert(schedule_field_type<T>,
                "tessel::optimizers::schedules: a schedule's field is a double, bool, "
                "std::int64_t, std::vector<double> or std::optional<double> member");
  if constexpr (std::is_same_v<T, std::optional<double>>)
    return v ? schedule_value(*v) : schedule_value(std::monostate{});
  else
    return schedule_value(v);
}
// `given` into `v` when of its type (an integer where a number is asked, and None for an
// optional, too); false otherwise.
template <class T>
bool from_value(const schedule_value& given, T& v) {
  if constexpr (std::is_same_v<T, std::optional<double>>) {
    if (std::holds_alternative<std::monostate>(given)) return v.reset(), true;
    double d = 0;
    if (!from_value(given, d)) return false;
    return v = d, true;
  } else if constexpr (std::is_same_v<T, double>) {
    if (const auto* i = std::get_if<std::int64_t>(&given)) return v = static_cast<double>(*i), true;
    if (const auto* d = std::get_if<double>(&given)) return v = *d, true;
    return false;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    if (const auto* i = std::get_if<std::int64_t>(&given)) return v = *i, true;
    // (A whole number written as a float: 1000.0.)
    if (const auto* d = std::get_if<double>(&given);
        d != nullptr && std::floor(*d) == *d && std::fabs(*d) < 9.0e15)
      return v = static_cast<std::int64_t>(*d), true;
    return false;
  } else {
    if (const auto* x = std::get_if<T>(&given)) return v = *x, true;
    return false;
  }
}
}  // namespace detail

// S's description as data.
template <schedule S>
schedule_config schedule_config_of(const S& s) {
  schedule_config c;
  c.class_name = std::string(std::string_view(S::class_name));
  c.name = std::string(std::string_view(S::name));
  if constexpr (requires { S::keras_module; }) c.module = std::string(S::keras_module);
  if constexpr (requires { S::keras_registered_name; })
    c.registered_name = std::string(S::keras_registered_name);
  else if (c.module.empty())
    c.registered_name = "Custom>" + c.class_name;
  for_each_field(s, [&](const char* n, const auto& v, double, double) {
    c.values.emplace_back(n, detail::to_value(v));
  });
  return c;
}

// The range checks of S's numeric fields, then S's own check().
template <schedule S>
void check_schedule(const S& s, std::string_view where) {
  for_each_field(s, [&](const char* n, const auto& v, double low, double high) {
    using T = std::remove_cvref_t<decltype(v)>;
    std::optional<double> x;
    if constexpr (std::is_same_v<T, double> || std::is_same_v<T, std::int64_t>)
      x = static_cast<double>(v);
    else if constexpr (std::is_same_v<T, std::optional<double>>)
      x = v;
    if (x && !(*x >= low && *x <= high))
      throw value_error(std::string(where) + ": " + std::string(S::class_name) + "'s " + n +
                        " is " + number_text(*x) + "; it must be in [" + number_text(low) + ", " +
                        number_text(high) + "].");
  });
  if constexpr (requires { s.check(where); }) s.check(where);
}

// An S from a config: each field from the value of its name (a missing one keeps S's default),
// every other entry refused, the result checked. Throws value_error naming the field.
template <schedule S>
S schedule_from_config(const schedule_config& c, std::string_view where) {
  S s{};
  for (const auto& entry : c.values) {
    const std::string& key = entry.first;
    const schedule_value& given = entry.second;
    bool known = false;
    for_each_field(s, [&](const char* n, auto& v, double, double) {
      if (key != n) return;
      known = true;
      if (!detail::from_value(given, v))
        throw value_error(std::string(where) + ": " + std::string(S::class_name) + "'s " + n +
                          " is not of its type.");
    });
    if (!known)
      throw value_error(std::string(where) + ": " + std::string(S::class_name) +
                        " has no argument '" + key + "'.");
  }
  check_schedule(s, where);
  return s;
}

// Any schedule, behind one interface (empty: none).
class learning_rate_schedule {
 public:
  learning_rate_schedule() = default;
  template <schedule_type S>
  learning_rate_schedule(S s)  // NOLINT: a schedule converts, as Keras's optimizers take one
      : impl_(std::make_shared<const holder<S>>(std::move(s))) {}

  [[nodiscard]] explicit operator bool() const noexcept { return impl_ != nullptr; }
  // The learning rate after `step` updates, in float32 as Keras computes it.
  [[nodiscard]] float operator()(std::int64_t step) const { return impl_->at(step); }
  [[nodiscard]] const schedule_config& config() const noexcept { return impl_->desc; }
  template <class S>
  [[nodiscard]] const S* as() const noexcept {
    const auto* h = dynamic_cast<const holder<S>*>(impl_.get());
    return h != nullptr ? &h->value : nullptr;
  }

 private:
  struct base {
    schedule_config desc;
    virtual ~base() = default;
    virtual float at(std::int64_t step) const = 0;
  };
  template <class S>
  struct holder final : base {
    S value;
    explicit holder(S s) : value(std::move(s)) {
      check_schedule(value, "the learning-rate schedule");
      this->desc = schedule_config_of(value);
    }
    float at(std::int64_t step) const override { return value(step); }
  };
  std::shared_ptr<const base> impl_;
};

// What an optimizer's `learning_rate` holds: a number (Keras's float), or a schedule, whose
// value at each step the optimizer takes (Keras's LearningRateSchedule).
class learning_rate_value {
 public:
  learning_rate_value(double v = 0.0) noexcept : value_(v) {}  // NOLINT: a number converts
  template <schedule_type S>
  learning_rate_value(S s)  // NOLINT: so does a schedule
      : learning_rate_value(learning_rate_schedule(std::move(s))) {}
  learning_rate_value(learning_rate_schedule s)  // NOLINT
      : value_(static_cast<double>(s(0))), schedule_(std::move(s)) {}
  // The number, or the schedule's first value.
  operator double() const noexcept { return value_; }  // NOLINT
  // The schedule (empty when a number).
  [[nodiscard]] const learning_rate_schedule& schedule() const noexcept { return schedule_; }

 private:
  double value_;
  learning_rate_schedule schedule_;
};

// The schedules a program registered, by class name.
using schedule_maker =
    std::function<learning_rate_schedule(const schedule_config&, std::string_view)>;
inline std::map<std::string, schedule_maker, std::less<>>& registered_schedules() {
  static std::map<std::string, schedule_maker, std::less<>> table;
  return table;
}

namespace schedules {

// keras.optimizers.schedules.ExponentialDecay: lr0 * rate^(step / decay_steps) (the exponent
// floored with staircase).
struct exponential_decay {
  double initial_learning_rate = 0.0;
  std::int64_t decay_steps = 1;
  double decay_rate = 0.0;
  bool staircase = false;

  static constexpr std::string_view class_name = "ExponentialDecay";
  static constexpr std::string_view name = "ExponentialDecay";
  static constexpr std::string_view keras_module = "keras.optimizers.schedules";
  static constexpr auto fields() {
    constexpr double steps_max = 9.0e15;
    return std::tuple{field{"initial_learning_rate", &exponential_decay::initial_learning_rate},
                      field{"decay_steps", &exponential_decay::decay_steps, 1.0, steps_max},
                      field{"decay_rate", &exponential_decay::decay_rate},
                      field{"staircase", &exponential_decay::staircase}};
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    float p = static_cast<float>(step) / static_cast<float>(decay_steps);
    if (staircase) p = std::floor(p);
    return static_cast<float>(initial_learning_rate) * std::pow(static_cast<float>(decay_rate), p);
  }
};

// keras.optimizers.schedules.InverseTimeDecay: lr0 / (1 + rate * step / decay_steps).
struct inverse_time_decay {
  double initial_learning_rate = 0.0;
  std::int64_t decay_steps = 1;
  double decay_rate = 0.0;
  bool staircase = false;

  static constexpr std::string_view class_name = "InverseTimeDecay";
  static constexpr std::string_view name = "InverseTimeDecay";
  static constexpr std::string_view keras_module = "keras.optimizers.schedules";
  static constexpr auto fields() {
    constexpr double steps_max = 9.0e15;
    return std::tuple{field{"initial_learning_rate", &inverse_time_decay::initial_learning_rate},
                      field{"decay_steps", &inverse_time_decay::decay_steps, 1.0, steps_max},
                      field{"decay_rate", &inverse_time_decay::decay_rate},
                      field{"staircase", &inverse_time_decay::staircase}};
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    float p = static_cast<float>(step) / static_cast<float>(decay_steps);
    if (staircase) p = std::floor(p);
    return static_cast<float>(initial_learning_rate) / (1.0f + static_cast<float>(decay_rate) * p);
  }
};

// keras.optimizers.schedules.PiecewiseConstantDecay: values[0] up to boundaries[0] (inclusive),
// values[i] in (boundaries[i-1], boundaries[i]], the last value after the last boundary.
struct piecewise_constant_decay {
  std::vector<double> boundaries;
  std::vector<double> values;

  static constexpr std::string_view class_name = "PiecewiseConstantDecay";
  static constexpr std::string_view name = "PiecewiseConstant";
  static constexpr std::string_view keras_module = "keras.optimizers.schedules";
  static constexpr auto fields() {
    return std::tuple{field{"boundaries", &piecewise_constant_decay::boundaries},
                      field{"values", &piecewise_constant_decay::values}};
  }
  void check(std::string_view where) const {
    if (values.size() != boundaries.size() + 1)
      throw value_error(std::string(where) +
                        ": The length of boundaries should be 1 less than the length of values. "
                        "Received: boundaries=" +
                        std::to_string(boundaries.size()) +
                        " values, values=" + std::to_string(values.size()) + " values.");
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    const auto s = static_cast<double>(step);
    std::size_t i = 0;
    while (i < boundaries.size() && s > boundaries[i]) ++i;
    return static_cast<float>(values[i]);
  }
};

// keras.optimizers.schedules.PolynomialDecay: (lr0 - end) * (1 - step / decay_steps)^power +
// end, the step held at decay_steps (or, with cycle, decay_steps stretched to the next multiple
// of itself past the step).
struct polynomial_decay {
  double initial_learning_rate = 0.0;
  std::int64_t decay_steps = 1;
  double end_learning_rate = 0.0001;
  double power = 1.0;
  bool cycle = false;

  static constexpr std::string_view class_name = "PolynomialDecay";
  static constexpr std::string_view name = "PolynomialDecay";
  static constexpr std::string_view keras_module = "keras.optimizers.schedules";
  static constexpr auto fields() {
    constexpr double steps_max = 9.0e15;
    return std::tuple{field{"initial_learning_rate", &polynomial_decay::initial_learning_rate},
                      field{"decay_steps", &polynomial_decay::decay_steps, 1.0, steps_max},
                      field{"end_learning_rate", &polynomial_decay::end_learning_rate},
                      field{"power", &polynomial_decay::power},
                      field{"cycle", &polynomial_decay::cycle}};
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    const auto lr0 = static_cast<float>(initial_learning_rate);
    const auto end = static_cast<float>(end_learning_rate);
    auto t = static_cast<float>(step);
    auto steps = static_cast<float>(decay_steps);
    if (cycle)
      steps *= t == 0.0f ? 1.0f : std::ceil(t / static_cast<float>(decay_steps));
    else
      t = std::min(t, steps);
    const float p = t / steps;
    return (lr0 - end) * std::pow(1.0f - p, static_cast<float>(power)) + end;
  }
};

// keras.optimizers.schedules.CosineDecay: with a warmup_target, a linear warmup from lr0 to it
// over warmup_steps, then the cosine from it; without, the cosine from lr0:
// lr * ((1 - alpha) * 0.5 * (1 + cos(pi * t / decay_steps)) + alpha), t held at decay_steps.
struct cosine_decay {
  double initial_learning_rate = 0.0;
  std::int64_t decay_steps = 1;
  double alpha = 0.0;
  std::optional<double> warmup_target;  // None: no warmup
  std::int64_t warmup_steps = 0;

  static constexpr std::string_view class_name = "CosineDecay";
  static constexpr std::string_view name = "CosineDecay";
  static constexpr std::string_view keras_module = "keras.optimizers.schedules";
  static constexpr auto fields() {
    constexpr double steps_max = 9.0e15;
    return std::tuple{field{"initial_learning_rate", &cosine_decay::initial_learning_rate},
                      field{"decay_steps", &cosine_decay::decay_steps, 1.0, steps_max},
                      field{"alpha", &cosine_decay::alpha},
                      field{"warmup_target", &cosine_decay::warmup_target},
                      field{"warmup_steps", &cosine_decay::warmup_steps, 0.0, steps_max}};
  }
  [[nodiscard]] float operator()(std::int64_t step) const {
    const auto steps = static_cast<float>(decay_steps);
    auto t = static_cast<float>(step);
    const auto decayed = [&](float s, float from) {
      const float fraction = s / steps;
      const float cosine = 0.5f * (1.0f + std::cos(std::numbers::pi_v<float> * fraction));
      const auto a = static_cast<float>(alpha);
      return from * ((1.0f - a) * cosine + a);
    };
    const auto lr0 = static_cast<float>(initial_learning_rate);
    if (!warmup_target) return decayed(std::min(t, steps), lr0);
    const auto target = static_cast<float>(*warmup_target);
    const auto warmup = static_cast<float>(warmup_steps);
    t = std::min(t, steps + warmup);
    if (t < warmup) return (target - lr0) * (t / warmup) + lr0;
    return decayed(t - warmup, target);
  }
};

using library = std::tuple<exponential_decay, inverse_time_decay, piecewise_constant_decay,
                           polynomial_decay, cosine_decay>;

}  // namespace schedules

// Makes a user's schedule type known by its class name, so that a config (a parameter server's
// `create` message) can make one. Returns true (for an `inline const bool` at namespace scope).
template <schedule S>
bool register_schedule() {
  registered_schedules()[std::string(std::string_view(S::class_name))] =
      [](const schedule_config& c, std::string_view where) {
        return learning_rate_schedule(schedule_from_config<S>(c, where));
      };
  return true;
}

// The schedule a config describes, by its class name: a registered one, else the library's.
// Throws value_error naming an unknown class or a field out of place.
inline learning_rate_schedule make_schedule(const schedule_config& c, std::string_view where) {
  const auto& table = registered_schedules();
  if (const auto it = table.find(c.class_name); it != table.end()) return it->second(c, where);
  learning_rate_schedule out;
  std::apply(
      [&](auto... s) {
        const auto make = [&]<class S>(const S&) {
          if (!out && c.class_name == S::class_name) out = schedule_from_config<S>(c, where);
        };
        (make(s), ...);
      },
      schedules::library{});
  if (out) return out;
  throw value_error(std::string(where) + ": the learning-rate schedule '" + c.class_name +
                    "' is not one this program knows: the library's are ExponentialDecay, "
                    "InverseTimeDecay, PiecewiseConstantDecay, PolynomialDecay and CosineDecay; "
                    "register a user's with tessel::optimizers::register_schedule<S>() in every "
                    "process (the parameter servers too).");
}

}  // namespace tessel::optimizers
