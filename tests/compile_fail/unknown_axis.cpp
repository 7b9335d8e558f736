// expect: axis_not_in_mesh<tessel::name_string\{"modle(\\000)*"\}, tessel::device_mesh<
// A tensor_layout names an axis ("modle", a typo for "model") that the data x model mesh lacks.
// Expected diagnostic: tessel::diagnostic::axis_not_in_mesh<"modle", Mesh>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Layout = tessel::tensor_layout<Mesh, tessel::none, "modle">;
// fix: using Layout = tessel::tensor_layout<Mesh, tessel::none, "model">;

constexpr auto layout = Layout::value;  // instantiates the layout and its checks

int main() {}
