// optimizers: Keras 3's SGD, Adam and RMSprop (same arguments, defaults and update formulas).
// The hyperparameters are plain structs; `optimizer<B>` holds the state (slots, iterations).
#pragma once

#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "backend/default.hpp"
#include "core/errors.hpp"
#include "layers/layer.hpp"

namespace tessel {

namespace optimizers {
struct sgd {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  static constexpr std::string_view name = "SGD";
};
struct adam {
  double learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  static constexpr std::string_view name = "Adam";
};
struct rmsprop {
  double learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  static constexpr std::string_view name = "RMSprop";
};
}  // namespace optimizers

// What compile() accepts as an optimizer: one of the structs above, or its Keras name.
class optimizer_spec {
 public:
  using value_type = std::variant<optimizers::sgd, optimizers::adam, optimizers::rmsprop>;
  optimizer_spec(optimizers::sgd o) : value_(o) {}       // NOLINT
  optimizer_spec(optimizers::adam o) : value_(o) {}      // NOLINT
  optimizer_spec(optimizers::rmsprop o) : value_(o) {}   // NOLINT
  optimizer_spec(const char* n) : optimizer_spec(std::string_view(n)) {}  // NOLINT
  optimizer_spec(std::string_view n) : value_(from_name(n)) {}           // NOLINT
  const value_type& value() const { return value_; }

 private:
  static value_type from_name(std::string_view n) {
    if (n == "sgd" || n == "SGD") return optimizers::sgd{};
    if (n == "adam" || n == "Adam") return optimizers::adam{};
    if (n == "rmsprop" || n == "RMSprop") return optimizers::rmsprop{};
    throw value_error("Could not interpret optimizer identifier: " + std::string(n) +
                      ". Use sgd, adam or rmsprop.");
  }
  value_type value_;
};

template <class B = default_backend>
class optimizer {
 public:
  explicit optimizer(optimizer_spec spec) : spec_(std::move(spec)) {}

  const optimizer_spec& spec() const { return spec_; }
  std::size_t iterations() const { return iterations_; }

  // Creates the slots for these variables (Keras's optimizer.build); apply() calls it when needed.
  void build(const std::vector<variable<B>*>& vars) {
    if (!slots_.empty()) return;
    for (variable<B>* v : vars) {
      slot s;
      auto add = [&](const char* what) {
        std::string base = v->path;
        for (char& c : base)
          if (c == '/') c = '_';
        variable<B>& x = state_.emplace_back();
        x.path = std::string(prefix()) + "/" + base + "_" + what;
        x.shape = v->shape;
        x.initializer = "zeros";
        x.trainable = false;
        // On the same shards as the variable: the block's shape, zeroed.
        x.value = v->value.like(
            B::make_zeros(x.path, B::rows(v->value.local()), B::cols(v->value.local())));
        return &x;
      };
      std::visit(
          [&](const auto& o) {
            using O = std::decay_t<decltype(o)>;
            if constexpr (std::is_same_v<O, optimizers::sgd>) {
              if (o.momentum != 0.0) s.a = add("momentum");
            } else if constexpr (std::is_same_v<O, optimizers::adam>) {
              s.a = add("momentum");
              s.b = add("velocity");
            } else {
              s.a = add("velocity");
              if (o.momentum > 0.0) s.b = add("momentum");
              if (o.centered) s.c = add("average_gradient");
            }
          },
          spec_.value());
      slots_.push_back(s);
    }
  }

  // One step on each variable from its `gradient` (Keras's optimizer.apply(grads, variables)):
  // one backend update over all of them.
  void apply(const std::vector<variable<B>*>& vars) {
    build(vars);
    if (vars.size() != slots_.size())
      throw value_error("optimizer.apply: built for " + std::to_string(slots_.size()) +
                        " variables, called with " + std::to_string(vars.size()) + ".");
    ++iterations_;
    update_all(vars);
  }

  // The optimizer's own variables (slots), in creation order.
  std::vector<variable<B>*> variables() {
    std::vector<variable<B>*> out;
    for (auto& v : state_) out.push_back(&v);
    return out;
  }

 private:
  std::string_view prefix() const {
    return std::visit(
        [](const auto& o) -> std::string_view {
          using O = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<O, optimizers::sgd>) return "sgd";
          else if constexpr (std::is_same_v<O, optimizers::adam>) return "adam";
          else return "rmsprop";
        },
        spec_.value());
  }
  // The update of vars[i] with slots_[i], as one backend call over all of them.
  void update_all(const std::vector<variable<B>*>& vars) {
    using matrix = typename B::matrix;
    const auto t = static_cast<double>(iterations_);
    tensors_.clear();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const slot& s = slots_[i];
      auto local = [](const variable<B>* x) { return x ? x->value.local() : matrix(); };
      tensors_.push_back({vars[i]->value.local(), vars[i]->gradient, local(s.a), local(s.b),
                          local(s.c)});
    }
    const std::span<const backend::update_tensors<matrix>> u(tensors_);
    std::visit(
        [&](const auto& o) {
          using O = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<O, optimizers::sgd>) {
            B::sgd_update(u, static_cast<float>(o.learning_rate), static_cast<float>(o.momentum),
                          o.nesterov);
          } else if constexpr (std::is_same_v<O, optimizers::adam>) {
            const double alpha = o.learning_rate * std::sqrt(1.0 - std::pow(o.beta_2, t)) /
                                 (1.0 - std::pow(o.beta_1, t));
            B::adam_update(u, static_cast<float>(alpha), static_cast<float>(o.beta_1),
                           static_cast<float>(o.beta_2), static_cast<float>(o.epsilon));
          } else {
            B::rmsprop_update(u, static_cast<float>(o.learning_rate), static_cast<float>(o.rho),
                              static_cast<float>(o.momentum), static_cast<float>(o.epsilon),
                              o.centered);
          }
        },
        spec_.value());
  }
  struct slot {
    variable<B>* a = nullptr;
    variable<B>* b = nullptr;
    variable<B>* c = nullptr;
  };
  optimizer_spec spec_;
  variable_store<B> state_;
  std::vector<slot> slots_;
  std::vector<backend::update_tensors<typename B::matrix>> tensors_;  // reused every step
  std::size_t iterations_ = 0;
};

}  // namespace tessel
