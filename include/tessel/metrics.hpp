// metrics: Keras's metrics. `mean` is the running weighted average every other metric reduces to
// (Keras's Mean / MeanMetricWrapper). A compiled metric (metric_spec) sums a per-sample value
// over this device's rows into a slot of device memory (`local_sum`), and says whether it takes
// the output's arg-max (the accuracies: over classes split across devices the trainer reduces
// each row's arg-max first) and whether a larger value is better (early stopping's mode): the
// trainer asks nothing else of it, so a new metric is a new kind here and its kernel.
#pragma once

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.hpp"

namespace tessel::metrics {

// keras.metrics.Mean: update_state(value, sample_weight), result(), reset_state().
class mean {
 public:
  explicit mean(std::string name = "mean") : name_(std::move(name)) {}
  void update_state(double value, double sample_weight = 1.0) {
    total_ += value * sample_weight;
    count_ += sample_weight;
  }
  void update_state(const std::vector<double>& values) {
    for (double v : values) update_state(v);
  }
  double result() const { return count_ == 0 ? 0.0 : total_ / count_; }
  void reset_state() { total_ = count_ = 0; }
  const std::string& name() const { return name_; }
  double total() const { return total_; }
  double count() const { return count_; }
  // Sets the accumulators (a state written back: Keras's total and count variables).
  void set_state(double total, double count) {
    total_ = total;
    count_ = count;
  }
  // Adds another replica's partial sums (used to reduce a metric across devices).
  void merge(double total, double count) {
    total_ += total;
    count_ += count;
  }

 private:
  std::string name_;
  double total_ = 0, count_ = 0;
};

enum class metric_kind { sparse_categorical_accuracy, categorical_accuracy, mean_absolute_error };

// A metric named in compile(): its printed name and what it computes.
struct metric_spec {
  std::string name;
  metric_kind kind;

  // Whether it takes integer labels (else target vectors of the output's shape).
  [[nodiscard]] bool sparse_labels() const {
    return kind == metric_kind::sparse_categorical_accuracy;
  }
  // Whether it counts rows whose arg-max is right (the accuracies).
  [[nodiscard]] bool takes_argmax() const { return kind != metric_kind::mean_absolute_error; }
  // Whether a larger value is better (Keras's early stopping mode "auto").
  [[nodiscard]] bool increases() const { return takes_argmax(); }
  // The sum over this device's rows of the metric's per-sample value, into sums(slot). The rows
  // must be whole (the accuracies over split classes are counted by the trainer from the
  // reduced arg-max).
  template <class B>
  void local_sum(const typename B::matrix& pred, const typename B::index_vector& labels,
                 const typename B::matrix& targets, const typename B::sums& sums,
                 std::size_t slot) const {
    switch (kind) {
      case metric_kind::sparse_categorical_accuracy:
        B::count_argmax_equal(pred, labels, targets, sums, slot);
        break;
      case metric_kind::categorical_accuracy:
        B::count_argmax_equal(pred, typename B::index_vector(), targets, sums, slot);
        break;
      case metric_kind::mean_absolute_error:
        B::mean_absolute_error(pred, targets, sums, slot);
        break;
    }
  }
};

struct sparse_categorical_accuracy {
  std::string name = "sparse_categorical_accuracy";
  operator metric_spec() const {
    return {name, metric_kind::sparse_categorical_accuracy};
  }  // NOLINT
};
struct categorical_accuracy {
  std::string name = "categorical_accuracy";
  operator metric_spec() const { return {name, metric_kind::categorical_accuracy}; }  // NOLINT
};
// keras.metrics.MeanAbsoluteError: the mean over samples of each sample's mean |y_pred - y_true|.
struct mean_absolute_error {
  std::string name = "mean_absolute_error";
  operator metric_spec() const { return {name, metric_kind::mean_absolute_error}; }  // NOLINT
};

// A metric given by name. "accuracy"/"acc" resolves as Keras's compile() does, from the loss:
// sparse (integer) labels give sparse_categorical_accuracy, target vectors categorical_accuracy;
// the printed name stays "accuracy".
inline metric_spec resolve_metric(std::string_view name, bool sparse_labels) {
  if (name == "accuracy" || name == "acc")
    return {std::string(name), sparse_labels ? metric_kind::sparse_categorical_accuracy
                                             : metric_kind::categorical_accuracy};
  if (name == "sparse_categorical_accuracy")
    return {std::string(name), metric_kind::sparse_categorical_accuracy};
  if (name == "categorical_accuracy") return {std::string(name), metric_kind::categorical_accuracy};
  if (name == "mae" || name == "mean_absolute_error")
    return {std::string(name), metric_kind::mean_absolute_error};
  throw value_error("Could not interpret metric identifier: " + std::string(name) +
                    ". Use accuracy, sparse_categorical_accuracy, categorical_accuracy or "
                    "mean_absolute_error (mae).");
}

// What compile() accepts in its metrics list: a metric object or a name.
class metric_arg {
 public:
  metric_arg(const char* n) : name_(n) {}                                   // NOLINT
  metric_arg(std::string n) : name_(std::move(n)) {}                        // NOLINT
  metric_arg(sparse_categorical_accuracy m) : spec_(m), has_spec_(true) {}  // NOLINT
  metric_arg(categorical_accuracy m) : spec_(m), has_spec_(true) {}         // NOLINT
  metric_arg(mean_absolute_error m) : spec_(m), has_spec_(true) {}          // NOLINT
  metric_spec resolve(bool sparse_labels) const {
    return has_spec_ ? spec_ : resolve_metric(name_, sparse_labels);
  }

 private:
  std::string name_;
  metric_spec spec_{};
  bool has_spec_ = false;
};

}  // namespace tessel::metrics
