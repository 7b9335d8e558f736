// callbacks: Keras's callback hooks (same names and order of calls), and the callbacks users
// reach for most: history, early_stopping, terminate_on_nan, csv_logger, lambda_callback.
#pragma once

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../core/agreement.hpp"
#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../data/array.hpp"
#include "../data/file_access.hpp"
#include "logs.hpp"

namespace tessel {

// Where fit() is: the epoch, how many of its batches are done, and the pass of the training
// dataset that epoch draws (its shuffle order: dataset::iterations()); and what those batches
// are batches of: the training dataset's facts (its stages, batch size, sample count, a checksum
// of its values: dataset::facts()), so that a resume can tell whether the batches it skips are
// the ones trained before (empty: not known).
struct training_position {
  std::size_t epoch = 0;
  std::size_t step = 0;
  std::uint64_t data_pass = 0;
  std::vector<fact> data;
};

// What a callback may ask of the model it is attached to (Keras's `self.model`).
class model_base {
 public:
  virtual ~model_base() = default;
  // Set by a callback to end fit() after the current batch (Keras's model.stop_training).
  bool stop_training = false;
  virtual std::vector<array<float>> get_weights() const = 0;
  virtual void set_weights(const std::vector<array<float>>& weights) = 0;
  // Whether a larger value of the named metric is better (Keras's metric `_direction == "up"`).
  virtual std::optional<bool> metric_increases(std::string_view name) const = 0;
  // Whether this process writes files and prints for the job (device 0 of a distributed model;
  // every process for a model on its own process).
  virtual bool is_chief() const { return true; }
  // Keras's model.save_weights(filepath) and model.save(filepath), for model_checkpoint; every
  // process calls them.
  virtual void save_weights(const std::string& filepath) {
    throw value_error("save_weights('" + filepath + "'): this model cannot save weights files");
  }
  virtual void save(const std::string& filepath) {
    throw value_error("save('" + filepath + "'): this model cannot save .keras archives");
  }
  // The whole training state to a checkpoint directory and back (saving/checkpoint.hpp), with
  // the caller's metadata as JSON text; collective over the model's processes. In the
  // background, the call waits only for a copy of the state and for the save before it;
  // wait_for_checkpoint() finishes and commits the save in flight.
  virtual void save_checkpoint(const std::string& dir, const std::string& metadata_json,
                               bool background = false) = 0;
  virtual void wait_for_checkpoint() {}
  virtual std::string load_checkpoint(const std::string& dir) = 0;
  // Where fit() is, and (from on_train_begin) where it should go on from instead of its
  // initial_epoch: the epoch, past the batches already done, drawing that epoch's order again,
  // without resetting the metrics a checkpoint restored mid-epoch.
  virtual training_position position() const { return {}; }
  virtual void resume_from(const training_position&) {}
  // The compiled optimizer's learning rate (Keras's model.optimizer.learning_rate, a float32
  // variable: the value rounded to float32), and setting it for the next step.
  virtual double learning_rate() const {
    throw value_error("learning_rate: this model has no optimizer; call compile() first");
  }
  virtual void set_learning_rate(double) {
    throw value_error("set_learning_rate: this model has no optimizer; call compile() first");
  }
};

// keras.callbacks.Callback: override the hooks you need.
class callback {
 public:
  virtual ~callback() = default;
  void set_model(model_base* m) { model = m; }
  virtual void on_train_begin(const logs&) {}
  virtual void on_train_end(const logs&) {}
  virtual void on_epoch_begin(std::size_t /*epoch*/, const logs&) {}
  virtual void on_epoch_end(std::size_t /*epoch*/, const logs&) {}
  // Before the epoch's logs are shown and passed to on_epoch_end: entries a callback adds to
  // them (Keras's callbacks write into the logs dict; ReduceLROnPlateau adds "learning_rate"),
  // appended after the sorted ones, as Keras's dict keeps them.
  virtual void on_epoch_logs(std::size_t /*epoch*/, logs&) {}
  virtual void on_train_batch_begin(std::size_t /*batch*/, const logs&) {}
  virtual void on_train_batch_end(std::size_t /*batch*/, const logs&) {}
  virtual void on_test_begin(const logs&) {}
  virtual void on_test_end(const logs&) {}
  virtual void on_test_batch_begin(std::size_t /*batch*/, const logs&) {}
  virtual void on_test_batch_end(std::size_t /*batch*/, const logs&) {}
  virtual void on_predict_begin(const logs&) {}
  virtual void on_predict_end(const logs&) {}
  virtual void on_predict_batch_begin(std::size_t /*batch*/, const logs&) {}
  virtual void on_predict_batch_end(std::size_t /*batch*/, const logs&) {}

