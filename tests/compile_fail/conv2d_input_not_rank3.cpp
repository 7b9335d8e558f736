// expect: layer_cannot_take_input<tessel::name_string\{"c1(\\000)*"\}, 1, tessel::key_string\{"conv2d takes \(height, width, channels\) samples(\\000)*"\}>
// A conv2d on flat samples (784,): a convolution takes (height, width, channels) samples.
// Expected diagnostic: tessel::diagnostic::layer_cannot_take_input<"c1", 1, requirement>.
#include <tessel/layers.hpp>
#include <tessel/trainer/sequential.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<input<784>, conv2d<8, 3, {.name = "c1"}>>;
// fix: using model_t = tessel::sequential<input<28, 28, 1>, conv2d<8, 3, {.name = "c1"}>>;

int main() { return static_cast<int>(model_t::layer_count); }
