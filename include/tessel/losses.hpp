// losses: Keras's losses (same names and defaults), reduction "sum_over_batch_size". The value
// is computed with its gradient in one pass over the predictions.
//
// A loss is any type with
//   - `name`, a string (Keras's name, as the logs and errors print it);
//   - `plan_rule()`, a pointer to its planning rule (loss_rule, core/model_plan.hpp): the
//     collectives its value and gradient need on an output whose class dimension is split across
//     devices (none for an element-wise loss, &loss_rules::elementwise; row sums for a
//     cross-entropy, the row max too on logits: losses/plan.hpp). A loss with statistics of its
//     own writes its own rule;
//   - `compute<B>(const loss_call<B>&)`: this device's block's sum of per-sample losses into its
//     slot of the step's sums, and d(loss)/d(pred) times the call's scale into the gradient;
// and, where it has them,
//   - `sparse_labels`: true when it takes integer class labels rather than target vectors;
//   - `compute_split<B>(call, row_statistics<B>&, const row_reducer<B>&)`: the same on a block
//     holding some of its rows' classes (needed by a loss that is not element-wise, when the
//     model splits the output's classes);
//   - `get_config()`: its arguments as text, which every process must hold alike.
// compile() takes any such type; the trainer asks nothing else of a loss. The library's losses
// below are written against the same protocol, and any of them can be named by its Keras name.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/agreement.hpp"
#include "core/diagnostics.hpp"
#include "core/errors.hpp"
#include "core/model_plan.hpp"
#include "losses/plan.hpp"
#include "layers/split_rows.hpp"
#include "tensor/dtensor.hpp"

namespace tessel {

// Keras's backend epsilon, which clips probabilities in the cross-entropies.
inline constexpr float epsilon = 1e-7f;

// What a loss computes on: this device's block of the model's output (`pred`), the labels (a
// sparse loss) or the targets of the block's rows and columns, the gradient to write (the
// block's shape) with its scale (1 / the global batch: the mean over the batch), and the slot of
// the step's sums, in device memory, that takes the block's sum of per-sample losses.
template <class B>
struct loss_call {
  const basic_dtensor<B>& pred;
  const typename B::index_vector& labels;
  const typename B::matrix& targets;
  const typename B::matrix& grad;
  float grad_scale;
  const typename B::sums& sums;
  std::size_t slot;

  const typename B::matrix& local() const noexcept { return pred.local(); }
  // The length of the class (last) dimension, whole: an element-wise loss's per-sample mean
  // divides by it when the block holds only some of the columns (its sum is then partial).
  std::size_t classes() const noexcept {
    const shape_value& g = pred.global_shape();
    return g[g.rank - 1];
  }
  // The global index of the block's first class, and the mesh axes the classes are split over.
  std::size_t first_class() const noexcept {
    return pred.shard().offset[pred.global_shape().rank - 1];
  }
  std::uint32_t class_axes() const noexcept { return tessel::class_axes(pred.layout()); }
};

template <class L, class B>
concept loss_for = requires(const L& l, const loss_call<B>& c) {
  { std::string_view(l.name) };
  { l.plan_rule() } -> std::same_as<const loss_rule*>;
  l.template compute<B>(c);
};

namespace losses {

// keras.losses.MeanSquaredError: per sample, the mean over the last axis of (pred - target)^2.
struct mean_squared_error {
  static constexpr std::string_view name = "mean_squared_error";
  constexpr const loss_rule* plan_rule() const noexcept { return &loss_rules::elementwise; }
  template <class B>
  void compute(const loss_call<B>& c) const {
    B::mean_squared_error(c.local(), c.targets, c.grad, c.grad_scale, c.sums, c.slot, c.classes());
  }
};

// Keras's BinaryCrossentropy: each output a probability (clipped to [epsilon, 1 - epsilon]) or,
// with from_logits, a logit; the mean over the last axis per sample. Element-wise, as squared
// error is.
struct binary_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "binary_crossentropy";
  constexpr const loss_rule* plan_rule() const noexcept { return &loss_rules::elementwise; }
  std::string get_config() const { return from_logits ? "from_logits=True" : "from_logits=False"; }
  template <class B>
  void compute(const loss_call<B>& c) const {
    B::binary_crossentropy(c.local(), c.targets, c.grad, c.grad_scale, from_logits, epsilon,
                           c.sums, c.slot, c.classes());
  }
};

// The two cross-entropies over classes: on probabilities (clipped) or, with from_logits, on
// logits (softmax and cross-entropy in one); `Sparse` takes integer labels, else target
// vectors. Over split classes (Megatron's vocab-parallel cross-entropy) each row's statistics
// are completed over the devices that share the row, in the plan's order (row max on logits,
// row sum, target terms): every device of the row's group then holds the whole row's loss.
template <bool Sparse>
struct crossentropy_over_classes {
  bool from_logits = false;
  static constexpr std::string_view name =
      Sparse ? "sparse_categorical_crossentropy" : "categorical_crossentropy";
  static constexpr bool sparse_labels = Sparse;
  constexpr const loss_rule* plan_rule() const noexcept {
    return from_logits ? &loss_rules::softmax_cross_entropy : &loss_rules::crossentropy;
  }
  std::string get_config() const { return from_logits ? "from_logits=True" : "from_logits=False"; }

