// expect: duplicate_layout_map_key<tessel::key_string\{"d1/kernel(\\000)*"\}>
// The key "d1/kernel" is given twice in one layout_map.
// Expected diagnostic: tessel::diagnostic::duplicate_layout_map_key<"d1/kernel">.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Kernel = tessel::rule<"d1/kernel", tessel::none, "model">;
using Again = tessel::rule<"d1/kernel", "model", tessel::none>;
// fix: using Again = tessel::rule<"d2/kernel", "model", tessel::none>;
using Map = tessel::layout_map<Mesh, Kernel, Again>;

constexpr auto rules = Map::size;

int main() {}