 protected:
  model_base* model = nullptr;
};

// A callback in fit's list: either one the caller keeps (passed as an lvalue, so it can be
// inspected afterwards, like early_stopping's stopped_epoch) or a temporary the list owns.
class callback_ref {
 public:
  template <class C>
  requires std::derived_from<std::remove_cvref_t<C>, callback> callback_ref(
      C&& c) {  // NOLINT(google-explicit-constructor)
    if constexpr (std::is_lvalue_reference_v<C>)
      ptr_ = std::shared_ptr<callback>(std::shared_ptr<callback>{}, &c);
    else
      ptr_ = std::make_shared<std::remove_cvref_t<C>>(std::forward<C>(c));
  }
  callback* get() const { return ptr_.get(); }

 private:
  std::shared_ptr<callback> ptr_;
};

// keras.callbacks.History: every epoch's logs, by name; fit() returns it.
namespace detail {
// Whether fit may go on from `from` (a restored position) over training data described by `now`:
// past the start of an epoch, the batches it skips must be those trained before, so the data must
// be described as it was then (a position without a description, from a backup of an older
// tessel, is taken as it is). Otherwise a value_error naming what changed and what to do.
TESSEL_INLINE void check_resume(const training_position& from, const std::vector<fact>& now);
}  // namespace detail

class history : public callback {
 public:
  std::vector<std::size_t> epoch;
  std::map<std::string, std::vector<double>> history;  // history.history["loss"]
  void on_train_begin(const logs&) override { epoch.clear(); }
  void on_epoch_end(std::size_t e, const logs& l) override;
};

namespace callbacks {

// Keras's MonitorCallback._is_improvement: whether `value` improves on `reference` (none: it
// does) by more than |min_delta|, larger being better when `increases`. EarlyStopping,
// ReduceLROnPlateau and ModelCheckpoint (min_delta 0) share it.
inline bool monitor_improves(double value, const std::optional<double>& reference,
                             double min_delta, bool increases) {
  if (!reference) return true;
  const double delta = std::fabs(min_delta) * (increases ? 1.0 : -1.0);
  return increases ? value - delta > *reference : value - delta < *reference;
}

// keras.callbacks.EarlyStopping, with Keras 3's rules for improvement, patience and baselines.
class early_stopping : public callback {
 public:
  struct options {
    std::string monitor = "val_loss";
    double min_delta = 0.0;
    std::size_t patience = 0;
    int verbose = 0;
    std::string mode = "auto";
    std::optional<double> baseline = std::nullopt;
    bool restore_best_weights = false;
    std::size_t start_from_epoch = 0;
  };
  early_stopping() : early_stopping(options{}) {}
  explicit early_stopping(options o);
  std::size_t stopped_epoch = 0;
  std::size_t best_epoch = 0;
  std::optional<double> best;
  std::size_t wait = 0;

  void on_train_begin(const logs&) override;
  void on_epoch_end(std::size_t epoch, const logs& l) override;
  void on_train_end(const logs&) override;

 private:
  bool direction() const;
  bool improves(double value, const std::optional<double>& reference) const {
    return monitor_improves(value, reference, o_.min_delta, *increases_);
  }
  options o_;
  std::optional<bool> increases_;
  std::vector<array<float>> best_weights_;
};

// keras.callbacks.TerminateOnNaN: stops training when a batch's loss is NaN or infinite.
class terminate_on_nan : public callback {
 public:
  void on_train_batch_end(std::size_t batch, const logs& l) override;
};

// Python's repr() of a float: the shortest text that reads back to the same double.
TESSEL_INLINE std::string python_float_repr(double v);
// Whether a larger value of the monitored quantity is better, by Keras's rules for `mode`
// ("auto": the loss decreases; a metric by its direction), or the error Keras gives.
TESSEL_INLINE bool monitor_increases(const model_base& model, const std::string& mode,
                                     const std::string& monitor, const char* callback_name);

// keras.callbacks.CSVLogger: one row per epoch, "epoch" then the logs in sorted order. On a
// distributed model only the chief process (device 0) writes: the logs are global, the same on
// every process.
class csv_logger : public callback {
 public:
  explicit csv_logger(std::string filename, std::string separator = ",", bool append = false)
      : filename_(std::move(filename)), sep_(std::move(separator)), append_(append) {}
  void on_train_begin(const logs&) override;
  void on_epoch_end(std::size_t epoch, const logs& l) override;
  void on_train_end(const logs&) override { file_.close(); }

