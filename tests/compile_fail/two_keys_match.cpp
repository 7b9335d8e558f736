// expect: path_matches_two_layout_map_keys<tessel::fixed_string<13>\{"dense_2/bias"\}, tessel::key_string\{"\.\*dense\.\*bias(\\000)*"\}, tessel::key_string\{"\.\*bias(\\000)*"\}>
// The path "dense_2/bias" matches two layout_map keys, ".*dense.*bias" and ".*bias".
// Expected diagnostic: tessel::diagnostic::path_matches_two_layout_map_keys<path, key, key>.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Map = tessel::layout_map<Mesh,                                    //
                               tessel::rule<".*dense.*bias", "model">,  //
                               tessel::rule<".*bias", tessel::none>>;
using Bias = tessel::lookup_t<Map, "dense_2/bias">;
// fix: using Bias = tessel::lookup_t<Map, "conv_2/bias">;

int main() {}
