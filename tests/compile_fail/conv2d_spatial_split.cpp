// expect: layer_cannot_be_planned<tessel::name_string\{"c1(\\000)*"\}, tessel::key_string\{"conv2d: the kernel is split over its height or width(\\000)*"\}>
// The layout_map splits conv2d "c1"'s kernel (4, 4, 1, 8) over its height: a window needs its
// whole kernel. Split the output channels (the last dimension) or replicate it.
// Expected diagnostic: tessel::diagnostic::layer_cannot_be_planned<"c1", reason>.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"batch", 2>, tessel::axis<"model", 2>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"c1/kernel", "model", tessel::none, tessel::none,
                                                  tessel::none>>;
// fix: using Map = tessel::layout_map<Mesh>;
using Dist = tessel::model_parallel<Map, "batch">;
constexpr tessel::model_desc cnn = tessel::describe_model(
    tessel::shape_value{28, 28, 1},
    std::array{tessel::conv2d_op<{.filters = 8, .window = {.kh = 4, .kw = 4}}>("c1"),
               tessel::global_average_pooling2d_op("gap")});

constexpr const tessel::model_plan& plan = tessel::model_plan_v<Dist, cnn, 16>;

int main() {}
