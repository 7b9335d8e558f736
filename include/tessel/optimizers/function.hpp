// optimizer_function<B>: the compiled optimizer on backend B, any type of the optimizer protocol
// (optimizers/protocol.hpp) behind one interface, as loss_function is for losses; and the
// registry that makes an optimizer from its name or its config (a `compile("adam")`, a parameter
// server's `create` message): the library's optimizers, and the ones a user registers.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <variant>

#include "../core/agreement.hpp"
#include "../core/diagnostics.hpp"
#include "../core/errors.hpp"
#include "adagrad.hpp"
#include "adam.hpp"
#include "adamax.hpp"
#include "adamw.hpp"
#include "lion.hpp"
#include "nadam.hpp"
#include "protocol.hpp"
#include "rmsprop.hpp"
#include "sgd.hpp"

namespace tessel {

template <class B>
class optimizer_function;
template <class B>
class optimizer;

namespace optimizers {

// Types optimizer_function never converts from (checked first, so that asking whether an
// optimizer<B> copies does not ask whether it is an optimizer type).
template <class T>
inline constexpr bool never_an_optimizer = false;
template <class B>
inline constexpr bool never_an_optimizer<optimizer<B>> = true;
template <class B>
inline constexpr bool never_an_optimizer<optimizer_function<B>> = true;

// The library's optimizers, found by name without registering.
template <class... O>
struct type_list {};
using library = type_list<sgd, adam, rmsprop, adamw, adagrad, adamax, nadam, lion>;

// What the registry keeps of an optimizer type: how to make one from a config.
template <class B>
using maker = std::function<optimizer_function<B>(const config&, std::string_view where)>;

// The optimizers a program registered on backend B, by class name: its name, its maker.
template <class B>
struct registration {
  std::string name;
  maker<B> make;
};
template <class B>
std::map<std::string, registration<B>, std::less<>>& registered() {
  static std::map<std::string, registration<B>, std::less<>> table;
  return table;
}

// Keras's names of a class: "Adam", or the lower-case name ("adam").
template <class O>
bool names(std::string_view n) {
  return n == std::string_view(O::class_name) || n == std::string_view(O::name);
}

}  // namespace optimizers

// Makes a user's optimizer type known by its class name (and its name) on backend B, so that a
// parameter server, a `compile("signum")` or a config can make one; the library's are known
// already. Returns true (for an `inline const bool` at namespace scope).
template <class O, class B>
requires optimizers::optimizer_for<O, B>
bool register_optimizer() {
  optimizers::registered<B>()[std::string(std::string_view(O::class_name))] = {
      std::string(std::string_view(O::name)),
      [](const optimizers::config& c, std::string_view where) {
        return optimizer_function<B>(optimizers::from_config<O>(c, where));
      }};
  return true;
}

template <class B>
class optimizer_function {
 public:
  template <class O>
  requires(!optimizers::never_an_optimizer<O>) &&
      optimizers::optimizer_for<O, B> optimizer_function(
          O o)  // NOLINT: an optimizer object converts, as Keras's compile takes one
      : impl_(std::make_shared<const holder<O>>(std::move(o))) {}
  // Keras's name of one of the library's optimizers or of a registered one ("adam", "Adam"),
  // with its defaults.
  optimizer_function(const char* name) : optimizer_function(std::string_view(name)) {}  // NOLINT
  optimizer_function(const std::string& name)                                           // NOLINT
      : optimizer_function(std::string_view(name)) {}
  optimizer_function(std::string_view name) : optimizer_function(by_name(name)) {}  // NOLINT
  // Anything else is a compile error naming its type.
  template <class O>
  requires(!optimizers::never_an_optimizer<O>) &&
      (!optimizers::optimizer_for<O, B>)&&(!std::is_convertible_v<O, std::string_view>)
          optimizer_function(O) {  // NOLINT
    static_assert(require<false, diagnostic::not_an_optimizer_on_this_backend<O, B>>);
    static_assert(require<requires { std::string_view(O::class_name), std::string_view(O::name); },
                          diagnostic::optimizer_has_no_class_name_or_name<O>>);
    static_assert(require<requires(const O& o) { double(o.learning_rate); },
                          diagnostic::optimizer_has_no_learning_rate<O>>);
    static_assert(require<optimizers::has_fields<O>, diagnostic::optimizer_has_no_fields<O>>);
    static_assert(require<requires(const O& o) {
      { o.slot_names() } -> std::same_as<std::array<const char*, 3>>;
    },
                          diagnostic::optimizer_has_no_slot_names<O>>);
    static_assert(
        require<requires(const O& o, const optimizers::step<B>& s) { o.template update<B>(s); },
                diagnostic::optimizer_has_no_update_for_this_backend<O, B>>);
  }

