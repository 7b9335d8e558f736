// optimizers: the optimizer protocol (optimizers/protocol.hpp), Keras 3's SGD, Adam and RMSprop
// written against it (same arguments, defaults and update formulas), optimizer_function<B>
// holding any of them or a user's (optimizers/function.hpp), and `optimizer<B>`, the state
// (slots, iterations) a model's optimizer keeps.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/default.hpp"
#include "core/compilation.hpp"
#include "core/errors.hpp"
#include "core/regex.hpp"
#include "layers/layer.hpp"
#include "optimizers/bodies.hpp"
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
  // The learning rate the next step uses: the schedule's at the iteration count (Keras calls it
  // with the count before the step), else the spec's, unless a state set another.
  double learning_rate() const {
    return scheduled()
               ? static_cast<double>(spec_.schedule()(static_cast<std::int64_t>(iterations_)))
               : learning_rate_;
  }
  // Whether the learning rate is a schedule: the state then holds no learning-rate variable
  // (Keras's optimizer.variables: the iteration count, then the slots).
  [[nodiscard]] bool scheduled() const noexcept { return static_cast<bool>(spec_.schedule()); }
  // The scalars state() starts with: the iteration count, and the learning rate unless
  // scheduled.
  [[nodiscard]] std::size_t counters() const noexcept { return scheduled() ? 1 : 2; }
  // The scalars state() ends with: the optimizer's own (Nadam's), derived from the update count.
  [[nodiscard]] std::size_t scalars() const noexcept {
    return spec_.scalar_name().empty() ? 0 : 1;
  }
  // The updates taken (the iteration count, over gradient_accumulation_steps when accumulating).
  [[nodiscard]] std::size_t updates() const noexcept { return updates_after(iterations_); }

  // The slots each trainable variable gets (Adam 2; RMSprop 1 to 3; SGD 0 or 1).
  // (With Keras's use_ema and gradient_accumulation_steps, each variable's moving average and
  // gradient accumulator count among them.)
  std::size_t slots_per_variable() const {
    const optimizers::config& c = spec_.config();
    return optimizers::count_slots(slot_names()) + (c.use_ema ? 1 : 0) +
           (c.gradient_accumulation_steps > 0 ? 1 : 0);
  }
  // Keras's name of the optimizer ("adam").
  std::string_view name() const { return spec_.name(); }
  // Creates the slots for these variables (Keras's optimizer.build); apply() calls it when needed.
  void build(const std::vector<variable<B>*>& vars);
  [[nodiscard]] bool built() const noexcept { return !slots_.empty(); }

  // Keras's optimizer.exclude_from_weight_decay(var_names=...): a variable whose name (its
  // path's last component, "bias", "gamma") a pattern searches to (Python's re.search, the
  // layout maps' subset of patterns) keeps its values out of weight decay. Before the first
  // step, as Keras asks.
  void exclude_from_weight_decay(std::vector<std::string> var_names);
  [[nodiscard]] const std::vector<std::string>& weight_decay_exclusions() const noexcept {
    return excluded_;
  }
  // Whether weight decay reaches the variable at `path` (none when the optimizer has none).
  [[nodiscard]] bool decays(const std::string& path) const;
  // The [begin, end) element ranges of each variable of apply() that weight decay reaches, in
  // place of the names' rule: for variables that are parts of several (a split state's).
  using element_ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  void set_decay_ranges(std::vector<element_ranges> ranges) {
    decay_ranges_ = std::move(ranges);
    decay_current_ = false;
  }
  // What clipnorm and global_clipnorm count of the gradients apply() is given where a process
  // holds parts of the variables (a model split over devices, a split state): each tensor's
  // element ranges, each with the variable (of `variables`) it is part of and whether its
  // squares count on this process (one process counts each value), and `sum`, which adds each
  // variable's squared norm over the processes (an all-reduce; null: nothing to add). Unset
  // (`variables` 0): each tensor a whole variable, counted here.
  struct norm_segment {
    std::size_t begin, end, variable;
    bool counts;
  };
  struct gradient_norms {
    std::vector<std::vector<norm_segment>> segments;
    std::size_t variables = 0;
    std::function<void(std::span<double>)> sum;
  };
  void set_gradient_norms(gradient_norms g) { norms_ = std::move(g); }
  // The gradients of `vars` clipped as the next apply() would clip them (clipnorm, clipvalue or
  // global_clipnorm), each variable whole: for a caller that updates elsewhere (a parameter
  // server's worker, before its push).
  void clip_gradients(const std::vector<variable<B>*>& vars) const {
    std::vector<backend::update_tensors<matrix>> u;
    for (const variable<B>* v : vars) u.push_back({v->value.local(), v->gradient, {}, {}, {}});
    clip(u, gradient_norms{});
  }
  // Each slot's place in Keras's optimizer.variables, by the order Keras makes them
  // (state()'s slots, in their order: the pass of Keras's add_optimizer_variables making each).
  [[nodiscard]] std::vector<int> keras_slot_passes() const;
  // Gives the slots' memory back (their variables go; the counters stay): built() is false
  // until the next build(). A split state (shard_state) releases the whole state a read
  // gathered at the next step, when the parts alone are current.
  void release() noexcept {
    decay_current_ = false;
    slots_.clear();
    averages_.clear();
    accumulators_.clear();
    tensors_.clear();
    state_.clear();
  }
  // Keras's optimizer.learning_rate = x: the learning rate of the next steps, held as Keras holds
  // it (a float32 variable). Refused unless finite and at least 0.
  void set_learning_rate(double learning_rate) {
    if (scheduled())
      throw value_error(
          "This optimizer was created with a `LearningRateSchedule` object as its "
          "`learning_rate` constructor argument, hence its learning rate is not settable. If you "
          "need the learning rate to be settable, you should instantiate the optimizer with a "
          "float `learning_rate` argument.");
    if (!(learning_rate >= 0.0 && learning_rate <= std::numeric_limits<float>::max()))
      throw value_error("learning_rate: " + std::to_string(learning_rate) +
                        " is not a learning rate; give a finite number of at least 0.");
    learning_rate_ = static_cast<double>(static_cast<float>(learning_rate));
  }
  // Sets the iteration count and the learning rate (a state's counters, without its slots; the
  // learning rate is the schedule's when scheduled).
  void set_counters(std::size_t iterations, double learning_rate) noexcept {
    iterations_ = iterations;
    learning_rate_ = learning_rate;
  }

  // One step on each variable from its `gradient` (Keras's optimizer.apply(grads, variables)):
  // one backend update over all of them. With gradient_accumulation_steps n, a step whose count
  // is not a multiple of n adds the gradients to the accumulators and updates nothing; the n-th
  // updates from the mean of the n gradients (Keras: the optimizer's own count, and a schedule's
  // step, count every call; the update's step number counts the updates). With use_ema, each
  // variable's moving average follows it after every call (Keras's EMA, its momentum 0 at the
  // first update), and every ema_overwrite_frequency updates the variables take their averages.
  void apply(const std::vector<variable<B>*>& vars);
  // Keras's optimizer.finalize_variable_values: with use_ema, the variables take their moving
  // averages (fit does it when it ends). Nothing before the first step.
  void finalize_variable_values(const std::vector<variable<B>*>& vars);

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
  // Keras's optimizer.variables: "<name>/iteration" (int64), "<name>/learning_rate" (float64;
  // none when scheduled), then copies of the slots in creation order
  // ("adam/dense_kernel_momentum", ...), then the optimizer's own scalar. Build first.
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
  // Where weight decay applies: a tensor of the update and a range of its elements.
  struct decay_range {
    std::size_t tensor, begin, end;
  };
  // The update of every entry of `u` at step `t` (counted from 1): the gradients clipped
  // (clip()), weight decay on `decay`'s ranges, then the optimizer's update.
  void update(std::span<const backend::update_tensors<matrix>> u, std::size_t t_count,
              double learning_rate, std::span<const decay_range> decay,
              const gradient_norms& norms) const;
  // Keras's _clip_gradients: each gradient's values to [-clipvalue, clipvalue], each variable's
  // gradient scaled to a norm of at most clipnorm, or all of them to a global norm of at most
  // global_clipnorm, the squared norms counted as `norms` says.
  void clip(std::span<const backend::update_tensors<matrix>> u, const gradient_norms& norms) const;
  // The updates `calls` calls of apply() take (every gradient_accumulation_steps-th updates).
  [[nodiscard]] std::size_t updates_after(std::size_t calls) const noexcept {
    const auto steps = static_cast<std::size_t>(spec_.config().gradient_accumulation_steps);
    return steps > 0 ? calls / steps : calls;
  }
  // f(tensor, segment) for each range of the tensors of `u` that `norms` gives (unset: each
  // tensor whole, a variable of its own, counted here).
  template <class F>
  static void for_each_segment(std::span<const backend::update_tensors<matrix>> u,
                               const gradient_norms& norms, F&& f) {
    for (std::size_t i = 0; i < u.size(); ++i) {
      if (norms.variables == 0) {
        f(i, norm_segment{0, optimizers::elements<B>(u[i].gradient), i, true});
        continue;
      }
      for (const norm_segment& s : norms.segments[i]) f(i, s);
    }
  }
  // The squared norm of each variable's gradient (norms.variables of them; each tensor one,
  // unset), summed over the processes by norms.sum.
  std::vector<double> squared_norms(std::span<const backend::update_tensors<matrix>> u,
                                    const gradient_norms& norms) const;
  // apply()'s decay ranges: the set ones, else whole variables by the names' rule; worked out
  // at the first step after a build or a change of the exclusions or ranges, then kept.
  void decay_of(const std::vector<variable<B>*>& vars);
  optimizer_function<B> spec_;
  double learning_rate_;
  variable_store<B> state_;
  std::vector<slot> slots_;
  std::vector<variable<B>*> averages_, accumulators_;  // per variable, with use_ema / accumulation
  std::vector<backend::update_tensors<matrix>> tensors_;  // reused every step
  std::vector<std::string> excluded_;                      // exclude_from_weight_decay's
  std::vector<element_ranges> decay_ranges_;
  std::vector<decay_range> decay_;  // apply()'s, kept while decay_current_
  bool decay_current_ = false;
  gradient_norms norms_;
  // The optimizer's own scalar after `scalar_updates_` updates (a cache: it is derived).
  [[nodiscard]] double scalar_at(std::size_t updates) const;
  mutable std::size_t scalar_updates_ = 0;
  mutable double scalar_ = 0.0;
  mutable bool scalar_known_ = false;
  mutable matrix norm_rows_;  // squared_norms' row sums, reused every step
  std::size_t iterations_ = 0;
};

