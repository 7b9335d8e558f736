// expect: unsupported_regex_in_layout_map_key<tessel::key_string\{"dense_\\\\d\{2\}/kernel(\\000)*"\}, 8>
// A layout_map key uses counted repetition ({2}), which tessel's regex subset does not support.
// Expected diagnostic: tessel::diagnostic::unsupported_regex_in_layout_map_key<key, 8>, where 8 is
// the offset of the '{' in the key.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh, tessel::rule<"dense_\\d{2}/kernel", tessel::none, "model">>;
// fix: using Map = tessel::layout_map<Mesh, tessel::rule<"dense_\\d\\d/kernel", tessel::none, "model">>;

constexpr auto rules = Map::size;

int main() {}
