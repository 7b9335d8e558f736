// metrics: Keras's metrics. `mean` is the running weighted average every other metric reduces to
// (Keras's Mean / MeanMetricWrapper).
//
// A metric is any type with
//   - `name`, a string (the key of its logs);
//   - `local_sum<B>(const metric_call<B>&)`: the sum over this device's rows of its per-sample
//     value, into a slot of the step's sums in device memory;
// and, where they apply, the constants
//   - `sparse_labels`: it takes integer labels, not target vectors;
//   - `takes_argmax`: it counts rows whose arg-max is right (an accuracy: over classes split
//     across devices the trainer counts them from each row's reduced arg-max);
//   - `increases`: whether a larger value is better (early stopping's mode "auto");
// and `get_config()`, its arguments as text. compile() takes any such type and the trainer asks
// nothing else of a metric; the library's metrics below follow the same protocol.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/agreement.hpp"
#include "core/diagnostics.hpp"
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

// What a metric sums over: this device's block of the model's output (whole rows), the labels
// (a sparse metric) or targets of its rows, and the slot of the step's sums, in device memory,
// that takes the block's sum of per-sample values.
template <class B>
struct metric_call {
  const typename B::matrix& pred;
  const typename B::index_vector& labels;
  const typename B::matrix& targets;
  const typename B::sums& sums;
  std::size_t slot;
};

template <class M, class B>
concept metric_for = requires(const M& m, const metric_call<B>& c) {
  { std::string_view(m.name) };
  m.template local_sum<B>(c);
};

// keras.metrics.SparseCategoricalAccuracy: the rows whose arg-max is the label.
struct sparse_categorical_accuracy {
  std::string name = "sparse_categorical_accuracy";
  static constexpr bool sparse_labels = true, takes_argmax = true, increases = true;
  template <class B>
  void local_sum(const metric_call<B>& c) const {
    B::count_argmax_equal(c.pred, c.labels, c.targets, c.sums, c.slot);
  }
};
// keras.metrics.CategoricalAccuracy: the rows whose arg-max is the target's.
struct categorical_accuracy {
  std::string name = "categorical_accuracy";
  static constexpr bool takes_argmax = true, increases = true;
  template <class B>
  void local_sum(const metric_call<B>& c) const {
    B::count_argmax_equal(c.pred, typename B::index_vector(), c.targets, c.sums, c.slot);
  }
};
// keras.metrics.MeanAbsoluteError: the mean over samples of each sample's mean |y_pred - y_true|.
struct mean_absolute_error {
  std::string name = "mean_absolute_error";
  static constexpr bool increases = false;
  template <class B>
  void local_sum(const metric_call<B>& c) const {
    B::mean_absolute_error(c.pred, c.targets, c.sums, c.slot);
  }
};

// A compiled metric on backend B: any metric type (the library's or the user's) behind one
// interface. Copies share the metric, which does not change.
template <class B>
class metric_function {
 public:
  template <class M>
    requires metric_for<M, B>
  metric_function(M metric)  // NOLINT: a metric object converts, as Keras's compile takes one
      : impl_(std::make_shared<const holder<M>>(std::move(metric))) {}

  const std::string& name() const noexcept { return impl_->name; }
  // Whether it takes integer labels (else target vectors of the output's shape).
  bool sparse_labels() const noexcept { return impl_->sparse; }
  // Whether it counts rows whose arg-max is right (an accuracy: over classes split across
  // devices the trainer counts them from each row's reduced arg-max).
  bool takes_argmax() const noexcept { return impl_->argmax; }
  // Whether a larger value is better (early stopping's mode "auto"); none when the metric does
  // not say (Keras then asks for a mode).
  std::optional<bool> increases() const noexcept { return impl_->increases; }
  // What every process must hold alike: the metric's type, name and arguments.
  std::uint64_t fingerprint() const noexcept { return impl_->fingerprint; }
  template <class M>
  bool is() const noexcept {
    return dynamic_cast<const holder<M>*>(impl_.get()) != nullptr;
  }
  // The sum over this device's rows (whole rows) of the metric's per-sample value, into
  // sums(slot).
  void local_sum(const typename B::matrix& pred, const typename B::index_vector& labels,
                 const typename B::matrix& targets, const typename B::sums& sums,
                 std::size_t slot) const {
    impl_->local_sum({pred, labels, targets, sums, slot});
  }

 private:
  struct base {
    std::string name;
    bool sparse = false, argmax = false;
    std::optional<bool> increases;
    std::uint64_t fingerprint = 0;
    virtual ~base() = default;
    virtual void local_sum(const metric_call<B>& c) const = 0;
  };
  template <class M>
  struct holder final : base {
    M metric;
    explicit holder(M m) : metric(std::move(m)) {
      this->name = std::string(std::string_view(metric.name));
      if constexpr (requires { M::sparse_labels; }) this->sparse = M::sparse_labels;
      if constexpr (requires { M::takes_argmax; }) this->argmax = M::takes_argmax;
      if constexpr (requires { M::increases; }) this->increases = M::increases;
      this->fingerprint = object_fingerprint(metric, this->name);
    }
    void local_sum(const metric_call<B>& c) const override { metric.template local_sum<B>(c); }
  };
  std::shared_ptr<const base> impl_;
};

// A metric given by name. "accuracy"/"acc" resolves as Keras's compile() does, from the loss:
// sparse (integer) labels give sparse_categorical_accuracy, target vectors categorical_accuracy;
// the printed name stays "accuracy".
template <class B>
metric_function<B> resolve_metric(std::string_view name, bool sparse_labels) {
  const std::string n(name);
  if (name == "accuracy" || name == "acc") {
    if (sparse_labels) return sparse_categorical_accuracy{n};
    return categorical_accuracy{n};
  }
  if (name == "sparse_categorical_accuracy") return sparse_categorical_accuracy{n};
  if (name == "categorical_accuracy") return categorical_accuracy{n};
  if (name == "mae" || name == "mean_absolute_error") return mean_absolute_error{n};
  throw value_error("Could not interpret metric identifier: " + n +
                    ". Use accuracy, sparse_categorical_accuracy, categorical_accuracy or "
                    "mean_absolute_error (mae), or pass a metric object.");
}

// What compile() accepts in its metrics list: a metric object or a name (resolved once the loss
// is known).
template <class B>
class metric_arg {
 public:
  metric_arg(const char* n) : name_(n) {}             // NOLINT
  metric_arg(std::string n) : name_(std::move(n)) {}  // NOLINT
  template <class M>
    requires metric_for<M, B>
  metric_arg(M m) : metric_(std::move(m)) {}  // NOLINT
  // Anything else is a compile error naming its type.
  template <class M>
    requires(!metric_for<M, B> && !std::is_convertible_v<M, std::string>)
  metric_arg(M) {  // NOLINT
    static_assert(require<false, diagnostic::not_a_metric_on_this_backend<M, B>>);
  }
  metric_function<B> resolve(bool sparse_labels) const {
    return metric_ ? *metric_ : resolve_metric<B>(name_, sparse_labels);
  }

 private:
  std::string name_;
  std::optional<metric_function<B>> metric_;
};

// Compiled once for the host backend, in tessel::tessel (core/compilation.hpp).
#define TESSEL_METRICS_TEMPLATES(prefix, B) \
  prefix template metric_function<B> resolve_metric<B>(std::string_view, bool);
#if TESSEL_EXTERN_TEMPLATES
TESSEL_METRICS_TEMPLATES(extern, backend::host)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
TESSEL_METRICS_TEMPLATES(extern, backend::cuda)
#endif

}  // namespace tessel::metrics
