// expect: layer_cannot_be_planned<tessel::name_string\{"d1(\\000)*"\}, tessel::key_string\{"a dimension does not divide by the size of its mesh axes(\\000)*"\}>
// The static plan of a model fails at layer "d1": the layout_map shards d1's kernel, of shape
// (784, 30), over "model" (size 4) along its 30 columns.
// Expected diagnostic: tessel::diagnostic::layer_cannot_be_planned<"d1", reason>.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;
using Dist = tessel::model_parallel<Map>;
constexpr tessel::model_desc mlp = tessel::describe_model(
    tessel::shape_value{784},
    std::array{tessel::dense_op<{.units = 30, .activation = tessel::activation_kind::relu}>("d1"), tessel::dense_op<{.units = 10}>("d2")});
// fix:     std::array{tessel::dense_op<{.units = 32, .activation = tessel::activation_kind::relu}>("d1"), tessel::dense_op<{.units = 10}>("d2")});

constexpr const tessel::model_plan& plan = tessel::model_plan_v<Dist, mlp, 16>;

int main() {}