template <class B>
void optimizer<B>::build(const std::vector<variable<B>*>& vars) {
  if (!slots_.empty()) return;
  const auto names = slot_names();
  const auto initial = spec_.slot_initial_values();
  const optimizers::config& c = spec_.config();
  // On the same shards as the variable: the block's shape, zeroed (or the slot's initial value:
  // Adagrad's accumulator).
  auto add = [&](const variable<B>& v, const char* what, double value) {
    variable<B>& x = state_.emplace_back();
    x.path = slot_path(v.path, what);
    x.shape = v.shape;
    x.initializer = value == 0.0 ? "zeros" : "constant";
    x.trainable = false;
    x.value = v.value.like(B::make_zeros(x.path, v.value.block_rows(), v.value.block_cols()));
    if (value != 0.0) B::fill(x.value.local(), static_cast<float>(value));
    return &x;
  };
  // Each variable's moving average and gradient accumulator (Keras makes them in the base
  // optimizer's build, before the optimizer's slots: keras_slot_passes() orders the file), then
  // its slots.
  for (variable<B>* v : vars) {
    averages_.push_back(c.use_ema ? add(*v, "average", 0.0) : nullptr);
    accumulators_.push_back(c.gradient_accumulation_steps > 0
                                ? add(*v, "gradient_accumulator", 0.0)
                                : nullptr);
    slot s{};
    for (std::size_t k = 0; k < names.size(); ++k)
      if (names[k] != nullptr) s[k] = add(*v, names[k], initial[k]);
    slots_.push_back(s);
  }
}

