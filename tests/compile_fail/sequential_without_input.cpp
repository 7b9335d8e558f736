// expect: sequential_needs_an_input
// A sequential model whose first entry is a layer, not input<...>: the sample shape is unknown.
// Expected diagnostic: tessel::diagnostic::sequential_needs_an_input.
#include <tessel/trainer/sequential.hpp>
#include <tessel/layers.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<dense<200>, dense<10>>;
// fix: using model_t = tessel::sequential<input<784>, dense<200>, dense<10>>;

int main() { return static_cast<int>(model_t::layer_count); }
