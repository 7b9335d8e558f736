// optimizers: the optimizer protocol (optimizers/protocol.hpp), Keras 3's SGD, Adam and RMSprop
// written against it (same arguments, defaults and update formulas), optimizer_function<B>
// holding any of them or a user's (optimizers/function.hpp), and `optimizer<B>`, the state
// (slots, iterations) a model's optimizer keeps.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/default.hpp"
#include "core/compilation.hpp"
#include "core/errors.hpp"
#include "layers/layer.hpp"
#include "optimizers/adam.hpp"
#include "optimizers/function.hpp"
#include "optimizers/protocol.hpp"
#include "optimizers/rmsprop.hpp"
#include "optimizers/sgd.hpp"
#include "state.hpp"

namespace tessel {

// What compile() accepts as an optimizer on the default backend: any type of the protocol, or
// its Keras name (a model on another backend takes optimizer_function<B>).
using optimizer_spec = optimizer_function<default_backend>;

template <class B = default_backend>
class optimizer {
 public:
  explicit optimizer(optimizer_function<B> spec)
      : spec_(std::move(spec)), learning_rate_(spec_.learning_rate()) {}

  const optimizer_function<B>& spec() const { return spec_; }
  std::size_t iterations() const { return iterations_; }
  // The learning rate the next step uses (the spec's, unless a state set another).
  double learning_rate() const { return learning_rate_; }

  // The slots each trainable variable gets (Adam 2; RMSprop 1 to 3; SGD 0 or 1).
  std::size_t slots_per_variable() const { return optimizers::count_slots(slot_names()); }
  // Keras's name of the optimizer ("adam").
  std::string_view name() const { return spec_.name(); }
  // Creates the slots for these variables (Keras's optimizer.build); apply() calls it when needed.
  void build(const std::vector<variable<B>*>& vars);
  [[nodiscard]] bool built() const noexcept { return !slots_.empty(); }
  // Gives the slots' memory back (their variables go; the counters stay): built() is false
  // until the next build(). A split state (shard_state) releases the whole state a read
  // gathered at the next step, when the parts alone are current.
  void release() noexcept {
    slots_.clear();
    tensors_.clear();
    state_.clear();
  }
  // Sets the iteration count and the learning rate (a state's counters, without its slots).
  void set_counters(std::size_t iterations, double learning_rate) noexcept {
    iterations_ = iterations;
    learning_rate_ = learning_rate;
  }

  // One step on each variable from its `gradient` (Keras's optimizer.apply(grads, variables)):
  // one backend update over all of them.
  void apply(const std::vector<variable<B>*>& vars);

  // The values its slots hold (0 before build()).
  [[nodiscard]] std::size_t state_values() const {
    std::size_t n = 0;
    for (const auto& v : state_) n += v.value.size();
    return n;
  }
  // The optimizer's own variables (slots), in creation order.
  std::vector<variable<B>*> variables() {
    std::vector<variable<B>*> out;
    for (auto& v : state_) out.push_back(&v);
    return out;
  }

  // ---- the state as values (state.hpp) ---------------------------------------------------
  // Keras's optimizer.variables: "<name>/iteration" (int64), "<name>/learning_rate" (float64),
  // then copies of the slots in creation order ("adam/dense_kernel_momentum", ...). Build first.
  state_list<B> state() const { return entries(true); }
  // state() without the copies: the slots share the optimizer's memory, valid until its next
  // step or set_state (saving reads them, and a load writes them, through it).
  state_list<B> state_view() const { return entries(false); }
  // Checks values against state()'s entries (path, dtype, shape, layout), naming the first that
  // differs.
  void check_state(const state_list<B>& values, std::string_view where = "set_state_tree") const {
    detail::check_state_list(entries(false), values, where, "optimizer_variables");
  }
  // Writes a state (as state() gives it) back: each value checked first, then assigned.
  void set_state(const state_list<B>& values, std::string_view where = "set_state_tree");