template <class B>
void optimizer<B>::apply(const std::vector<variable<B>*>& vars) {
  build(vars);
  if (vars.size() != slots_.size())
    throw value_error("optimizer.apply: built for " + std::to_string(slots_.size()) +
                      " variables, called with " + std::to_string(vars.size()) + ".");
  namespace ob = optimizers::bodies;
  const optimizers::config& c = spec_.config();
  const double lr = learning_rate();
  const std::size_t before = iterations_;
  ++iterations_;
  const auto steps = static_cast<std::size_t>(c.gradient_accumulation_steps);
  bool updates = true;
  if (steps > 0) {
    updates = (before + 1) % steps == 0;
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const matrix& g = vars[i]->gradient;
      const matrix acc = accumulators_[i]->value.local();
      const std::size_t n = optimizers::elements<B>(g);
      if (updates)
        B::for_each("accumulated_mean", n, 1,
                    ob::accumulated_mean{g.data(), acc.data(), static_cast<float>(steps)});
      else
        B::for_each("accumulate", n, 1, ob::accumulate{acc.data(), g.data()});
    }
  }
  if (updates) {
    tensors_.clear();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      auto local = [](const variable<B>* x) { return x ? x->value.local() : matrix(); };
      const slot& s = slots_[i];
      tensors_.push_back(
          {vars[i]->value.local(), vars[i]->gradient, local(s[0]), local(s[1]), local(s[2])});
    }
    decay_of(vars);
    // The update's step number counts the updates.
    update(tensors_, updates_after(iterations_), lr, decay_, norms_);
  }
  if (!c.use_ema) return;
  // Keras's _update_model_variables_moving_average with its iterations (the updates before this
  // call), then the overwrite every ema_overwrite_frequency.
  const std::size_t done = updates_after(before);
  const float m = done != 0 ? static_cast<float>(c.ema_momentum) : 0.0f;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const matrix w = vars[i]->value.local(), avg = averages_[i]->value.local();
    B::for_each("moving_average", optimizers::elements<B>(w), 1,
                ob::moving_average{avg.data(), w.data(), m});
  }
  if (c.ema_overwrite_frequency > 0 &&
      (done + 1) % static_cast<std::size_t>(c.ema_overwrite_frequency) == 0)
    for (std::size_t i = 0; i < vars.size(); ++i)
      B::copy(averages_[i]->value.local(), vars[i]->value.local());
}

