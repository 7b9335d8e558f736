// expect: layer_cannot_be_planned<tessel::name_string\{"head(\\000)*"\}, tessel::key_string\{"its output rows are gathered, not split over the batch axis. Th(\\000)*"\}>
// The layout_map splits dense "h"'s kernel over "batch", the mesh axis the batch is split over:
// the input's rows are gathered for it, and the model's output rows stay whole on every device,
// where the targets and the loss expect them split over "batch" as the input's.
// Expected diagnostic: tessel::diagnostic::layer_cannot_be_planned<"head", reason>.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"batch", 2>, tessel::axis<"model", 2>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"h/kernel", tessel::none, "batch">>;
// fix: using Map = tessel::layout_map<Mesh, tessel::rule<"h/kernel", tessel::none, "batch">,
//                                     tessel::rule<"head/output", "batch", tessel::none>>;
using Dist = tessel::model_parallel<Map, "batch">;
constexpr tessel::model_desc mlp = tessel::describe_model(
    tessel::shape_value{32},
    std::array{tessel::dense_op<{.units = 16}>("h"), tessel::dense_op<{.units = 4}>("head")});

constexpr const tessel::model_plan& plan = tessel::model_plan_v<Dist, mlp, 16>;

int main() {}
