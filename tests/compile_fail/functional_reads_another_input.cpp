// expect: layer_reads_an_input_that_is_not_the_models<tessel::name_string\{"side(\\000)*"\}>
// A layer of the graph reads input<8>, but the model's input is input<4>: every path must start
// at the model's input (a second input is not supported yet).
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using x = input<4>;
using other = input<8>;
using y = dense<2>::on<add<>::on<dense<4, {.name = "side"}>::on<other>, dense<4>::on<x>>>;
using model_t = tessel::functional<x, y>;
// fix: read x, or give functional the input the graph starts from.

int main() { return static_cast<int>(model_t::layer_count); }
