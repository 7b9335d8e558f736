// Planning rules of the library's losses (loss_rule, core/model_plan.hpp), as layers/plan/ holds
// the layers': what each reduces across devices besides its sum. Squared error and binary
// cross-entropy are summed element by element, so over a split class dimension each device sums
// its own elements; the cross-entropies over classes complete each row first, on logits (a
// log-softmax: row max, row sum of exp(z - max), target terms) or on probabilities (Keras
// normalises each row by its sum: row sum, target terms). Standard library only.
#pragma once

#include <cstdint>

#include "../core/layer_planner.hpp"
#include "../core/model_plan.hpp"
#include "../core/propagation.hpp"

namespace tessel::loss_rules {

constexpr std::uint32_t plan_elementwise(layer_planner&, const layout_value& predictions,
                                         const shape_value&) noexcept {
  return predictions.sharded_axes();
}

// The rows' statistics, over the mesh axes a row's classes are split over; the per-sample losses
// are then whole on every device of a row's group.
template <bool Logits>
constexpr std::uint32_t plan_crossentropy(layer_planner& p, const layout_value& predictions,
                                          const shape_value& shape) noexcept {
  layout_value labels = layout_value::replicated(1);
  labels.dims[0] = predictions.dims[0];
  const auto r = propagate_softmax_cross_entropy(predictions, labels);
  if (!r.ok) {
    p.fail(r.error);
    return 0;
  }
  if (Logits) p.row_reduction(r.reduce_axes, predictions, shape, phase::forward, "row max");
  p.row_reduction(r.reduce_axes, predictions, shape, phase::forward, "row sum");
  p.row_reduction(r.reduce_axes, predictions, shape, phase::forward, "target terms", 2);
  return r.out.sharded_axes();
}

// Squared error, binary cross-entropy, and any loss summed element by element.
inline constexpr loss_rule elementwise{&plan_elementwise, "elementwise"};
// Cross-entropy on logits (from_logits) and on probabilities.
inline constexpr loss_rule softmax_cross_entropy{&plan_crossentropy<true>, "softmax_cross_entropy"};
inline constexpr loss_rule crossentropy{&plan_crossentropy<false>, "crossentropy"};

}  // namespace tessel::loss_rules
