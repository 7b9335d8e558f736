#pragma once
// keras.callbacks.ProgbarLogger (Keras 3.15.1, keras/src/callbacks/progbar_logger.py): what
// fit, evaluate and predict print, given the callback events. It knows no model: the trainer
// creates one logger per fit/evaluate/predict call, as Keras's CallbackList creates one
// ProgbarLogger per call (a verbose of 0 means Keras adds none), and forwards the events.
//
// What Keras 3.15.1 does, and so this class:
// - verbose "auto" is 1 (the trainer resolves it before constructing the logger).
// - on_epoch_begin prints "Epoch 2/3\n" when verbose != 0 and epochs > 1, after starting a new bar.
// - verbose 1 redraws the bar after every batch (throttled to one draw per 0.05 s), verbose 2
//   prints one line per epoch at its end, verbose 0 prints nothing.
// - The bar gets no averaging: the logger builds it with stateless_metrics=set(), so every value
//   is shown as given. The trainer's batch logs are already running means (metric objects
//   accumulate over the epoch), and Keras 3.15.1 shows them as they are. (Earlier Keras 3
//   releases passed no such argument, and their bar averaged those running means again; the
//   change is keras-team/keras pull request 23030, "Remove progress bar double averaging".)
// - Names are shown in sorted order: CallbackList passes every logs dict through pythonify_logs,
//   which rebuilds it from sorted(logs.items()). This class sorts itself, so the trainer may pass
//   its logs in any order. Names first seen at the end of the epoch (val_*) come after the
//   batch names, in sorted order among themselves.
// - With an unknown number of steps (a generator), the first epoch's bar reads "      7/Unknown"
//   and, at its end, the count seen becomes the target for the bar and every later epoch.
// - Validation inside fit is silent: once on_train_begin has been called, test events print
//   nothing. evaluate called by the user (a fresh logger) prints a bar and finalizes it.
// - predict shows the bar with the step time only, never its outputs.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <iostream>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>

#include "../core/compilation.hpp"
#include "tessel/trainer/logs.hpp"
#include "tessel/trainer/progbar.hpp"

namespace tessel {

// Where the bars go and which clock times them; empty members take progbar's defaults.
struct progbar_io {
  std::ostream* out = nullptr;
  std::function<double()> clock = {};
  std::optional<bool> dynamic_display = std::nullopt;
};

class progbar_logger {
 public:
  // Keras's set_params(params) with params {"verbose", "epochs", "steps"}; `steps` is the
  // number of batches per epoch, empty when unknown.
  progbar_logger(int verbose, std::size_t epochs, std::optional<std::size_t> steps,
                 progbar_io io = {})
      : verbose_(verbose), epochs_(epochs), target_(steps), io_(std::move(io)) {}

  void set_params(int verbose, std::size_t epochs, std::optional<std::size_t> steps) {
    verbose_ = verbose;
    epochs_ = epochs;
    target_ = steps;
  }

  // From here on, test events belong to validation inside fit and print nothing.
  void on_train_begin() { called_in_fit_ = true; }

  void on_epoch_begin(std::size_t epoch);

  // `batch` is the 0-based index of the batch just done.
  void on_train_batch_end(std::size_t batch, const logs& batch_logs) {
    update_progbar(batch, sorted_logs(batch_logs));
  }

  // `epoch_logs` holds the epoch's metrics and, when validation ran, its val_* entries, shown
  // sorted (Keras's CallbackList sorts them); the entries from `added` on are those callbacks
  // appended (learning_rate), shown after them in their order, as Keras's dict keeps them.
  void on_epoch_end(std::size_t /*epoch*/, const logs& epoch_logs,
                    std::size_t added = static_cast<std::size_t>(-1)) {
    const auto first_added = static_cast<std::ptrdiff_t>(std::min(added, epoch_logs.size()));
    logs shown = sorted_logs(logs(epoch_logs.begin(), epoch_logs.begin() + first_added));
    for (auto it = epoch_logs.begin() + first_added; it != epoch_logs.end(); ++it)
      set_log(shown, it->first, it->second);
    finalize_progbar(shown);
  }

  void on_test_begin() {
    if (called_in_fit_) return;
    reset_progbar();
    maybe_init_progbar();
  }

  void on_test_batch_end(std::size_t batch, const logs& batch_logs) {
    if (!called_in_fit_) update_progbar(batch, sorted_logs(batch_logs));
  }

  void on_test_end(const logs& test_logs) {
    if (!called_in_fit_) finalize_progbar(sorted_logs(test_logs));
  }

  void on_predict_begin() {
    reset_progbar();
    maybe_init_progbar();
  }

  // Keras passes no prediction results to the bar.
  void on_predict_batch_end(std::size_t batch) { update_progbar(batch, {}); }

  void on_predict_end() { finalize_progbar({}); }

  int verbose() const { return verbose_; }
  std::size_t epochs() const { return epochs_; }
  // The steps per epoch: as given, or learned at the end of the first epoch.
  const std::optional<std::size_t>& target() const { return target_; }

 private:
  std::ostream& out() const { return io_.out ? *io_.out : std::cout; }

  void reset_progbar() {
    seen_ = 0;
    progbar_.reset();
  }

  void maybe_init_progbar();

  void update_progbar(std::size_t batch, const logs& batch_logs) {
    maybe_init_progbar();
    seen_ = batch + 1;
    if (verbose_ == 1) progbar_->update(seen_, batch_logs, false);
  }

  void finalize_progbar(const logs& final_logs);

  int verbose_;
  std::size_t epochs_;
  std::optional<std::size_t> target_;
  progbar_io io_;
  std::size_t seen_ = 0;
  std::optional<progbar> progbar_;
  bool called_in_fit_ = false;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE void progbar_logger::on_epoch_begin(std::size_t epoch) {
  reset_progbar();
  maybe_init_progbar();
  if (verbose_ != 0 && epochs_ > 1) {
    out() << "Epoch " << epoch + 1 << "/" << epochs_ << "\n" << std::flush;
  }
}

TESSEL_INLINE void progbar_logger::maybe_init_progbar() {
  if (progbar_) return;
  progbar_.emplace(progbar_options{.target = target_,
                                   .width = 20,
                                   .verbose = verbose_,
                                   .interval = 0.05,
                                   .stateful_metrics = std::nullopt,
                                   .stateless_metrics = std::set<std::string>{},
                                   .unit_name = "step",
                                   .out = io_.out,
                                   .clock = io_.clock,
                                   .dynamic_display = io_.dynamic_display});
}

TESSEL_INLINE void progbar_logger::finalize_progbar(const logs& final_logs) {
  // Keras would fail on a finalize with no bar; start one so the call is harmless.
  maybe_init_progbar();
  if (!target_) {
    target_ = seen_;
    progbar_->set_target(target_);
  }
  progbar_->update(*target_, final_logs, true);
}
#endif

}  // namespace tessel