template <class B>
void optimizer<B>::finalize_variable_values(const std::vector<variable<B>*>& vars) {
  if (!spec_.config().use_ema || averages_.empty()) return;
  if (vars.size() != averages_.size())
    throw value_error("optimizer.finalize_variable_values: built for " +
                      std::to_string(averages_.size()) + " variables, called with " +
                      std::to_string(vars.size()) + ".");
  for (std::size_t i = 0; i < vars.size(); ++i)
    B::copy(averages_[i]->value.local(), vars[i]->value.local());
}

template <class B>
void optimizer<B>::decay_of(const std::vector<variable<B>*>& vars) {
  if (decay_current_) return;
  decay_current_ = true;
  decay_.clear();
  if (spec_.config().weight_decay == 0.0) return;
  if (!decay_ranges_.empty()) {
    if (decay_ranges_.size() != vars.size())
      throw runtime_error("tessel: weight decay's ranges cover " +
                          std::to_string(decay_ranges_.size()) + " variables of " +
                          std::to_string(vars.size()));
    for (std::size_t i = 0; i < vars.size(); ++i)
      for (const auto& r : decay_ranges_[i]) decay_.push_back({i, r.first, r.second});
    return;
  }
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (decays(vars[i]->path))
      decay_.push_back({i, 0, optimizers::elements<B>(vars[i]->value.local())});
}

template <class B>
void optimizer<B>::exclude_from_weight_decay(std::vector<std::string> var_names) {
  if (built())
    throw value_error(
        "`exclude_from_weight_decay()` can only be configured before the optimizer is built.");
  for (const std::string& n : var_names)
    if (const auto r = regex::validate("(" + n + ")"); !r.ok)
      throw value_error("exclude_from_weight_decay: '" + n + "' is not a pattern tessel reads (" +
                        std::string(r.message) + "); use a name or a pattern of Python's re "
                        "syntax without lookarounds and back references.");
  excluded_ = std::move(var_names);
  decay_current_ = false;
}

template <class B>
bool optimizer<B>::decays(const std::string& path) const {
  if (spec_.config().weight_decay == 0.0) return false;
  const std::string name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0
  for (const std::string& n : excluded_)
    if (regex::full_match(".*(" + n + ").*", name)) return false;
  return true;
}

