// expect: merge_inputs_have_incompatible_shapes<tessel::name_string\{"sum(\\000)*"\}, tessel::name_string\{"input_layer(\\000)*"\}, tessel::name_string\{"proj(\\000)*"\}>
// A residual join of the input (16 features) and a projection to 8: Keras raises "Inputs have
// incompatible shapes" when the model is built; tessel refuses it when it compiles, naming the
// add layer and the two layers whose outputs it joins.
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using x = input<16>;
using h = dense<8, {.name = "proj"}>::on<x>;
using y = dense<4>::on<add<"sum">::on<x, h>>;
using model_t = tessel::functional<x, y>;
// fix: project to 16 features (dense<16>), or concatenate instead of add.

int main() { return static_cast<int>(model_t::layer_count); }
