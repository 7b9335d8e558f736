// expect: layer_called_on_wrong_number_of_inputs<tessel::name_string\{"head(\\000)*"\}, 2>
// A dense layer called on two tensors: it takes one (join them with add or concatenate first).
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using x = input<8>;
using a = dense<8, {.name = "a"}>::on<x>;
using y = dense<2, {.name = "head"}>::on<x, a>;
using model_t = tessel::functional<x, y>;
// fix: dense<2>::on<add<>::on<x, a>>.

int main() { return static_cast<int>(model_t::layer_count); }
