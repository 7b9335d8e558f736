// The memory plan (core/memory_plan.hpp) against the host backend's high-water mark
// (get_memory_info), on 1, 2 and 4 processes: the seeds' models (seeds/000: flatten, dense 200
// without bias, dense 10 softmax; seeds/001: dense 256, dense 256, dense 10), six layers of 512
// in buckets of one gradient each (where shard_state::gradients frees each bucket once it is
// reduced) and, on 1 and 2 processes, the 4096-wide MLP of the benchmarks, and the Megatron pair
// under model_parallel on 2x1 (2 processes) and 2x2 (4), alone and followed by four layers in
// buckets of one gradient each, each trained with Adam under
// shard_state none, optimizer, gradients and weights. The peak measured from before the model is
// built to the end of its second step (the first makes the optimizer's slots, the second runs as
// every later one; under weights, from the end of compile: building holds the whole initial
// weights once) is within 1% of the plan's; the plan's parts match what the model keeps (its
// weights, its optimizer's slots). The models in buckets of one gradient each are
// measured again under gradients and weights without overlap (gradient_options::overlap false),
// whose windows hold one layer, not two.
#include <cstdio>

#include "memory_plan_measure.hpp"

namespace {
using namespace tessel::testing::memory_plan_cases;
using mesh = device_mesh<axis<"batch">>;

template <shard_state S>
using seed000 = sequential<data_parallel<mesh, S>, input<28, 28, 1>, flatten<>,
                           dense<200, {.activation = "relu", .use_bias = false}>,
                           dense<10, {.activation = "softmax"}>>;
template <shard_state S>
using seed001 = sequential<data_parallel<mesh, S>, input<784>, dense<256, {.activation = "relu"}>,
                           dense<256, {.activation = "relu"}>, dense<10>>;
template <shard_state S>
using wide =
    sequential<data_parallel<mesh, S>, input<4096>, dense<4096, {.activation = "relu"}>,
               dense<4096, {.activation = "relu"}>, dense<4096, {.activation = "relu"}>, dense<10>>;

// Six layers of 512, trained in buckets of one gradient each: under shard_state::gradients each
// bucket's buffer lives while it is reduced.
template <shard_state S>
using deep =
    sequential<data_parallel<mesh, S>, input<256>, dense<512, {.activation = "relu"}>,
               dense<512, {.activation = "relu"}>, dense<512, {.activation = "relu"}>,
               dense<512, {.activation = "relu"}>, dense<512, {.activation = "relu"}>, dense<10>>;

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    // The plan counts every buffer, so the test holds it to 1%.
    each<seed000>("seeds/000", {64, 28, 28, 1}, 0.01);
    each<seed001>("seeds/001", {64, 784}, 0.01);
    each<deep>("six layers of 512, one gradient per bucket", {64, 256}, 0.01, 1e-6);
    // The 4096-wide MLP takes 0.8 GB per process: measured on 1 and 2 processes, which keeps
    // the 4-process run within a small CI machine's memory (docs/memory.md gives its figures on 4).
    if (num_processes() <= 2)
      each<wide>("4096-wide MLP", {256, 4096}, 0.01);
    else if (process_id() == 0)
      std::printf("4096-wide MLP: measured on 1 and 2 processes only (0.8 GB per process)\n");
    megatron_cases();
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return testing::finish("memory_plan_test");
}
