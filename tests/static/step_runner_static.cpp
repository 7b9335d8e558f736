// Who runs each planned step (step_runner), as the planner tags it: under data_parallel the
// trainer's buckets reduce the gradients and the trainer the loss sums; a split state's
// all-gathers and central storage's broadcasts run after the update; under model_parallel the
// layers run their planned steps, and with a split state its all-gathers run after the update; a
// distribution of one's own that reshards an output under data parallelism leaves that step to
// nothing (the trainer refuses the plan).
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>
#include <tessel/losses/plan.hpp>

#include "../support/output_rules.hpp"

namespace {
using namespace tessel;
using mesh2 = device_mesh<axis<"batch", 2>>;
constexpr model_desc mlp = describe_model(
    shape_value{8}, std::array{dense_op<{.units = 16}>("d1"), dense_op<{.units = 4}>("d2")},
    &loss_rules::elementwise);

template <class Dist>
constexpr const model_plan& plan = model_plan_v<Dist, mlp, 16>;

// Each step's runner: `want(step)` says which it must be.
template <class Want>
constexpr bool every_step(const model_plan& p, Want want) {
  if (!p.ok || p.count == 0) return false;
  for (const planned_step& s : p)
    if (s.runner != want(s)) return false;
  return true;
}

static_assert(every_step(plan<data_parallel<mesh2>>, [](const planned_step& s) {
  return s.role == step_role::loss ? step_runner::loss_reduction : step_runner::gradient_buckets;
}));
static_assert(every_step(plan<data_parallel<mesh2, shard_state::gradients>>,
                         [](const planned_step& s) {
                           if (s.role == step_role::loss) return step_runner::loss_reduction;
                           return s.step.kind == collective::all_gather
                                      ? step_runner::after_update
                                      : step_runner::gradient_buckets;
                         }));

// Central storage: reduced to process 1, broadcast from it after the update.
struct central {
  using mesh = mesh2;
  static constexpr name_string batch_dim_name{"batch"};
  static constexpr distribution_value value = [] {
    distribution_value v = data_parallel<mesh2>::value;
    v.variable_device = 1;
    return v;
  }();
};
static_assert(every_step(plan<central>, [](const planned_step& s) {
  if (s.role == step_role::loss) return step_runner::loss_reduction;
  return s.step.kind == collective::broadcast ? step_runner::after_update
                                              : step_runner::gradient_buckets;
}));

// model_parallel: the layers run their steps (gradients included), the trainer the loss.
using mesh_2x2 = device_mesh<axis<"data", 2>, axis<"model", 2>>;
using megatron =
    model_parallel<layout_map<mesh_2x2, rule<"d1/kernel", none, "model">, rule<"d1/bias", "model">,
                              rule<"d2/kernel", "model", none>>,
                   "data">;
static_assert(every_step(plan<megatron>, [](const planned_step& s) {
  return s.role == step_role::loss ? step_runner::loss_reduction : step_runner::layer;
}));

// model_parallel with its state split over "data": the gradients partial over "data" are
// reduce-scattered there (each padded to a multiple of 2), and the parts all-gathered after the
// update, one all-gather per reduce-scatter with half its bytes.
template <shard_state Shard>
using megatron_split = model_parallel<typename megatron::layout_map, "data", Shard>;
constexpr bool split_over_data = [] {
  const model_plan& p = plan<megatron_split<shard_state::gradients>>;
  std::size_t scattered = 0, gathered = 0, scattered_bytes = 0, gathered_bytes = 0;
  for (const planned_step& s : p) {
    if (s.role == step_role::loss) {
      if (s.runner != step_runner::loss_reduction) return false;
    } else if (s.step.kind == collective::all_gather && s.role == step_role::variable &&
               s.when == phase::backward) {
      if (s.runner != step_runner::after_update || s.step.axis != 0) return false;
      ++gathered, gathered_bytes += s.step.bytes;
    } else {
      if (s.runner != step_runner::layer) return false;
      if (s.step.kind == collective::reduce_scatter) {
        if (s.role != step_role::variable_gradient || s.step.axis != 0) return false;
        ++scattered, scattered_bytes += s.step.bytes;
      }
    }
  }
  // d1/kernel's shard 8x8, d1/bias 8, d2/kernel 8x4, d2/bias 4 (replicated): 4 reduce-scatters.
  return p.ok && scattered == 4 && gathered == 4 && scattered_bytes == (64 + 8 + 32 + 4) * 4 &&
         gathered_bytes * 2 == scattered_bytes;
}();
static_assert(split_over_data);
// ZeRO-1: the same gradients all-reduced, the same all-gathers after the update.
constexpr bool optimizer_split_over_data = [] {
  std::size_t reduced = 0, gathered = 0;
  for (const planned_step& s : plan<megatron_split<shard_state::optimizer>>) {
    if (s.step.kind == collective::reduce_scatter) return false;
    if (s.role == step_role::variable_gradient && s.step.kind == collective::all_reduce &&
        s.step.axis == 0)
      ++reduced;
    if (s.runner == step_runner::after_update) ++gathered;
  }
  return reduced == 4 && gathered == 4;
}();
static_assert(optimizer_split_over_data);

// Data parallel with output rules: d1's output moved by an all_to_all nothing runs.
using tessel::testing::output_rules;
constexpr bool nothing_runs_the_output = [] {
  bool output_unrun = false;
  for (const planned_step& s : plan<output_rules>) {
    if (s.op == 0 && s.when == phase::forward && s.role == step_role::output)
      output_unrun = s.step.kind == collective::all_to_all && s.runner == step_runner::none;
    if (s.role == step_role::loss && s.runner != step_runner::loss_reduction) return false;
  }
  return output_unrun;
}();
static_assert(nothing_runs_the_output);
}  // namespace
