// expect: device_mesh_needs_at_least_one_axis<0>
// A device_mesh with no axes.
// Expected diagnostic: tessel::diagnostic::device_mesh_needs_at_least_one_axis.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<>;
// fix: using Mesh = tessel::device_mesh<tessel::axis<"data", 8>>;

constexpr auto rank = Mesh::rank;

int main() {}
