// metrics: Keras's metrics. `mean` is the running weighted average every other metric reduces to
// (Keras's Mean / MeanMetricWrapper); the accuracies count correct samples.
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
  // Adds another replica's partial sums (used to reduce a metric across devices).
  void merge(double total, double count) {
    total_ += total;
    count_ += count;
  }

 private:
  std::string name_;
  double total_ = 0, count_ = 0;
};

enum class metric_kind { sparse_categorical_accuracy, categorical_accuracy };

// A metric named in compile(): its printed name and what it computes.
struct metric_spec {
  std::string name;
  metric_kind kind;
};

struct sparse_categorical_accuracy {
  std::string name = "sparse_categorical_accuracy";
  operator metric_spec() const { return {name, metric_kind::sparse_categorical_accuracy}; }  // NOLINT
};
struct categorical_accuracy {
  std::string name = "categorical_accuracy";
  operator metric_spec() const { return {name, metric_kind::categorical_accuracy}; }  // NOLINT
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
  throw value_error("Could not interpret metric identifier: " + std::string(name) +
                    ". Use accuracy, sparse_categorical_accuracy or categorical_accuracy.");
}

// What compile() accepts in its metrics list: a metric object or a name.
class metric_arg {
 public:
  metric_arg(const char* n) : name_(n) {}                            // NOLINT
  metric_arg(std::string n) : name_(std::move(n)) {}                 // NOLINT
  metric_arg(sparse_categorical_accuracy m) : spec_(m), has_spec_(true) {}  // NOLINT
  metric_arg(categorical_accuracy m) : spec_(m), has_spec_(true) {}         // NOLINT
  metric_spec resolve(bool sparse_labels) const {
    return has_spec_ ? spec_ : resolve_metric(name_, sparse_labels);
  }

 private:
  std::string name_;
  metric_spec spec_{};
  bool has_spec_ = false;
};

}  // namespace tessel::metrics
