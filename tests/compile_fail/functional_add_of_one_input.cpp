// expect: layer_called_on_wrong_number_of_inputs<tessel::name_string\{"sum(\\000)*"\}, 1>
// An add of one tensor: Keras's merge layers take a list of at least two inputs.
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using x = input<8>;
using y = dense<2>::on<add<"sum">::on<x>>;
using model_t = tessel::functional<x, y>;
// fix: add<"sum">::on<x, h> with a second tensor h of the same shape.

int main() { return static_cast<int>(model_t::layer_count); }