template <class B>
std::vector<int> optimizer<B>::keras_slot_passes() const {
  const auto passes = spec_.keras_slot_passes();
  std::vector<int> out;
  // (Keras's base optimizer makes every average, then every accumulator, before the slots.)
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (averages_[i] != nullptr) out.push_back(-2);
    if (accumulators_[i] != nullptr) out.push_back(-1);
    for (std::size_t k = 0; k < slots_[i].size(); ++k)
      if (slots_[i][k] != nullptr) out.push_back(passes[k]);
  }
  return out;
}

template <class B>
void optimizer<B>::set_state(const state_list<B>& values, std::string_view where) {
  check_state(values, where);
  const std::int64_t it = values[0].integer();
  if (it < 0)
    throw value_error(std::string(where) + ": " + values[0].path + " is " + std::to_string(it) +
                      "; an iteration count is at least 0.");
  iterations_ = static_cast<std::size_t>(it);
  if (!scheduled()) learning_rate_ = values[1].real();
  std::size_t i = counters();  // (the own scalar, after the slots, is derived: not read)
  for (auto& v : state_) B::copy(values[i++].tensor().local(), v.value.local());
}

template <class B>
double optimizer<B>::scalar_at(std::size_t updates) const {
  // One more update steps the cache; anything else (a restored count) replays from the start.
  if (!scalar_known_ || updates < scalar_updates_) {
    scalar_ = spec_.scalar_initial();
    scalar_updates_ = 0;
    scalar_known_ = true;
  }
  while (scalar_updates_ < updates) scalar_ = spec_.scalar_after(++scalar_updates_, scalar_);
  return scalar_;
}

template <class B>
std::pair<state_list<B>, state_list<B>> optimizer<B>::stateless_apply(
    const state_list<B>& optimizer_variables, const state_list<B>& grads,
    const state_list<B>& trainable) const {
  if (spec_.config().use_ema || spec_.config().gradient_accumulation_steps > 0)
    throw value_error(
        "stateless_apply: an optimizer with use_ema or gradient_accumulation_steps keeps state "
        "this form does not carry through; use apply_gradients (train_on_batch) for it.");
  if (optimizer_variables.size() < counters() ||
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
  const double lr =
      scheduled() ? static_cast<double>(spec_.schedule()(it - 1)) : new_state[1].real();
  const auto names = slot_names();
  std::vector<backend::update_tensors<matrix>> tensors;
  std::vector<decay_range> decay;
  // Clipping changes the gradients in place: copies of the caller's.
  state_list<B> clipped;
  if (spec_.config().clipvalue > 0.0 || spec_.config().clips_norms())
    for (const auto& g : grads) clipped.push_back(copy_of(g));
  const state_list<B>& gradients = clipped.empty() ? grads : clipped;
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
    const state_variable<B>& g = gradients[i];
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
    if (decays(trainable[i].path))
      decay.push_back({i, 0, optimizers::elements<B>(w.local())});
  }
  update(tensors, static_cast<std::size_t>(it), lr, decay, gradient_norms{});
  if (scalars() > 0) new_state.back().value = scalar_at(static_cast<std::size_t>(it));
  return {std::move(new_trainable), std::move(new_state)};
}

template <class B>
state_list<B> optimizer<B>::entries(bool copy) const {
  state_list<B> out;
  out.push_back({std::string(prefix()) + "/iteration", {}, static_cast<std::int64_t>(iterations_)});
  if (!scheduled()) out.push_back({std::string(prefix()) + "/learning_rate", {}, learning_rate_});
  for (const auto& v : state_) out.push_back(state_of(v, copy));
  // (Keras makes Nadam's outside the optimizer's name scope: its path is its name alone.)
  if (scalars() > 0) out.push_back({std::string(spec_.scalar_name()), {}, scalar_at(updates())});
  return out;
}

template <class B>
void optimizer<B>::update(std::span<const backend::update_tensors<matrix>> u, std::size_t t_count,
                          double learning_rate, std::span<const decay_range> decay,
                          const gradient_norms& norms) const {
  const optimizers::config& c = spec_.config();
  clip(u, norms);
  for (const decay_range& r : decay)
    B::for_each("weight_decay", r.end - r.begin, 1,
                optimizers::bodies::weight_decay{u[r.tensor].value.data() + r.begin,
                                                 static_cast<float>(c.weight_decay),
                                                 static_cast<float>(learning_rate)});
  spec_.update(optimizers::step<B>{u, t_count, learning_rate,
                                   scalars() > 0 ? scalar_at(t_count) : 0.0});
}

