// expect: merge_inputs_have_incompatible_shapes<tessel::name_string\{"join(\\000)*"\}, tessel::name_string\{"flatten(\\000)*"\}, tessel::name_string\{"input_layer(\\000)*"\}>
// Concatenating a flattened (12,) with the (4, 3) input it came from: the shapes must agree but
// for the last axis. The diagnostic names the concatenate layer and both inputs.
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using x = input<4, 3>;
using f = flatten<>::on<x>;
using y = dense<2>::on<concatenate<"join">::on<f, x>>;
using model_t = tessel::functional<x, y>;
// fix: flatten both inputs first.

int main() { return static_cast<int>(model_t::layer_count); }
