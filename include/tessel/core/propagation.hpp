// Propagation rules: the layout of an op's result from the layouts of its operands.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "shape.hpp"
#include "tensor_layout.hpp"

namespace tessel {

struct rule_result {
  bool ok = true;
  layout_value out{};
  // Mesh axes over which the op itself must reduce per-row scalars (softmax over a sharded
  // class dimension needs an all_reduce of the row max and one of the row sum over these).
  std::uint32_t reduce_axes = 0;
  std::string_view error{};
};

constexpr rule_result rule_error(std::string_view why) noexcept { return {false, {}, 0, why}; }

// a + b, a * b: operands must agree. Two partial values add into a partial value.
constexpr rule_result propagate_elementwise(const layout_value& a, const layout_value& b) noexcept {
  if (!(a.without_partial() == b.without_partial()))
    return rule_error("elementwise operands have different layouts; reshard one to the other");
  if (a.partial != b.partial)
    return rule_error("elementwise operands are partial over different axes; reduce them first");
  return {true, a};
}

// relu, dropout, scaling: a linear op keeps a partial value partial; a nonlinear one cannot run
// on summands and needs the value reduced first.
constexpr rule_result propagate_unary(const layout_value& a, bool linear) noexcept {
  if (!linear && a.partial)
    return rule_error("a nonlinear op needs a complete value; all_reduce the partial axes first");
  return {true, a};
}

// a[m, k] @ b[k, n]. A contracting dimension sharded the same way on both sides gives a result
// partial over those axes.
constexpr rule_result propagate_matmul(const layout_value& a, const layout_value& b) noexcept {
  if (a.rank != 2 || b.rank != 2) return rule_error("matmul takes two matrices");
  if (!(a.dims[1] == b.dims[0]))
    return rule_error("the contracting dimension is sharded differently on the two operands");
  if (a.partial && b.partial) return rule_error("both matmul operands are partial");
  if ((a.partial & b.sharded_axes()) || (b.partial & a.sharded_axes()))
    return rule_error("a matmul operand is partial over an axis that shards the other");
  layout_value out = layout_value::replicated(2);
  out.dims[0] = a.dims[0];
  out.dims[1] = b.dims[1];
  if (out.dims[0].mask() & out.dims[1].mask())
    return rule_error("one mesh axis would shard both dimensions of the matmul result");
  out.partial = a.partial | b.partial | a.dims[1].mask();
  return {true, out};
}

// y[..., n] + bias[n]: the bias must be laid out like y's last dimension, and y complete (a
// bias added to each summand would be counted once per device).
constexpr rule_result propagate_bias_add(const layout_value& y, const layout_value& bias) noexcept {
  if (bias.rank != 1 || y.rank == 0) return rule_error("a bias is a vector");
  if (y.partial) return rule_error("the bias is added to a partial value; reduce it first");
  if (!(bias.dims[0] == y.dims[y.rank - 1]))
    return rule_error("the bias is sharded differently from the last dimension of its input");
  return {true, y};
}

// sum or mean over `dim`: a sharded reduced dimension leaves a result partial over its axes.
constexpr rule_result propagate_reduce(const layout_value& a, std::size_t dim,
                                       bool keepdims = false) noexcept {
  if (dim >= a.rank) return rule_error("the reduced dimension is out of range");
  layout_value out = a;
  out.partial |= a.dims[dim].mask();
  if (keepdims) {
    out.dims[dim] = {};
  } else {
    for (std::size_t d = dim; d + 1 < a.rank; ++d) out.dims[d] = a.dims[d + 1];
    out.dims[a.rank - 1] = {};
    out.rank = a.rank - 1;
  }
  return {true, out};
}

// Merging dimensions [first, last] into one: only the major-most of them may be sharded, and its
// sharding becomes the merged dimension's.
constexpr rule_result propagate_flatten(const layout_value& a, std::size_t first,
                                        std::size_t last) noexcept {
  if (first > last || last >= a.rank) return rule_error("the flattened range is out of range");
  for (std::size_t d = first + 1; d <= last; ++d)
    if (!a.dims[d].empty())
      return rule_error("only the major-most flattened dimension may be sharded; gather the rest");
  layout_value out = a;
  const std::size_t gone = last - first;
  for (std::size_t d = first + 1; d + gone < a.rank; ++d) out.dims[d] = a.dims[d + gone];
  for (std::size_t d = a.rank - gone; d < a.rank; ++d) out.dims[d] = {};
  out.rank = a.rank - gone;
  return {true, out};
}

// The layout a flatten of [first, last] needs of its input: those dimensions but the first
// replicated.
constexpr layout_value flatten_input_requirement(const layout_value& a, std::size_t first,
                                                 std::size_t last) noexcept {
  layout_value r = a;
  for (std::size_t d = first + 1; d <= last && d < a.rank; ++d) r.dims[d] = {};
  return r;
}

// reshape from `from` to `to` (static extents): dimensions are grouped where the running products
// meet; in each group only the major-most input dimension may be sharded, and its sharding goes
// to the major-most output dimension, which must divide by it.
constexpr rule_result propagate_reshape(const layout_value& a, const mesh_value& mesh,
                                        const shape_value& from, const shape_value& to) noexcept {
  if (a.rank != from.rank) return rule_error("the layout's rank differs from the input's");
  if (from.elements() != to.elements()) return rule_error("reshape must keep the element count");
  layout_value out = layout_value::replicated(to.rank);
  out.partial = a.partial;
  std::size_t i = 0, o = 0;
  while (i < from.rank || o < to.rank) {
    const std::size_t gi = i, go = o;
    std::size_t pi = i < from.rank ? from[i++] : 1, po = o < to.rank ? to[o++] : 1;
    while (pi != po) {
      if (pi < po && i < from.rank) pi *= from[i++];
      else if (po < pi && o < to.rank) po *= to[o++];
      else return rule_error("reshape extents do not group");
    }
    for (std::size_t d = gi + 1; d < i; ++d)
      if (!a.dims[d].empty())
        return rule_error("only the major-most dimension of a reshaped group may be sharded");
    if (gi < from.rank && !a.dims[gi].empty()) {
      if (go >= to.rank || to[go] % mesh.size_of(a.dims[gi].mask()) != 0)
        return rule_error("the reshaped major dimension does not divide by its mesh axes");
      out.dims[go] = a.dims[gi];
    }
  }
  return {true, out};
}

// out.dims[i] = a.dims[perm[i]].
constexpr rule_result propagate_transpose(const layout_value& a,
                                          const std::array<std::size_t, max_rank>& perm) noexcept {
  layout_value out = a;
  std::uint32_t seen = 0;
  for (std::size_t i = 0; i < a.rank; ++i) {
    if (perm[i] >= a.rank || (seen & (1u << perm[i])))
      return rule_error("transpose needs a permutation of the dimensions");
    seen |= 1u << perm[i];
    out.dims[i] = a.dims[perm[i]];
  }
  return {true, out};
}

// softmax (and softmax cross-entropy) over the last dimension of logits[batch, classes]. With
// the class dimension sharded, the row max and row sum are all_reduced over its axes
// (`reduce_axes`); the result keeps the logits' layout. With labels, the per-sample loss is laid
// out like the batch dimension.
constexpr rule_result propagate_softmax(const layout_value& logits) noexcept {
  if (logits.rank == 0) return rule_error("softmax needs at least one dimension");
  if (logits.partial) return rule_error("softmax needs complete logits; reduce them first");
  return {true, logits, logits.dims[logits.rank - 1].mask()};
}

constexpr rule_result propagate_softmax_cross_entropy(const layout_value& logits,
                                                      const layout_value& labels) noexcept {
  if (logits.rank != 2 || labels.rank != 1)
    return rule_error("softmax cross-entropy takes logits[batch, classes] and labels[batch]");
  if (!(labels.dims[0] == logits.dims[0]))
    return rule_error("labels must be split over the batch like the logits");
  auto r = propagate_softmax(logits);
  if (!r.ok) return r;
  layout_value loss = layout_value::replicated(1);
  loss.dims[0] = logits.dims[0];
  return {true, loss, r.reduce_axes};
}

}  // namespace tessel
