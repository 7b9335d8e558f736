// expect: auto_layout_cannot_plan_the_model<tessel::key_string\{"the global batch does not divide by the batch axis(\\000)*"\}>
// auto_layout counts a step's bytes for its global_batch; a batch of 15 does not divide over the
// "data" axis of 2, so no layout can be planned, and the error says why. A batch of 16 plans.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using mesh_2x2 = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 2>>;
constexpr tessel::model_desc pair = tessel::describe_model(
    tessel::shape_value{64},
    std::array{tessel::dense_op<{.units = 256, .activation = tessel::activation_kind::relu}>("col"),
               tessel::dense_op<{.units = 64}>("row")});
using dist = tessel::model_parallel<tessel::auto_layout<mesh_2x2, {.global_batch = 15}>, "data">;
// fix: using dist = tessel::model_parallel<tessel::auto_layout<mesh_2x2, {.global_batch = 16}>, "data">;

static_assert(tessel::layout_search_v<dist, pair>.ok);

int main() {}