  template <class B>
  void compute(const loss_call<B>& c) const {
    const typename B::index_vector no_labels;
    const typename B::index_vector& lab = Sparse ? c.labels : no_labels;
    if (from_logits)
      B::softmax_cross_entropy(c.local(), lab, c.targets, c.grad, c.grad_scale, c.sums, c.slot);
    else
      B::crossentropy_on_probabilities(c.local(), lab, c.targets, c.grad, c.grad_scale, epsilon,
                                       c.sums, c.slot);
  }
  template <class B>
  void compute_split(const loss_call<B>& c, row_statistics<B>& st,
                     const row_reducer<B>& reduce) const {
    const typename B::index_vector no_labels;
    const typename B::index_vector& lab = Sparse ? c.labels : no_labels;
    const typename B::matrix& pred = c.local();
    const std::uint32_t axes = c.class_axes();
    const std::size_t col0 = c.first_class();
    st.size(B::rows(pred));
    if (from_logits) {
      split_exp_rows<B>(pred, c.grad, axes, st, reduce);
      B::target_terms(pred, lab, col0, c.targets, st.max, st.terms);
      reduce.reduce_rows(st.terms, axes, comm::reduce_op::sum);
      B::split_softmax_cross_entropy(c.grad, lab, col0, c.targets, st.sum, st.terms,
                                     c.grad_scale, c.sums, c.slot);
    } else {
      B::row_dot(pred, typename B::matrix(), st.sum);
      reduce.reduce_rows(st.sum, axes, comm::reduce_op::sum);
      B::crossentropy_terms(pred, lab, col0, c.targets, st.sum, epsilon, c.grad, st.terms);
      reduce.reduce_rows(st.terms, axes, comm::reduce_op::sum);
      B::split_crossentropy(c.grad, st.sum, st.terms, c.grad_scale, c.sums, c.slot);
    }
  }
};
using sparse_categorical_crossentropy = crossentropy_over_classes<true>;
using categorical_crossentropy = crossentropy_over_classes<false>;

}  // namespace losses

// A loss given by its Keras name (or one of the library's loss objects), before a backend is
// known: what a name resolves to.
class loss_spec {
 public:
  using value_type = std::variant<losses::mean_squared_error,
                                  losses::sparse_categorical_crossentropy,
                                  losses::categorical_crossentropy,
                                  losses::binary_crossentropy>;
  loss_spec(losses::mean_squared_error l) : value_(l) {}                 // NOLINT
  loss_spec(losses::sparse_categorical_crossentropy l) : value_(l) {}    // NOLINT
  loss_spec(losses::categorical_crossentropy l) : value_(l) {}           // NOLINT
  loss_spec(losses::binary_crossentropy l) : value_(l) {}                // NOLINT
  loss_spec(const char* name) : loss_spec(std::string_view(name)) {}     // NOLINT
  loss_spec(std::string_view name) : value_(from_name(name)) {}          // NOLINT

