// expect: dimension_not_divisible<1, 30, tessel::name_string\{"model(\\000)*"\}, 4>
// Dimension 1 (size 30) of a (784, 30) tensor is sharded over "model" (size 4), and 4 does not
// divide 30.
// Expected diagnostic: tessel::diagnostic::dimension_not_divisible<1, 30, "model", 4>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Layout = tessel::tensor_layout<Mesh, tessel::none, "model">;
using Shape = tessel::shape<784, 30>;
// fix: using Shape = tessel::shape<784, 32>;

constexpr auto local = tessel::local_shape_v<Layout, Shape>;

int main() {}
