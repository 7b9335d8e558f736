// expect: model_exceeds_device_memory<tessel::key_string\{"optimizer state(\\000)*"\}, 403079248, 820848800, 700000000>
// The 4096-wide MLP with Adam on 2 processes needs 820.8 MB per device; a budget of 700 MB fails,
// naming the plan's largest part (Adam's slots, 403 MB). Splitting the optimizer state over the
// processes (shard_state::optimizer) fits.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using mesh2 = tessel::device_mesh<tessel::axis<"batch", 2>>;
constexpr tessel::model_desc wide = tessel::describe_model(
    tessel::shape_value{4096},
    std::array{tessel::dense_op<{.units = 4096, .activation = tessel::activation_kind::relu}>("d1"),
               tessel::dense_op<{.units = 4096, .activation = tessel::activation_kind::relu}>("d2"),
               tessel::dense_op<{.units = 4096, .activation = tessel::activation_kind::relu}>("d3"),
               tessel::dense_op<{.units = 10}>("d4")});

static_assert(tessel::fits_in_memory<tessel::data_parallel<mesh2>, wide, 256, 2, 700'000'000>);
// fix: static_assert(tessel::fits_in_memory<tessel::data_parallel<mesh2, tessel::shard_state::optimizer>, wide, 256, 2, 700'000'000>);

int main() {}
