// keras.callbacks.LearningRateScheduler and keras.callbacks.ReduceLROnPlateau: the learning rate
// of the model's optimizer set per epoch, by the user's function or when a monitored value stops
// improving, with Keras's arguments, defaults, rules and messages. Both add "learning_rate" to
// the epoch's logs (History records it, the progress bar shows it), as Keras's do.
//
// The learning rate is the optimizer's (model_base::learning_rate, a float32 value as Keras holds
// it); under a distribution every process runs the callback on the same logs and sets the same
// value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "callbacks.hpp"
#include "logs.hpp"

namespace tessel::callbacks {

// keras.callbacks.LearningRateScheduler(schedule, verbose): at the start of each epoch, the
// learning rate becomes schedule(epoch, learning_rate) (the epoch counted from 0).
class learning_rate_scheduler : public callback {
 public:
  using schedule_function = std::function<double(std::size_t epoch, double learning_rate)>;
  explicit learning_rate_scheduler(schedule_function schedule, int verbose = 0);

  void on_epoch_begin(std::size_t epoch, const logs&) override;
  void on_epoch_logs(std::size_t epoch, logs& l) override;

 private:
  schedule_function schedule_;
  int verbose_;
};

// keras.callbacks.ReduceLROnPlateau: the learning rate times `factor` (not below min_lr) once
// `monitor` has not improved by min_delta for `patience` epochs, then `cooldown` epochs without
// counting.
class reduce_lr_on_plateau : public callback {
 public:
  struct options {
    std::string monitor = "val_loss";
    double factor = 0.1;
    std::size_t patience = 10;
    int verbose = 0;
    std::string mode = "auto";
    double min_delta = 1e-4;
    std::size_t cooldown = 0;
    double min_lr = 0.0;
  };
  reduce_lr_on_plateau() : reduce_lr_on_plateau(options{}) {}
  explicit reduce_lr_on_plateau(options o);

  std::optional<double> best;
  std::size_t wait = 0;
  std::size_t cooldown_counter = 0;

  void on_train_begin(const logs&) override;
  void on_epoch_logs(std::size_t epoch, logs& l) override;
  void on_epoch_end(std::size_t epoch, const logs& l) override;

 private:
  [[nodiscard]] bool in_cooldown() const noexcept { return cooldown_counter > 0; }
  options o_;
  std::optional<bool> increases_;
};

#if TESSEL_DEFINITIONS
TESSEL_INLINE learning_rate_scheduler::learning_rate_scheduler(schedule_function schedule,
                                                               int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_)
    throw value_error(
        "LearningRateScheduler: `schedule` is empty; give a function of (epoch, "
        "learning_rate) returning the epoch's learning rate.");
}

TESSEL_INLINE void learning_rate_scheduler::on_epoch_begin(std::size_t epoch, const logs&) {
  const double learning_rate = schedule_(epoch, model->learning_rate());
  if (!std::isfinite(learning_rate))
    throw value_error("The output of the `schedule` function should be a float. Got: " +
                      python_float_repr(learning_rate));
  model->set_learning_rate(learning_rate);
  if (verbose_ > 0 && model->is_chief())
    std::cout << "\nEpoch " << epoch + 1 << ": LearningRateScheduler setting learning rate to "
              << python_float_repr(learning_rate) << ".\n";
}

TESSEL_INLINE void learning_rate_scheduler::on_epoch_logs(std::size_t, logs& l) {
  set_log(l, "learning_rate", model->learning_rate());
}

TESSEL_INLINE reduce_lr_on_plateau::reduce_lr_on_plateau(options o) : o_(std::move(o)) {
  if (o_.factor >= 1.0)
    throw value_error("ReduceLROnPlateau does not support a factor >= 1.0. Received factor=" +
                      python_float_repr(o_.factor));
  if (o_.mode != "auto" && o_.mode != "min" && o_.mode != "max") {
    std::cerr << "UserWarning: ReduceLROnPlateau mode '" << o_.mode
              << "' is unknown, fallback to auto mode.\n";
    o_.mode = "auto";
  }
}

TESSEL_INLINE void reduce_lr_on_plateau::on_train_begin(const logs&) {
  best.reset();
  cooldown_counter = 0;
  wait = 0;
}

TESSEL_INLINE void reduce_lr_on_plateau::on_epoch_logs(std::size_t, logs& l) {
  set_log(l, "learning_rate", model->learning_rate());
}

TESSEL_INLINE void reduce_lr_on_plateau::on_epoch_end(std::size_t epoch, const logs& l) {
  const std::optional<double> current = find_log(l, o_.monitor);
  if (!current) {
    std::string names;
    for (const auto& entry : l) names += (names.empty() ? "" : ",") + entry.first;
    std::cerr << "UserWarning: Learning rate reduction is conditioned on metric `" << o_.monitor
              << "` which is not available. Available metrics are: " << names << ".\n";
    return;
  }
  if (!increases_) increases_ = monitor_increases(*model, o_.mode, o_.monitor, "ReduceLROnPlateau");
  if (in_cooldown()) {
    --cooldown_counter;
    wait = 0;
  }
  if (monitor_improves(*current, best, o_.min_delta, *increases_)) {
    best = *current;
    wait = 0;
    return;
  }
  if (in_cooldown() || ++wait < o_.patience) return;
  // Keras: old_lr > np.float32(min_lr), then old_lr * factor, not below min_lr.
  const double old_lr = model->learning_rate();
  if (!(old_lr > static_cast<double>(static_cast<float>(o_.min_lr)))) return;
  const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
  model->set_learning_rate(new_lr);
  if (o_.verbose > 0 && model->is_chief())
    std::cout << "\nEpoch " << epoch + 1 << ": ReduceLROnPlateau reducing learning rate to "
              << python_float_repr(new_lr) << ".\n";
  cooldown_counter = o_.cooldown;
  wait = 0;
}
#endif

}  // namespace tessel::callbacks
