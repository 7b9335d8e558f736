// expect: no_layout_fits_device_memory<50000000, 64336064>
// auto_layout under a budget no choice of layouts fits: two 2048-wide layers at a global batch of
// 4096 on a 2x4 mesh need 68.7 MB per device at the least (77.4 MB with the fewest bytes moved),
// and 64.3 MB with the state split over "data" as well; the error names the budget and that
// smallest peak. A budget of 80 MB fits.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using mesh_2x4 = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
constexpr tessel::model_desc wide = tessel::describe_model(
    tessel::shape_value{64},
    std::array{tessel::dense_op<{.units = 2048, .activation = tessel::activation_kind::relu}>("a"),
               tessel::dense_op<{.units = 2048, .activation = tessel::activation_kind::relu}>("b"),
               tessel::dense_op<{.units = 16}>("c")});
using dist = tessel::model_parallel<
    tessel::auto_layout<mesh_2x4, {.global_batch = 4096, .memory_budget = 50'000'000}>, "data">;
// fix: using dist = tessel::model_parallel<tessel::auto_layout<mesh_2x4, {.global_batch = 4096, .memory_budget = 80'000'000}>, "data">;

static_assert(tessel::layout_search_v<dist, wide>.ok);

int main() {}