  // Keras's class ("Adam"), its name ("adam": the prefix of its variables' paths).
  [[nodiscard]] std::string_view class_name() const noexcept { return impl_->desc.class_name; }
  [[nodiscard]] std::string_view name() const noexcept { return impl_->desc.name; }
  [[nodiscard]] double learning_rate() const noexcept { return impl_->desc.learning_rate(); }
  // The learning rate's schedule (empty when the learning rate is a number).
  [[nodiscard]] const optimizers::learning_rate_schedule& schedule() const noexcept {
    return impl_->schedule;
  }
  // Its description (class, module, hyperparameters in order).
  [[nodiscard]] const optimizers::config& config() const noexcept { return impl_->desc; }
  [[nodiscard]] std::array<const char*, 3> slot_names() const { return impl_->slot_names(); }
  // Each slot's initial value, and the Keras `add_optimizer_variables` call that makes it.
  [[nodiscard]] std::array<double, 3> slot_initial_values() const {
    return impl_->slot_initial_values();
  }
  [[nodiscard]] std::array<int, 3> keras_slot_passes() const { return impl_->keras_slot_passes(); }
  // The optimizer's own scalar (Nadam's): its Keras name (empty: none), its initial value and
  // its value after update t from that after t - 1.
  [[nodiscard]] std::string_view scalar_name() const noexcept { return impl_->scalar_name(); }
  [[nodiscard]] double scalar_initial() const { return impl_->scalar_initial(); }
  [[nodiscard]] double scalar_after(std::size_t t, double previous) const {
    return impl_->scalar_after(t, previous);
  }
  // What every process must hold alike: the type, its name and every hyperparameter.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept { return impl_->fingerprint; }
  // One step of every listed variable.
  void update(const optimizers::step<B>& s) const { impl_->update(s); }
  // The optimizer as an `O`, or null when it is another type.
  template <class O>
  [[nodiscard]] const O* as() const noexcept {
    const auto* h = dynamic_cast<const holder<O>*>(impl_.get());
    return h != nullptr ? &h->value : nullptr;
  }

