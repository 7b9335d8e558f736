// Propagation rules, one per op family.
#include <tessel/core.hpp>

namespace {
using namespace tessel;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
constexpr mesh_value m = mesh_2x4::value;
constexpr std::uint8_t data = 0, model = 1;
constexpr layout_value rep = layout_value::replicated(2);
constexpr layout_value batch = layout_value::sharded(2, 0, data);       // ("data", None)
constexpr layout_value cols = layout_value::sharded(2, 1, model);       // (None, "model")
constexpr layout_value rows = layout_value::sharded(2, 0, model);       // ("model", None)
constexpr layout_value batch_cols = [] {
  layout_value l = batch;
  l.dims[1].push(model);
  return l;
}();

// elementwise: equal layouts; partial + partial stays partial; a nonlinear op refuses partial.
static_assert(propagate_elementwise(batch, batch).ok && propagate_elementwise(batch, batch).out == batch);
static_assert(!propagate_elementwise(batch, cols).ok);
constexpr layout_value p_model = [] {
  layout_value l = batch;
  l.partial = 1u << model;
  return l;
}();
static_assert(propagate_elementwise(p_model, p_model).out.partial == 1u << model);
static_assert(!propagate_elementwise(p_model, batch).ok);
static_assert(propagate_unary(p_model, true).ok && !propagate_unary(p_model, false).ok);

// matmul: x("data", None) @ W(None, "model") -> ("data", "model"), complete.
constexpr auto col = propagate_matmul(batch, cols);
static_assert(col.ok && col.out == batch_cols && col.out.partial == 0);
// x("data", "model") @ W("model", None) -> ("data", None) partial over "model".
constexpr auto row = propagate_matmul(batch_cols, rows);
static_assert(row.ok && row.out.dims[0] == batch.dims[0] && row.out.dims[1].empty());
static_assert(row.out.partial == 1u << model);
// The contracting dimension must be sharded alike on both sides.
static_assert(!propagate_matmul(batch, rows).ok);
// One axis cannot shard both dimensions of the result.
static_assert(!propagate_matmul(layout_value::sharded(2, 0, model), cols).ok);
// Both operands partial is not a product of sums.
static_assert(!propagate_matmul(p_model, [] { auto l = rep; l.partial = 1; return l; }()).ok);

// bias add: bias laid out like the last dimension; never onto a partial value.
static_assert(propagate_bias_add(batch_cols, layout_value::sharded(1, 0, model)).ok);
static_assert(!propagate_bias_add(batch_cols, layout_value::replicated(1)).ok);
static_assert(!propagate_bias_add(p_model, layout_value::replicated(1)).ok);

// reductions: a sharded reduced dimension leaves a partial result.
constexpr auto sum0 = propagate_reduce(batch_cols, 0);
static_assert(sum0.ok && sum0.out.rank == 1 && sum0.out.dims[0].axes[0] == model);
static_assert(sum0.out.partial == 1u << data);
constexpr auto sum1 = propagate_reduce(batch_cols, 1, true);
static_assert(sum1.out.rank == 2 && sum1.out.dims[1].empty() && sum1.out.partial == 1u << model);

// flatten: sharding survives on the major-most merged dimension only.
constexpr layout_value img = layout_value::sharded(4, 0, data);  // ("data", None, None, None)
constexpr auto flat = propagate_flatten(img, 1, 3);
static_assert(flat.ok && flat.out == batch);
static_assert(!propagate_flatten(layout_value::sharded(4, 2, model), 1, 3).ok);
static_assert(propagate_flatten(layout_value::sharded(4, 1, model), 1, 3).out == cols);
static_assert(flatten_input_requirement(layout_value::sharded(4, 2, model), 1, 3) ==
              layout_value::replicated(4));

// reshape: (16, 28, 28) sharded on dim 1 -> (16, 784) keeps "model" on dim 1 (784 % 4 == 0);
// splitting (16, 200) -> (16, 20, 10) puts "model" on the major output dimension (20 % 4 == 0).
constexpr auto rs1 = propagate_reshape(layout_value::sharded(3, 1, model), m, {16, 28, 28}, {16, 784});
static_assert(rs1.ok && rs1.out == cols);
constexpr auto rs2 = propagate_reshape(cols, m, {16, 200}, {16, 20, 10});
static_assert(rs2.ok && rs2.out == layout_value::sharded(3, 1, model));
static_assert(!propagate_reshape(cols, m, {16, 200}, {16, 2, 100}).ok);  // 2 % 4 != 0
static_assert(!propagate_reshape(layout_value::sharded(3, 2, model), m, {16, 28, 28}, {16, 784}).ok);

// transpose
constexpr auto tr = propagate_transpose(batch_cols, {1, 0});
static_assert(tr.ok && tr.out.dims[0].axes[0] == model && tr.out.dims[1].axes[0] == data);
static_assert(!propagate_transpose(batch_cols, {0, 0}).ok);

// softmax cross-entropy over a sharded class dimension needs the row max and sum reduced over
// "model"; over a replicated one it is local.
constexpr auto ce = propagate_softmax_cross_entropy(batch_cols, layout_value::sharded(1, 0, data));
static_assert(ce.ok && ce.reduce_axes == 1u << model && ce.out == layout_value::sharded(1, 0, data));
static_assert(propagate_softmax_cross_entropy(batch, layout_value::sharded(1, 0, data)).reduce_axes == 0);
static_assert(!propagate_softmax_cross_entropy(batch, layout_value::replicated(1)).ok);
static_assert(!propagate_softmax(p_model).ok);
}  // namespace
