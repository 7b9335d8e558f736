// expect: data_parallel_needs_a_1d_mesh<tessel::device_mesh<tessel::axis<tessel::fixed_string<5>\{"data"\}, 2>, tessel::axis<tessel::fixed_string<6>\{"model"\}, 4> > >
// data_parallel is given a 2-D (data x model) mesh; it needs a mesh with exactly one axis.
// Expected diagnostic: tessel::diagnostic::data_parallel_needs_a_1d_mesh<Mesh>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Dist = tessel::data_parallel<Mesh>;
// fix: using Dist = tessel::data_parallel<tessel::device_mesh<tessel::axis<"data", 8>>>;

constexpr auto dist = Dist::value;

int main() {}
