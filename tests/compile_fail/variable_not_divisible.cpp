// expect: dimension_not_divisible<1, 30, tessel::name_string\{"model(\\000)*"\}, 4>
// The layout_map shards dimension 1 of "d1/kernel" over "model" (size 4), but the variable's
// shape is (784, 30) and 4 does not divide 30.
// Expected diagnostic: tessel::diagnostic::dimension_not_divisible<1, 30, "model", 4>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;
using Dist = tessel::model_parallel<Map>;
using Kernel = tessel::variable_layout_t<Dist, "d1/kernel", tessel::shape<784, 30>>;
// fix: using Kernel = tessel::variable_layout_t<Dist, "d1/kernel", tessel::shape<784, 32>>;

int main() {}
