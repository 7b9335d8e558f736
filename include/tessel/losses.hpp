// losses: Keras's losses (same names and defaults), reduction "sum_over_batch_size". The value
// is computed with its gradient in one pass over the predictions.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "core/errors.hpp"
#include "core/model_plan.hpp"
#include "layers/split_rows.hpp"
#include "tensor/dtensor.hpp"

namespace tessel {

namespace losses {

// Each loss names the planner's loss_kind: the collectives its value and gradient need on a
// sharded output (a cross-entropy over a sharded class dimension needs row sums reduced; on
// logits the row max too).
struct mean_squared_error {
  static constexpr std::string_view name = "mean_squared_error";
  constexpr loss_kind plan_kind() const noexcept { return loss_kind::elementwise; }
};
struct sparse_categorical_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "sparse_categorical_crossentropy";
  constexpr loss_kind plan_kind() const noexcept {
    return from_logits ? loss_kind::softmax_cross_entropy : loss_kind::crossentropy;
  }
};
struct categorical_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "categorical_crossentropy";
  constexpr loss_kind plan_kind() const noexcept {
    return from_logits ? loss_kind::softmax_cross_entropy : loss_kind::crossentropy;
  }
};

// Keras's BinaryCrossentropy: each output a probability (clipped to [epsilon, 1 - epsilon]) or,
// with from_logits, a logit; the mean over the last axis per sample. Element-wise, as squared
// error is.
struct binary_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "binary_crossentropy";
  constexpr loss_kind plan_kind() const noexcept { return loss_kind::elementwise; }
};

}  // namespace losses

// What compile() accepts as a loss: one of the loss objects, or its Keras name.
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
  // Whether the loss takes integer class labels (one per sample) rather than target vectors.
  bool sparse_labels() const {
    return std::holds_alternative<losses::sparse_categorical_crossentropy>(value_);
  }
  std::string_view name() const {
    return std::visit([](const auto& l) { return std::decay_t<decltype(l)>::name; }, value_);
  }
  // The loss as the planner knows it.
  loss_kind plan_kind() const {
    return std::visit([](const auto& l) { return l.plan_kind(); }, value_);
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
                      "categorical_crossentropy or binary_crossentropy.");
  }
  value_type value_;
};

// Keras's backend epsilon, which clips probabilities in the cross-entropies.
inline constexpr float epsilon = 1e-7f;

// The sum over the rows of `pred` (this device's block of the model's output) of the
// per-sample loss, written into sums(slot) in the device's memory; writes d(loss)/d(pred) *
// grad_scale, for the same block, to grad. Labels are used by the sparse loss, targets by the
// others. The block must hold whole rows: a class dimension split across devices needs the row
// reductions of model-parallel training.
template <class B>
void loss_and_gradient(const loss_spec& loss, const basic_dtensor<B>& pred_block,
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
  const typename B::matrix& pred = pred_block.local();
  std::visit(
      [&](const auto& l) {
        using L = std::decay_t<decltype(l)>;
        if constexpr (std::is_same_v<L, losses::mean_squared_error>) {
          B::mean_squared_error(pred, targets, grad, grad_scale, sums, slot);
        } else if constexpr (std::is_same_v<L, losses::binary_crossentropy>) {
          B::binary_crossentropy(pred, targets, grad, grad_scale, l.from_logits, epsilon, sums,
                                 slot);
        } else if constexpr (std::is_same_v<L, losses::sparse_categorical_crossentropy>) {
          if (l.from_logits)
            B::softmax_cross_entropy(pred, labels, targets, grad, grad_scale, sums, slot);
          else
            B::crossentropy_on_probabilities(pred, labels, targets, grad, grad_scale, epsilon,
                                             sums, slot);
        } else {
          if (l.from_logits)
            B::softmax_cross_entropy(pred, typename B::index_vector(), targets, grad, grad_scale,
                                     sums, slot);
          else
            B::crossentropy_on_probabilities(pred, typename B::index_vector(), targets, grad,
                                             grad_scale, epsilon, sums, slot);
        }
      },
      loss.value());
}

// The same on a block whose class dimension is split across devices (Megatron's vocab-parallel
// cross-entropy): `targets` holds this block's columns, `labels` global class indices, and
// `reduce` completes each row's statistics over the devices that share the row, in the plan's
// order (row max on logits, row sum, target terms). The cross-entropies' sums are then whole
// rows' losses on every device of the row's group; the squared error's are partial (each device
// sums its own elements).
template <class B, class Reduce>
void split_loss_and_gradient(const loss_spec& loss, const basic_dtensor<B>& pred_block,
                             const typename B::index_vector& labels,
                             const typename B::matrix& targets, const typename B::matrix& grad,
                             float grad_scale, const typename B::sums& sums, std::size_t slot,
                             row_statistics<B>& st, Reduce& reduce) {
  const shape_value& g = pred_block.global_shape();
  const std::size_t last = g.rank - 1, col0 = pred_block.shard().offset[last];
  const std::uint32_t axes = class_axes(pred_block.layout());
  const typename B::matrix& pred = pred_block.local();
  st.size(B::rows(pred));
  std::visit(
      [&](const auto& l) {
        using L = std::decay_t<decltype(l)>;
        const bool sparse = std::is_same_v<L, losses::sparse_categorical_crossentropy>;
        const typename B::index_vector no_labels;
        const typename B::index_vector& lab = sparse ? labels : no_labels;
        if constexpr (std::is_same_v<L, losses::mean_squared_error>) {
          B::mean_squared_error(pred, targets, grad, grad_scale, sums, slot, g[last]);
        } else if constexpr (std::is_same_v<L, losses::binary_crossentropy>) {
          B::binary_crossentropy(pred, targets, grad, grad_scale, l.from_logits, epsilon, sums,
                                 slot, g[last]);
        } else if (l.from_logits) {
          split_exp_rows<B>(pred, grad, axes, st, reduce);
          B::target_terms(pred, lab, col0, targets, st.max, st.terms);
          reduce.reduce_rows(st.terms, axes, comm::reduce_op::sum);
          B::split_softmax_cross_entropy(grad, lab, col0, targets, st.sum, st.terms, grad_scale,
                                         sums, slot);
        } else {
          B::row_dot(pred, typename B::matrix(), st.sum);
          reduce.reduce_rows(st.sum, axes, comm::reduce_op::sum);
          B::crossentropy_terms(pred, lab, col0, targets, st.sum, epsilon, grad, st.terms);
          reduce.reduce_rows(st.terms, axes, comm::reduce_op::sum);
          B::split_crossentropy(grad, st.sum, st.terms, grad_scale, sums, slot);
        }
      },
      loss.value());
}

// The same, returning the sum on the host (one read-back; tests and one-off uses).
template <class B>
double loss_and_gradient(const loss_spec& loss, const typename B::matrix& pred,
                         const typename B::index_vector& labels, const typename B::matrix& targets,
                         const typename B::matrix& grad, float grad_scale) {
  const typename B::sums sums = B::make_sums("loss_sum", 1);
  loss_and_gradient<B>(loss, batch_block<B>(pred), labels, targets, grad, grad_scale, sums, 0);
  double total = 0.0;
  B::download(sums, std::span<double>(&total, 1));
  return total;
}

}  // namespace tessel