  const value_type& value() const { return value_; }
  std::string_view name() const {
    return std::visit([](const auto& l) { return std::string_view(l.name); }, value_);
  }
  const loss_rule* plan_rule() const {
    return std::visit([](const auto& l) { return l.plan_rule(); }, value_);
  }

 private:
  static value_type from_name(std::string_view n) {
    if (n == "mse" || n == "mean_squared_error" || n == "MeanSquaredError")
      return losses::mean_squared_error{};
    if (n == "sparse_categorical_crossentropy" || n == "SparseCategoricalCrossentropy")
      return losses::sparse_categorical_crossentropy{};
    if (n == "categorical_crossentropy" || n == "CategoricalCrossentropy")
      return losses::categorical_crossentropy{};
    if (n == "binary_crossentropy" || n == "BinaryCrossentropy")
      return losses::binary_crossentropy{};
    throw value_error("Could not interpret loss identifier: " + std::string(n) +
                      ". Use mean_squared_error (mse), sparse_categorical_crossentropy, "
                      "categorical_crossentropy or binary_crossentropy, or pass a loss object.");
  }
  value_type value_;
};

// The compiled loss on backend B: any loss type (the library's or the user's), a loss_spec, or
// a Keras name, behind one interface. Copies share the loss, which does not change.
template <class B>
class loss_function {
 public:
  template <class L>
    requires loss_for<L, B>
  loss_function(L loss)  // NOLINT: a loss object converts, as Keras's compile takes one
      : impl_(std::make_shared<const holder<L>>(std::move(loss))) {}
  loss_function(const loss_spec& spec)  // NOLINT
      : loss_function(std::visit([](const auto& l) { return loss_function(l); }, spec.value())) {}
  loss_function(const char* name) : loss_function(loss_spec(name)) {}          // NOLINT
  loss_function(std::string_view name) : loss_function(loss_spec(name)) {}    // NOLINT
  loss_function(const std::string& name) : loss_function(loss_spec(name)) {}  // NOLINT
  // Anything else is a compile error naming its type.
  template <class L>
    requires(!loss_for<L, B> && !std::is_convertible_v<L, loss_spec>)
  loss_function(L) {  // NOLINT
    static_assert(require<false, diagnostic::not_a_loss_on_this_backend<L, B>>);
  }

  std::string_view name() const noexcept { return impl_->name; }
  const loss_rule* plan_rule() const noexcept { return impl_->rule; }
  bool sparse_labels() const noexcept { return impl_->sparse; }
  // What every process must hold alike: the loss's type, name, kind and arguments.
  std::uint64_t fingerprint() const noexcept { return impl_->fingerprint; }
  // Whether the loss is an `L` (as compile() was given it, or as its name resolved).
  template <class L>
  bool is() const noexcept {
    return dynamic_cast<const holder<L>*>(impl_.get()) != nullptr;
  }
  void compute(const loss_call<B>& c) const { impl_->compute(c); }
  // False when the loss has no form for split classes (it then computed nothing).
  bool compute_split(const loss_call<B>& c, row_statistics<B>& st,
                     const row_reducer<B>& reduce) const {
    return impl_->compute_split(c, st, reduce);
  }

