// expect: parameter_device_not_in_mesh<3, tessel::device_mesh<tessel::axis<tessel::fixed_string<6>\{"batch"\}, 2> > >
// central_storage_strategy names parameter device 3 on a batch axis of 2 processes (coordinates
// 0 and 1): the variables would live on a process the mesh does not have.
// Expected diagnostic: tessel::diagnostic::parameter_device_not_in_mesh<3, Mesh>.
#include <tessel/strategy/strategy.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"batch", 2>>;
using Strategy = tessel::central_storage_strategy<Mesh, 3>;
// fix: using Strategy = tessel::central_storage_strategy<Mesh, 1>;

constexpr auto value = Strategy::value;

int main() {}