template <class B>
void optimizer<B>::clip(std::span<const backend::update_tensors<matrix>> u,
                        const gradient_norms& norms) const {
  const optimizers::config& c = spec_.config();
  namespace ob = optimizers::bodies;
  if (c.clipvalue > 0.0)
    for (const auto& t : u)
      B::for_each("clipvalue", optimizers::elements<B>(t.gradient), 1,
                  ob::clip_value{t.gradient.data(), static_cast<float>(c.clipvalue)});
  if (!c.clips_norms()) return;
  const std::vector<double> squares = squared_norms(u, norms);
  auto scale = [](const matrix& g, std::size_t begin, std::size_t end, float num, float den) {
    B::for_each("clip_by_norm", end - begin, 1, ob::scale_gradient{g.data() + begin, num, den});
  };
  if (c.global_clipnorm > 0.0) {
    // Keras's clip_by_global_norm, in float32: scale = clip * min(1 / norm, 1 / clip), NaN
    // when the norm is not finite.
    double total = 0.0;
    for (double s : squares) total += s;
    const float norm = std::sqrt(static_cast<float>(total));
    const auto clip_norm = static_cast<float>(c.global_clipnorm);
    const float factor = clip_norm * std::min(1.0f / norm, 1.0f / clip_norm) + (norm - norm);
    for (const auto& t : u)
      scale(t.gradient, 0, optimizers::elements<B>(t.gradient), factor, 1.0f);
    return;
  }
  // Keras's _clip_by_norm: g * clipnorm / max(norm, clipnorm), per variable.
  const auto clip_norm = static_cast<float>(c.clipnorm);
  auto denominator = [&](std::size_t v) {
    return std::max(std::sqrt(static_cast<float>(squares[v])), clip_norm);
  };
  for_each_segment(u, norms, [&](std::size_t i, const norm_segment& s) {
    scale(u[i].gradient, s.begin, s.end, clip_norm, denominator(s.variable));
  });
}

template <class B>
std::vector<double> optimizer<B>::squared_norms(std::span<const backend::update_tensors<matrix>> u,
                                                const gradient_norms& norms) const {
  // Each range's squares summed by rows of `width` values (the backend sums rows in parallel),
  // the rows' sums read back at once and added per variable in float64.
  constexpr std::size_t width = 4096;
  struct piece {
    const matrix* g;
    std::size_t begin, rows, cols, variable;
  };
  std::vector<piece> pieces;
  std::size_t total_rows = 0;
  auto add = [&](const matrix& g, std::size_t begin, std::size_t end, std::size_t v) {
    const std::size_t n = end - begin, full = n / width, tail = n % width;
    if (full > 0) pieces.push_back({&g, begin, full, width, v});
    if (tail > 0) pieces.push_back({&g, begin + full * width, 1, tail, v});
    total_rows += full + (tail > 0 ? 1 : 0);
  };
  const std::size_t variables = norms.variables == 0 ? u.size() : norms.variables;
  for_each_segment(u, norms, [&](std::size_t i, const norm_segment& s) {
    if (s.counts) add(u[i].gradient, s.begin, s.end, s.variable);
  });
  std::vector<double> squares(variables, 0.0);
  if (total_rows > 0) {
    if (B::rows(norm_rows_) < total_rows)
      norm_rows_ = B::make_matrix("gradient_norms", total_rows, 1);
    std::size_t row = 0;
    for (const piece& p : pieces) {
      const matrix x = B::alias(*p.g, p.begin, p.rows, p.cols);
      B::row_dot(x, x, B::alias(norm_rows_, row, p.rows, 1));
      row += p.rows;
    }
    std::vector<float> sums(B::rows(norm_rows_));
    B::download(norm_rows_, std::span<float>(sums));
    row = 0;
    for (const piece& p : pieces)
      for (std::size_t r = 0; r < p.rows; ++r) squares[p.variable] += sums[row++];
  }
  if (norms.sum) norms.sum(std::span<double>(squares));
  return squares;
}

#if TESSEL_EXTERN_TEMPLATES
// Compiled once, in tessel::tessel (core/compilation.hpp).
extern template class optimizer<backend::host>;
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
extern template class optimizer<backend::cuda>;  // in tessel::cuda_compiled
#endif

}  // namespace tessel
