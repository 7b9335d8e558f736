// A distribution of one's own that tessel's runtime cannot execute: data parallel over a 1-D mesh
// of 2 processes, with "<layer>/output" rules that move d1's output between the processes (its
// columns split over the batch axis, an all_to_all) and split d2's rows again. The planner plans
// it, tags the all_to_all as run by nothing (step_runner::none), and the trainer refuses it.
#pragma once

#include <tessel/core.hpp>

namespace tessel::testing {
struct output_rules {
  using mesh = device_mesh<axis<"batch", 2>>;
  static constexpr name_string batch_dim_name{"batch"};
  static constexpr distribution_value value = [] {
    distribution_value v = data_parallel<mesh>::value;
    layout_value columns = layout_value::replicated(2);
    columns.dims[1].push(0);
    v.rules[0] = {key_string{"d1/output"}, columns};
    v.rules[1] = {key_string{"d2/output"}, layout_value::sharded(2, 0, 0)};
    v.rule_count = 2;
    return v;
  }();
};
}  // namespace tessel::testing