  // Keras's optimizer.stateless_apply(optimizer_variables, grads, trainable_variables): one step
  // on copies, the arguments unchanged. `optimizer_variables` as state() gives them, `grads` one
  // per trainable variable (its layout); returns the new trainable variables and the new
  // optimizer variables, the iteration count one more. The arithmetic is apply()'s.
  std::pair<state_list<B>, state_list<B>> stateless_apply(const state_list<B>& optimizer_variables,
                                                          const state_list<B>& grads,
                                                          const state_list<B>& trainable) const;

 private:
  using matrix = typename B::matrix;
  using slot = std::array<variable<B>*, 3>;  // backend::update_tensors' slot_a, slot_b, slot_c

  std::string_view prefix() const { return spec_.name(); }
  // The names of the slots a variable gets, as update_tensors' slot_a, slot_b, slot_c (nullptr:
  // none), by the spec's arguments.
  std::array<const char*, 3> slot_names() const { return spec_.slot_names(); }
  // Keras's slot path: "adam/" + the variable's path with '/' as '_' + "_momentum".
  std::string slot_path(const std::string& variable_path, const char* what) const {
    std::string base = variable_path;
    for (char& c : base)
      if (c == '/') c = '_';
    return std::string(prefix()) + "/" + base + "_" + what;
  }
  // The iteration, the learning rate, then the slots: copies of their values, or (copy false)
  // the slots' own tensors, to check a given state against.
  state_list<B> entries(bool copy) const;
  // The update of every entry of `u` in one backend call, at step `t` (counted from 1).
  void update(std::span<const backend::update_tensors<matrix>> u, std::size_t t_count,
              double learning_rate) const;
  optimizer_function<B> spec_;
  double learning_rate_;
  variable_store<B> state_;
  std::vector<slot> slots_;
  std::vector<backend::update_tensors<matrix>> tensors_;  // reused every step
  std::size_t iterations_ = 0;
};

template <class B>
void optimizer<B>::build(const std::vector<variable<B>*>& vars) {
  if (!slots_.empty()) return;
  const auto names = slot_names();
  for (variable<B>* v : vars) {
    slot s{};
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (names[k] == nullptr) continue;
      variable<B>& x = state_.emplace_back();
      x.path = slot_path(v->path, names[k]);
      x.shape = v->shape;
      x.initializer = "zeros";
      x.trainable = false;
      // On the same shards as the variable: the block's shape, zeroed.
      x.value = v->value.like(B::make_zeros(x.path, v->value.block_rows(), v->value.block_cols()));
      s[k] = &x;
    }
    slots_.push_back(s);
  }
}

template <class B>
void optimizer<B>::apply(const std::vector<variable<B>*>& vars) {
  build(vars);
  if (vars.size() != slots_.size())
    throw value_error("optimizer.apply: built for " + std::to_string(slots_.size()) +
                      " variables, called with " + std::to_string(vars.size()) + ".");
  ++iterations_;
  tensors_.clear();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    auto local = [](const variable<B>* x) { return x ? x->value.local() : matrix(); };
    const slot& s = slots_[i];
    tensors_.push_back(
        {vars[i]->value.local(), vars[i]->gradient, local(s[0]), local(s[1]), local(s[2])});
  }
  update(tensors_, iterations_, learning_rate_);
}

template <class B>
void optimizer<B>::set_state(const state_list<B>& values, std::string_view where) {
  check_state(values, where);
  const std::int64_t it = values[0].integer();
  if (it < 0)
    throw value_error(std::string(where) + ": " + values[0].path + " is " + std::to_string(it) +
                      "; an iteration count is at least 0.");
  iterations_ = static_cast<std::size_t>(it);
  learning_rate_ = values[1].real();
  std::size_t i = 2;
  for (auto& v : state_) B::copy(values[i++].tensor().local(), v.value.local());
}