 private:
  struct base {
    std::string name;
    const loss_rule* rule = &no_loss;
    bool sparse = false;
    std::uint64_t fingerprint = 0;
    virtual ~base() = default;
    virtual void compute(const loss_call<B>& c) const = 0;
    virtual bool compute_split(const loss_call<B>& c, row_statistics<B>& st,
                               const row_reducer<B>& reduce) const = 0;
  };
  template <class L>
  struct holder final : base {
    L loss;
    explicit holder(L l) : loss(std::move(l)) {
      this->name = std::string(std::string_view(loss.name));
      this->rule = loss.plan_rule();
      if constexpr (requires { L::sparse_labels; }) this->sparse = L::sparse_labels;
      this->fingerprint = object_fingerprint(
          loss, this->name + " planned as " + std::string(this->rule->name));
    }
    void compute(const loss_call<B>& c) const override { loss.template compute<B>(c); }
    bool compute_split(const loss_call<B>& c, row_statistics<B>& st,
                       const row_reducer<B>& reduce) const override {
      if constexpr (requires { loss.template compute_split<B>(c, st, reduce); }) {
        loss.template compute_split<B>(c, st, reduce);
        return true;
      } else {
        return false;
      }
    }
  };
  std::shared_ptr<const base> impl_;
};

// The sum over the rows of `pred_block` (this device's block of the model's output) of the
// per-sample loss, into sums(slot) in the device's memory; d(loss)/d(pred) * grad_scale, for the
// same block, into grad. The block must hold whole rows: a class dimension split across devices
// needs split_loss_and_gradient.
template <class B>
void loss_and_gradient(const loss_function<B>& loss, const basic_dtensor<B>& pred_block,
                       const typename B::index_vector& labels, const typename B::matrix& targets,
                       const typename B::matrix& grad, float grad_scale,
                       const typename B::sums& sums, std::size_t slot) {
  const shape_value& g = pred_block.global_shape();
  if (g.rank >= 2 && pred_block.shard().extent[g.rank - 1] != g[g.rank - 1])
    throw value_error(std::string(loss.name()) + ": the output's class dimension is split across "
                      "devices (its block holds " +
                      std::to_string(pred_block.shard().extent[g.rank - 1]) + " of " +
                      std::to_string(g[g.rank - 1]) +
                      " classes); this loss takes whole rows. Lay the last layer's output out "
                      "with its classes whole (a \"<layer>/output\" rule with None last)");
  loss.compute({pred_block, labels, targets, grad, grad_scale, sums, slot});
}

// The same on a block whose class dimension is split across devices: `targets` holds this
// block's columns, `labels` global class indices, and `reduce` (the model's resharder) completes
// each row's statistics over the devices that share the row. An element-wise loss's sums are
// then partial (each device sums its own elements); a cross-entropy's are whole rows' losses on
// every device of the row's group.
template <class B, class Reduce>
void split_loss_and_gradient(const loss_function<B>& loss, const basic_dtensor<B>& pred_block,
                             const typename B::index_vector& labels,
                             const typename B::matrix& targets, const typename B::matrix& grad,
                             float grad_scale, const typename B::sums& sums, std::size_t slot,
                             row_statistics<B>& st, Reduce& reduce) {
  const loss_call<B> call{pred_block, labels, targets, grad, grad_scale, sums, slot};
  if (loss.compute_split(call, st, row_reducer<B>(reduce))) return;
  if (loss.plan_rule() != &loss_rules::elementwise)
    throw value_error(std::string(loss.name()) +
                      ": the output's classes are split across devices, and this loss has no "
                      "form for split rows (compute_split); lay the last layer's output out with "
                      "its classes whole (a \"<layer>/output\" rule with None last), or give the "
                      "loss a compute_split");
  loss.compute(call);
}

// The same, returning the sum on the host (one read-back; tests and one-off uses).
template <class B>
double loss_and_gradient(const loss_function<B>& loss, const typename B::matrix& pred,
                         const typename B::index_vector& labels, const typename B::matrix& targets,
                         const typename B::matrix& grad, float grad_scale) {
  const typename B::sums sums = B::make_sums("loss_sum", 1);
  loss_and_gradient<B>(loss, batch_block<B>(pred), labels, targets, grad, grad_scale, sums, 0);
  double total = 0.0;
  B::download(sums, std::span<double>(&total, 1));
  return total;
}

}  // namespace tessel
