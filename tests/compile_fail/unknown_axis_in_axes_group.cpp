// expect: axis_not_in_mesh<tessel::name_string\{"modle(\\000)*"\}, tessel::device_mesh<
// A dimension sharded over the axis group axes<"data", "modle">; "modle" is not a mesh axis.
// Expected diagnostic: tessel::diagnostic::axis_not_in_mesh<"modle", Mesh>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Layout = tessel::tensor_layout<Mesh, tessel::axes<"data", "modle">, tessel::none>;
// fix: using Layout = tessel::tensor_layout<Mesh, tessel::axes<"data", "model">, tessel::none>;

constexpr auto layout = Layout::value;

int main() {}