 private:
  struct base {
    optimizers::config desc;
    optimizers::learning_rate_schedule schedule;
    std::uint64_t fingerprint = 0;
    virtual ~base() = default;
    virtual std::array<const char*, 3> slot_names() const = 0;
    virtual std::array<double, 3> slot_initial_values() const = 0;
    virtual std::array<int, 3> keras_slot_passes() const = 0;
    virtual std::string_view scalar_name() const noexcept = 0;
    virtual double scalar_initial() const = 0;
    virtual double scalar_after(std::size_t t, double previous) const = 0;
    virtual void update(const optimizers::step<B>& s) const = 0;
  };
  template <class O>
  struct holder final : base {
    O value;
    explicit holder(O o) : value(std::move(o)) {
      // Refused as Keras's constructors refuse (a field out of its range, two clip arguments).
      optimizers::check(value, "the optimizer");
      this->desc = optimizers::config_of(value);
      hasher h;
      h.text(typeid(O).name()).text(this->desc.class_name);
      for (const auto& entry : this->desc.values) {
        h.text(entry.first);
        std::visit([&](auto x) { h.value(x); }, entry.second);
      }
      this->desc.for_each_base([&](const char*, auto v) { h.value(v); });
      if (this->desc.schedule) {
        h.text(this->desc.schedule->class_name);
        for (const auto& [k, v] : this->desc.schedule->values) {
          h.text(k).value(v.index());
          std::visit(
              [&](const auto& x) {
                using X = std::remove_cvref_t<decltype(x)>;
                if constexpr (std::is_same_v<X, std::vector<double>>)
                  h.values(std::span<const double>(x));
                else if constexpr (std::is_arithmetic_v<X>)
                  h.value(x);
              },
              v);
        }
      }
      if constexpr (requires { value.learning_rate.schedule(); })
        this->schedule = value.learning_rate.schedule();
      this->fingerprint = h.result();
    }
    std::array<const char*, 3> slot_names() const override { return value.slot_names(); }
    std::array<double, 3> slot_initial_values() const override {
      if constexpr (requires { value.slot_initial_values(); })
        return value.slot_initial_values();
      else
        return {0.0, 0.0, 0.0};
    }
    std::array<int, 3> keras_slot_passes() const override {
      if constexpr (requires { value.keras_slot_passes(); })
        return value.keras_slot_passes();
      else
        return {0, 0, 0};
    }
    void update(const optimizers::step<B>& s) const override { value.template update<B>(s); }
    std::string_view scalar_name() const noexcept override {
      if constexpr (requires { O::scalar_name; })
        return O::scalar_name;
      else
        return {};
    }
    double scalar_initial() const override {
      if constexpr (requires { value.scalar_initial(); })
        return value.scalar_initial();
      else
        return 0.0;
    }
    double scalar_after(std::size_t t, double previous) const override {
      if constexpr (requires { value.scalar_after(t, previous); })
        return value.scalar_after(t, previous);
      else
        return previous;
    }
  };

  // The first of the library's with the name (a recursion over the list, not a fold into an
  // optional, which GCC 12 reads as maybe uninitialized).
  template <class T, class... Rest>
  static optimizer_function library_by_name(std::string_view n, optimizers::type_list<T, Rest...>) {
    if (optimizers::names<T>(n)) return optimizer_function(T{});
    if constexpr (sizeof...(Rest) > 0)
      return library_by_name(n, optimizers::type_list<Rest...>{});
    else
      throw value_error(
          "Could not interpret optimizer identifier: " + std::string(n) +
          ". Use sgd, adam, rmsprop, adamw, adagrad, adamax, nadam, lion or an optimizer "
          "registered with tessel::register_optimizer<T, B>().");
  }
  static optimizer_function by_name(std::string_view n) {
    for (const auto& entry : optimizers::registered<B>())
      if (n == entry.first || n == entry.second.name)
        return entry.second.make(optimizers::config{}, "compile");
    return library_by_name(n, optimizers::library{});
  }
  std::shared_ptr<const base> impl_;
};

namespace optimizers {

template <class B, class T, class... Rest>
optimizer_function<B> make_library(const config& c, std::string_view where, type_list<T, Rest...>) {
  if (c.class_name == T::class_name) return optimizer_function<B>(from_config<T>(c, where));
  if constexpr (sizeof...(Rest) > 0)
    return make_library<B>(c, where, type_list<Rest...>{});
  else
    throw value_error(std::string(where) + ": the optimizer '" + c.class_name +
                      "' is not one this program knows: the library's are SGD, Adam, RMSprop, "
                      "AdamW, Adagrad, Adamax, Nadam and Lion; register a user's with "
                      "tessel::register_optimizer<T, B>() in every process (the parameter "
                      "servers too).");
}

// The optimizer a config describes, by its class name: a registered one, else the library's.
// Throws value_error naming an unknown class or a field out of place.
template <class B>
optimizer_function<B> make_optimizer(const config& c, std::string_view where) {
  const auto& table = registered<B>();
  if (const auto it = table.find(c.class_name); it != table.end()) return it->second.make(c, where);
  return make_library<B>(c, where, library{});
}

}  // namespace optimizers

}  // namespace tessel
