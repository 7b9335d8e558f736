// expect: batch_axis_not_in_mesh<tessel::fixed_string<6>\{"batch"\}, tessel::device_mesh<
// model_parallel is told to split the batch over "batch", but the mesh's axes are data and model.
// Expected diagnostic: tessel::diagnostic::batch_axis_not_in_mesh<"batch", Mesh>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;
using Dist = tessel::model_parallel<Map, "batch">;
// fix: using Dist = tessel::model_parallel<Map, "data">;

constexpr auto dist = Dist::value;  // instantiates the distribution and its checks

int main() {}
