// expect: layer_needs_flat_input<tessel::name_string\{"d1(\\000)*"\}, 3>
// A dense layer directly on (28, 28, 1) images: tessel's dense takes samples of rank 1.
// Expected diagnostic: tessel::diagnostic::layer_needs_flat_input<"d1", 3>.
#include <tessel/trainer/sequential.hpp>
#include <tessel/layers.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<input<28, 28, 1>, dense<200, {.name = "d1"}>, dense<10>>;
// fix: using model_t = tessel::sequential<input<28, 28, 1>, flatten<>, dense<200, ...>, ...>;

int main() { return static_cast<int>(model_t::layer_count); }
