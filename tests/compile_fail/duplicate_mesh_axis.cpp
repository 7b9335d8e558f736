// expect: duplicate_mesh_axis<tessel::name_string\{"data(\\000)*"\}>
// A device_mesh has two axes called "data".
// Expected diagnostic: tessel::diagnostic::duplicate_mesh_axis<"data">.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"data", 4>>;
// fix: using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;

constexpr auto rank = Mesh::rank;  // instantiates the mesh and its checks

int main() {}
