// expect: multi_gpu_model_needs_at_least_2_gpus<1>
// multi_gpu_model<1>: one replica is the model itself (Keras 2 refuses gpus=1 as well).
// Expected diagnostic: tessel::diagnostic::multi_gpu_model_needs_at_least_2_gpus<1>.
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using Model = tessel::sequential<input<4>, dense<2>>;
// fix: using Parallel = tessel::multi_gpu_model_t<Model, 2>;
using Parallel = tessel::multi_gpu_model_t<Model, 1>;

int main() { return sizeof(Parallel*) == 0; }
