// expect: layer_cannot_be_planned<tessel::name_string\{"sum(\\000)*"\}, tessel::key_string\{"reads a later layer; list the layers in topological order(\\000)*"\}>
// A graph model's layer "sum" reads node 3, the output of the layer listed after it: the planner
// walks the graph in the order given, so each layer may read only the model's input (node 0) or
// a layer before it.
// Expected diagnostic: tessel::diagnostic::layer_cannot_be_planned<"sum", reason>.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>>;
using Dist = tessel::data_parallel<Mesh>;
constexpr tessel::model_desc residual = tessel::describe_model(
    tessel::shape_value{64},
    std::array{tessel::dense_op<{.units = 64, .activation = tessel::activation_kind::relu}>("d1"),
               tessel::reads(tessel::add_op("sum"), {1, 3}),
               // fix: tessel::reads(tessel::add_op("sum"), {1, 0}),
               tessel::dense_op<{.units = 64}>("d2")});

constexpr const tessel::model_plan& plan = tessel::model_plan_v<Dist, residual, 16>;

int main() {}