template <class B>
std::pair<state_list<B>, state_list<B>> optimizer<B>::stateless_apply(
    const state_list<B>& optimizer_variables, const state_list<B>& grads,
    const state_list<B>& trainable) const {
  if (optimizer_variables.size() < 2 ||
      optimizer_variables[0].path != std::string(prefix()) + "/iteration")
    throw value_error("stateless_apply: optimizer_variables must start with '" +
                      std::string(prefix()) +
                      "/iteration'; pass the optimizer_variables of get_state_tree().");
  if (grads.size() != trainable.size())
    throw value_error("stateless_apply: " + std::to_string(grads.size()) + " gradients for " +
                      std::to_string(trainable.size()) +
                      " trainable variables; pass one gradient per trainable variable, in "
                      "their order.");
  state_list<B> new_trainable, new_state;
  for (const auto& v : trainable) new_trainable.push_back(copy_of(v));
  for (const auto& v : optimizer_variables) new_state.push_back(copy_of(v));
  const std::int64_t it = new_state[0].integer() + 1;
  new_state[0].value = it;
  const double lr = new_state[1].real();
  const auto names = slot_names();
  std::vector<backend::update_tensors<matrix>> tensors;
  // The update reads every gradient and slot over its variable's block: each must be a tensor
  // of the variable's global shape and block, or the update would read past its end.
  auto same_block = [](const basic_dtensor<B>& a, const basic_dtensor<B>& b) {
    return a.global_shape() == b.global_shape() && B::rows(a.local()) == B::rows(b.local()) &&
           B::cols(a.local()) == B::cols(b.local());
  };
  auto shape_of = [](const state_variable<B>& v) {
    return v.is_tensor() ? to_string(v.tensor().global_shape())
                         : "a " + std::string(v.dtype()) + " scalar";
  };
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const state_variable<B>& g = grads[i];
    const basic_dtensor<B>& w = new_trainable[i].tensor();
    if (!g.is_tensor() || !same_block(g.tensor(), w))
      throw value_error("stateless_apply: grads[" + std::to_string(i) + "] ('" + g.path +
                        "', " + shape_of(g) + ") does not match trainable_variables[" +
                        std::to_string(i) + "] ('" + trainable[i].path + "', " +
                        to_string(w.global_shape()) +
                        "): pass the gradients value_and_grad returns.");
    std::array<matrix, 3> s{};
    for (std::size_t k = 0; k < names.size(); ++k) {
      if (names[k] == nullptr) continue;
      const std::string path = slot_path(trainable[i].path, names[k]);
      const state_variable<B>* slot_value = new_state.find(path);
      if (slot_value == nullptr)
        throw value_error("stateless_apply: optimizer_variables has no '" + path +
                          "' for trainable variable '" + trainable[i].path +
                          "'; pass the optimizer_variables of get_state_tree().");
      if (!slot_value->is_tensor() || !same_block(slot_value->tensor(), w))
        throw value_error("stateless_apply: optimizer_variables' '" + path + "' is " +
                          shape_of(*slot_value) + ", but trainable variable '" +
                          trainable[i].path + "' is " + to_string(w.global_shape()) +
                          " (an optimizer state of another model?); pass the "
                          "optimizer_variables of this model's get_state_tree().");
      s[k] = slot_value->tensor().local();
    }
    tensors.push_back({w.local(), g.tensor().local(), s[0], s[1], s[2]});
  }
  update(tensors, static_cast<std::size_t>(it), lr);
  return {std::move(new_trainable), std::move(new_state)};
}

template <class B>
state_list<B> optimizer<B>::entries(bool copy) const {
  state_list<B> out;
  out.push_back({std::string(prefix()) + "/iteration", {}, static_cast<std::int64_t>(iterations_)});
  out.push_back({std::string(prefix()) + "/learning_rate", {}, learning_rate_});
  for (const auto& v : state_) out.push_back(state_of(v, copy));
  return out;
}

template <class B>
void optimizer<B>::update(std::span<const backend::update_tensors<matrix>> u, std::size_t t_count,
                          double learning_rate) const {
  spec_.update(optimizers::step<B>{u, t_count, learning_rate});
}

#if TESSEL_EXTERN_TEMPLATES
// Compiled once, in tessel::tessel (core/compilation.hpp).
extern template class optimizer<backend::host>;
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
extern template class optimizer<backend::cuda>;  // in tessel::cuda_compiled
#endif

}  // namespace tessel
