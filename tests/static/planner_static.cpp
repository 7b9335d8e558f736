// The resharding planner: each transition, its bytes, its order, and the backward transposes.
#include <tessel/core.hpp>

namespace {
using namespace tessel;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
constexpr mesh_value m = mesh_2x4::value;
constexpr std::uint8_t data = 0, model = 1;
constexpr shape_value s{16, 200};  // float32: 12800 bytes replicated

constexpr layout_value rep = layout_value::replicated(2);
constexpr layout_value by_model_1 = layout_value::sharded(2, 1, model);  // (None, "model")
constexpr layout_value by_model_0 = layout_value::sharded(2, 0, model);  // ("model", None)
constexpr layout_value partial_model = [] {
  layout_value l = rep;
  l.partial = 1u << model;
  return l;
}();

// shard -> replicate = all_gather
constexpr auto gather = plan_reshard(by_model_1, rep, m, s);
static_assert(gather.ok && gather.size() == 1);
static_assert(gather[0] == reshard_step{collective::all_gather, model, 1, 1, 16 * 50 * 4, 16 * 50 * 4 * 3});
// partial -> replicate = all_reduce (ring: 2(n-1)/n of the buffer)
constexpr auto reduce = plan_reshard(partial_model, rep, m, s);
static_assert(reduce.ok && reduce.size() == 1 && reduce[0].kind == collective::all_reduce);
static_assert(reduce[0].axis == model && reduce[0].bytes == 12800 && reduce[0].wire_bytes == 19200);
// partial -> shard = reduce_scatter
constexpr auto scatter = plan_reshard(partial_model, by_model_1, m, s);
static_assert(scatter.ok && scatter.size() == 1);
static_assert(scatter[0] == reshard_step{collective::reduce_scatter, model, 1, 1, 12800, 9600});
// replicate -> shard = slice (local, nothing sent)
constexpr auto slice = plan_reshard(rep, by_model_0, m, s);
static_assert(slice.ok && slice.size() == 1 && slice[0].kind == collective::slice);
static_assert(slice[0].wire_bytes == 0 && slice.wire_bytes() == 0 && slice.communications() == 0);
// shard(a) -> shard(b) = all_to_all
constexpr auto a2a = plan_reshard(by_model_0, by_model_1, m, s);
static_assert(a2a.ok && a2a.size() == 1);
static_assert(a2a[0] == reshard_step{collective::all_to_all, model, 0, 1, 3200, 2400});
// nothing to do
static_assert(plan_reshard(by_model_1, by_model_1, m, s).empty());

// Two axes: ("data", "model") on dim 0 to replicated gathers the minor axis first.
constexpr layout_value both_0 = [] {
  layout_value l = rep;
  l.dims[0].push(data);
  l.dims[0].push(model);
  return l;
}();
constexpr auto two = plan_reshard(both_0, rep, m, s);
static_assert(two.ok && two.size() == 2);
static_assert(two[0].kind == collective::all_gather && two[0].axis == model);
static_assert(two[1].kind == collective::all_gather && two[1].axis == data);
static_assert(two[0].bytes == 2 * 200 * 4 && two[1].bytes == 8 * 200 * 4);
// Slices come before reductions, so the all_reduce moves the smaller buffer.
constexpr layout_value partial_data = [] {
  layout_value l = rep;
  l.partial = 1u << data;
  return l;
}();
constexpr auto sliced_first = plan_reshard(partial_data, by_model_1, m, s);
static_assert(sliced_first.size() == 2 && sliced_first[0].kind == collective::slice);
static_assert(sliced_first[1].kind == collective::all_reduce && sliced_first[1].bytes == 3200);
// A value never becomes partial by resharding.
static_assert(!plan_reshard(rep, partial_model, m, s).ok);
// An axis of size 1 moves nothing: no step.
using mesh_8x1 = device_mesh<axis<"data", 8>, axis<"model", 1>>;
static_assert(plan_reshard(by_model_1, rep, mesh_8x1::value, s).empty());
// Unknown sizes give unknown bytes, not wrong ones.
static_assert(plan_reshard(by_model_1, rep, m, shape_value{dynamic_extent, 200})[0].bytes ==
              unknown_bytes);

// Backward transposes: all_gather <-> reduce_scatter, slice <-> all_gather, all_to_all reversed,
// all_reduce of a partial <-> identity.
static_assert(transpose(gather[0]).kind == collective::reduce_scatter);
static_assert(transpose(scatter[0]).kind == collective::all_gather);
static_assert(transpose(slice[0]).kind == collective::all_gather);
static_assert(transpose(a2a[0]).dim == 1 && transpose(a2a[0]).to_dim == 0);
static_assert(!has_transpose(reduce[0]) && has_transpose(gather[0]));
// ...and the planner agrees with them on the cotangents: the gradient of an all_gather output,
// partial over the gathered axis, is reduce_scattered back to the shard.
constexpr auto back_gather = plan_reshard_backward(by_model_1, partial_model, m, s);
static_assert(back_gather.size() == 1 && back_gather[0].kind == transpose(gather[0]).kind);
constexpr auto back_slice = plan_reshard_backward(rep, by_model_0, m, s);
static_assert(back_slice.size() == 1 && back_slice[0].kind == transpose(slice[0]).kind);
constexpr auto back_a2a = plan_reshard_backward(by_model_0, by_model_1, m, s);
static_assert(back_a2a.size() == 1 && back_a2a[0].dim == 1 && back_a2a[0].to_dim == 0);
static_assert(plan_reshard_backward(partial_model, rep, m, s).empty());  // identity
}  // namespace
