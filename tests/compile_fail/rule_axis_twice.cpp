// expect: layout_map_rule_uses_axis_twice<tessel::key_string\{"d1/kernel(\\000)*"\}, tessel::name_string\{"model(\\000)*"\}>
// A layout_map rule may use each mesh axis for one dimension only.
#include <tessel/core.hpp>

using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using map = tessel::layout_map<mesh, tessel::rule<"d1/kernel", "model", "model">>;
constexpr auto rules = map::rules;
// fix: using map = tessel::layout_map<mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;