 private:
  std::string filename_, sep_;
  bool append_;
  bool write_header_ = true;
  std::vector<std::string> keys_;
  std::ofstream file_;
};

// keras.callbacks.LambdaCallback: hooks given as functions.
class lambda_callback : public callback {
 public:
  std::function<void(std::size_t, const logs&)> on_epoch_begin_fn, on_epoch_end_fn,
      on_train_batch_begin_fn, on_train_batch_end_fn;
  std::function<void(const logs&)> on_train_begin_fn, on_train_end_fn;

  // Every member has an initializer, so `{.on_epoch_end = f}` compiles under -Wextra -Werror.
  struct hooks {
    std::function<void(std::size_t, const logs&)> on_epoch_begin = {}, on_epoch_end = {},
                                                  on_batch_begin = {}, on_batch_end = {};
    std::function<void(const logs&)> on_train_begin = {}, on_train_end = {};
  };
  explicit lambda_callback(hooks h)
      : on_epoch_begin_fn(std::move(h.on_epoch_begin)),
        on_epoch_end_fn(std::move(h.on_epoch_end)),
        on_train_batch_begin_fn(std::move(h.on_batch_begin)),
        on_train_batch_end_fn(std::move(h.on_batch_end)),
        on_train_begin_fn(std::move(h.on_train_begin)),
        on_train_end_fn(std::move(h.on_train_end)) {}
  void on_epoch_begin(std::size_t e, const logs& l) override {
    if (on_epoch_begin_fn) on_epoch_begin_fn(e, l);
  }
  void on_epoch_end(std::size_t e, const logs& l) override {
    if (on_epoch_end_fn) on_epoch_end_fn(e, l);
  }
  void on_train_batch_begin(std::size_t b, const logs& l) override {
    if (on_train_batch_begin_fn) on_train_batch_begin_fn(b, l);
  }
  void on_train_batch_end(std::size_t b, const logs& l) override {
    if (on_train_batch_end_fn) on_train_batch_end_fn(b, l);
  }
  void on_train_begin(const logs& l) override {
    if (on_train_begin_fn) on_train_begin_fn(l);
  }
  void on_train_end(const logs& l) override {
    if (on_train_end_fn) on_train_end_fn(l);
  }
};

}  // namespace callbacks

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE void detail::check_resume(const training_position& from,
                                        const std::vector<fact>& now) {
  if (from.step == 0 || from.data.empty()) return;
  std::string changed;
  for (const fact& then : from.data) {
    const fact* same = nullptr;
    for (const fact& f : now)
      if (f.what == then.what) same = &f;
    if (same != nullptr && same->value == then.value) continue;
    changed += changed.empty() ? "" : "; ";
    if (same == nullptr)
      changed += then.what + " (no longer in the pipeline)";
    else if (then.shown == fact::kind::fingerprint)
      changed += then.what + " differs";
    else
      changed += then.what + " was " + std::to_string(then.value) + ", now " +
                 std::to_string(same->value);
  }
  for (const fact& f : now) {
    bool known = false;
    for (const fact& then : from.data) known = known || then.what == f.what;
    if (!known) changed += (changed.empty() ? "" : "; ") + f.what + " (new in the pipeline)";
  }
  if (changed.empty()) return;
  throw value_error("fit: the restored backup stopped after batch " + std::to_string(from.step) +
                    " of epoch " + std::to_string(from.epoch + 1) +
                    ", counting batches of other training data: " + changed +
                    ". Skipping that many batches now would not skip the samples trained "
                    "before. Resume with the training data of the interrupted run, or start the "
                    "epoch again from a backup taken at the end of an epoch (or remove the backup "
                    "directory to train from the start)");
}

TESSEL_INLINE void history::on_epoch_end(std::size_t e, const logs& l) {
  epoch.push_back(e);
  for (const auto& [k, v] : l) history[k].push_back(v);
}

namespace callbacks {

TESSEL_INLINE early_stopping::early_stopping(options o) : o_(std::move(o)) {
  if (o_.mode != "auto" && o_.mode != "min" && o_.mode != "max")
    throw value_error("EarlyStopping mode " + o_.mode +
                      " is unknown; use one of 'auto', 'min' or 'max'.");
}

TESSEL_INLINE void early_stopping::on_train_begin(const logs&) {
  wait = 0;
  stopped_epoch = 0;
  best.reset();
  best_weights_.clear();
  best_epoch = 0;
  increases_.reset();
}

TESSEL_INLINE void early_stopping::on_epoch_end(std::size_t epoch, const logs& l) {
  const std::optional<double> current = find_log(l, o_.monitor);
  if (!current) {
    std::string names;
    for (const auto& [k, v] : l) names += (names.empty() ? "" : ",") + k;
    std::cerr << "UserWarning: Early stopping conditioned on metric `" << o_.monitor
              << "` which is not available. Available metrics are: " << names << "\n";
    return;
  }
  if (epoch < o_.start_from_epoch) return;
  if (!increases_) increases_ = direction();
  if (o_.restore_best_weights && best_weights_.empty()) best_weights_ = model->get_weights();
  ++wait;
  if (improves(*current, best)) {
    best = *current;
    best_epoch = epoch;
    if (o_.restore_best_weights) best_weights_ = model->get_weights();
    if (!o_.baseline || improves(*current, o_.baseline)) wait = 0;
    return;
  }
  if (wait >= o_.patience && epoch > 0) {
    stopped_epoch = epoch;
    model->stop_training = true;
  }
}

TESSEL_INLINE void early_stopping::on_train_end(const logs&) {
  const bool chief = model->is_chief();  // on a distributed model, process 0 prints
  if (stopped_epoch > 0 && o_.verbose > 0 && chief)
    std::cout << "Epoch " << stopped_epoch + 1 << ": early stopping\n";
  if (o_.restore_best_weights && !best_weights_.empty()) {
    if (o_.verbose > 0 && chief)
      std::cout << "Restoring model weights from the end of the best epoch: " << best_epoch + 1
                << ".\n";
    model->set_weights(best_weights_);
  }
}

TESSEL_INLINE bool early_stopping::direction() const {
  return monitor_increases(*model, o_.mode, o_.monitor, "EarlyStopping");
}

TESSEL_INLINE bool monitor_increases(const model_base& model, const std::string& mode,
                                     const std::string& monitor, const char* callback_name) {
  if (mode == "min") return false;
  if (mode == "max") return true;
  std::string_view name = monitor;
  if (name.starts_with("val_")) name.remove_prefix(4);
  if (name == "loss") return false;
  if (auto up = model.metric_increases(name)) return *up;
  throw value_error(std::string(callback_name) + " callback received monitor=" + monitor +
                    ", but Keras isn't able to automatically determine whether that metric "
                    "should be maximized or minimized. Pass `mode='max'` in order to monitor "
                    "based on the highest metric value, or pass `mode='min'` in order to use "
                    "the lowest value.");
}

TESSEL_INLINE void terminate_on_nan::on_train_batch_end(std::size_t batch, const logs& l) {
  if (auto loss = find_log(l, "loss"); loss && (std::isnan(*loss) || std::isinf(*loss))) {
    if (model->is_chief())
      std::cout << "Batch " << batch << ": Invalid loss, terminating training\n";
    model->stop_training = true;
  }
}

TESSEL_INLINE std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const auto e = sci.find('e');
  const int exp10 = std::stoi(sci.substr(e + 1));
  if (exp10 < -4 || exp10 >= 16) {  // Python switches to exponent form here: 1e-05, 1e+16
    std::string mant = sci.substr(0, e);
    char sign = exp10 < 0 ? '-' : '+';
    std::string digits = std::to_string(std::abs(exp10));
    if (digits.size() < 2) digits = "0" + digits;
    return mant + "e" + sign + digits;
  }
  r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string fixed(buf, r.ptr);
  if (fixed.find('.') == std::string::npos) fixed += ".0";
  return fixed;
}

TESSEL_INLINE void csv_logger::on_train_begin(const logs&) {
  if (model != nullptr && !model->is_chief()) return;
  bool header = true;
  if (append_) {
    std::ifstream in(filename_);
    header = !(in && in.peek() != std::ifstream::traits_type::eof());
  }
  errno = 0;
  file_.open(filename_, append_ ? std::ios::app : std::ios::trunc);
  if (!file_) {
    const int error = errno;
    throw runtime_error("CSVLogger: cannot open '" + filename_ +
                        "' for writing: " + data::open_failure(filename_, error, true) +
                        ". Give it the path of a file in a directory that exists and that "
                        "the user running this program may write in.");
  }
  write_header_ = header;
  keys_.clear();
}

TESSEL_INLINE void csv_logger::on_epoch_end(std::size_t epoch, const logs& l) {
  if (!file_.is_open()) return;
  const logs sorted = sorted_logs(l);
  if (keys_.empty())
    for (const auto& [k, v] : sorted) keys_.push_back(k);
  if (write_header_) {
    file_ << "epoch";
    for (const auto& k : keys_) file_ << sep_ << k;
    file_ << "\n";
    write_header_ = false;
  }
  file_ << epoch;
  for (const auto& k : keys_) {
    auto v = find_log(sorted, k);
    file_ << sep_ << (v ? python_float_repr(*v) : std::string("NA"));
  }
  file_ << "\n";
  file_.flush();
}

}  // namespace callbacks
#endif

}  // namespace tessel
