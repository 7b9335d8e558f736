// expect: layout_map_rule_names_unknown_axis<tessel::key_string\{"d1/kernel(\\000)*"\}, tessel::name_string\{"modle(\\000)*"\}>
// A layout_map rule for "d1/kernel" names "modle", which is not an axis of the mesh.
// Expected diagnostic:
//   tessel::diagnostic::layout_map_rule_names_unknown_axis<"d1/kernel", "modle">.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"d1/kernel", tessel::none, "modle">>;
// fix: using Map = tessel::layout_map<Mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;

constexpr auto rules = Map::size;  // instantiates the map and its checks

int main() {}
