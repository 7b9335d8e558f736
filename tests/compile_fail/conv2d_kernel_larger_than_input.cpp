// expect: layer_cannot_take_input<tessel::name_string\{"c2(\\000)*"\}, 3, tessel::key_string\{"conv2d: the kernel is larger than its valid-padded input(\\000)*"\}>
// A 6x6 kernel with "valid" padding on a (4, 4, 8) input: no window fits.
// Expected diagnostic: tessel::diagnostic::layer_cannot_take_input<"c2", 3, requirement>.
#include <tessel/layers.hpp>
#include <tessel/trainer/sequential.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<input<8, 8, 1>, conv2d<8, 3, {.strides = 2, .padding = "same"}>,
                                   conv2d<8, 6, {.name = "c2"}>>;
// fix: ..., conv2d<8, 6, {.padding = "same", .name = "c2"}>>;

int main() { return static_cast<int>(model_t::layer_count); }
