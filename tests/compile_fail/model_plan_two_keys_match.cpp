// expect: path_matches_two_layout_map_keys<tessel::key_string\{"d1/bias(\\000)*"\}, tessel::key_string\{"d\.\*/bias(\\000)*"\}, tessel::key_string\{"\.\*1/bias(\\000)*"\}>
// Planning the model looks up the variable path "d1/bias", which matches two layout_map keys,
// "d.*/bias" and ".*1/bias".
// Expected diagnostic: tessel::diagnostic::path_matches_two_layout_map_keys<path, key, key>.
#include <array>

#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using AnyBias = tessel::rule<"d.*/bias", "model">;
// fix: using AnyBias = tessel::rule<"d1/bias", "model">;  // an exact key wins over patterns
using FirstBias = tessel::rule<".*1/bias", "model">;
using Map = tessel::layout_map<Mesh, AnyBias, FirstBias>;
using Dist = tessel::model_parallel<Map>;
constexpr tessel::model_desc mlp = tessel::describe_model(
    tessel::shape_value{784},
    std::array{tessel::dense_op<{.units = 32, .activation = tessel::activation_kind::relu}>("d1"), tessel::dense_op<{.units = 10}>("d2")});

constexpr const tessel::model_plan& plan = tessel::model_plan_v<Dist, mlp, 16>;

int main() {}
