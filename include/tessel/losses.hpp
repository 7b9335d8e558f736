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
#include "tensor/dtensor.hpp"

namespace tessel {

namespace losses {

// Each loss names the planner's loss_kind: the collectives its value and gradient need on a
// sharded output (a softmax over a sharded class dimension needs the max and the sum reduced).
struct mean_squared_error {
  static constexpr std::string_view name = "mean_squared_error";
  static constexpr loss_kind plan_kind = loss_kind::mean_squared_error;
};
struct sparse_categorical_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "sparse_categorical_crossentropy";
  static constexpr loss_kind plan_kind = loss_kind::softmax_cross_entropy;
};
struct categorical_crossentropy {
  bool from_logits = false;
  static constexpr std::string_view name = "categorical_crossentropy";
  static constexpr loss_kind plan_kind = loss_kind::softmax_cross_entropy;
};

}  // namespace losses

// What compile() accepts as a loss: one of the loss objects, or its Keras name.
class loss_spec {
 public:
  using value_type = std::variant<losses::mean_squared_error,
                                  losses::sparse_categorical_crossentropy,
                                  losses::categorical_crossentropy>;
  loss_spec(losses::mean_squared_error l) : value_(l) {}                 // NOLINT
  loss_spec(losses::sparse_categorical_crossentropy l) : value_(l) {}    // NOLINT
  loss_spec(losses::categorical_crossentropy l) : value_(l) {}           // NOLINT
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
    return std::visit([](const auto& l) { return std::decay_t<decltype(l)>::plan_kind; }, value_);
  }

 private:
  static value_type from_name(std::string_view n) {
    if (n == "mse" || n == "mean_squared_error" || n == "MeanSquaredError")
      return losses::mean_squared_error{};
    if (n == "sparse_categorical_crossentropy" || n == "SparseCategoricalCrossentropy")
      return losses::sparse_categorical_crossentropy{};
    if (n == "categorical_crossentropy" || n == "CategoricalCrossentropy")
      return losses::categorical_crossentropy{};
    throw value_error("Could not interpret loss identifier: " + std::string(n) +
                      ". Use mean_squared_error (mse), sparse_categorical_crossentropy or "
                      "categorical_crossentropy.");
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
