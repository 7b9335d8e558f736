// expect: model_has_more_layers_than_max_ops<33, 32>
// 33 layers where the planner's arrays hold TESSEL_MAX_OPS = 32 (the default).
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<input<8>, dense<4>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>, relu<>>;
// fix: define TESSEL_MAX_OPS 64 (before any tessel header, in every translation unit).

int main() { return static_cast<int>(model_t::layer_count); }
