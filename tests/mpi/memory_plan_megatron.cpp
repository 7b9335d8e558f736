// memory_plan_test's Megatron pairs under model_parallel on 2x1 (2 processes) and 2x2 (4), alone
// and followed by four layers in buckets of one gradient each (memory_plan_test.cpp says what is
// checked).
#include "memory_plan_measure.hpp"

namespace tessel::testing::memory_plan_cases {
namespace {
// The Megatron pair under model_parallel on 2x1 and 2x2 meshes ("data" 2, "model" 1 or 2), its
// shards' state split over "data" or not.
template <std::size_t Model>
struct megatron_on {
  using map = layout_map<device_mesh<axis<"data", 2>, axis<"model", Model>>,
                         rule<"col/kernel", none, "model">, rule<"col/bias", "model">,
                         rule<"row/kernel", "model", none>>;
  template <shard_state S>
  using model =
      sequential<model_parallel<map, "data", S>, input<1024>,
                 dense<4096, {.activation = "relu", .name = "col"}>,
                 dense<1024, {.activation = "relu", .name = "row"}>, dense<10, {.name = "head"}>>;
  // The pair, then four replicated layers of 2048 (trained in buckets of one gradient each, whose
  // reduce-scattered gradients then take turns in a window).
  template <shard_state S>
  using deep = sequential<model_parallel<map, "data", S>, input<1024>,
                          dense<4096, {.activation = "relu", .name = "col"}>,
                          dense<1024, {.activation = "relu", .name = "row"}>,
                          dense<2048, {.activation = "relu"}>, dense<2048, {.activation = "relu"}>,
                          dense<2048, {.activation = "relu"}>, dense<2048, {.activation = "relu"}>,
                          dense<10, {.name = "head"}>>;
};
}  // namespace

void megatron_cases() {
  if (num_processes() == 2) {
    each<megatron_on<1>::model>("Megatron pair on 2x1", {64, 1024}, 0.01);
    each<megatron_on<1>::deep>("Megatron pair and four layers on 2x1, one gradient per bucket",
                               {64, 1024}, 0.01, 1e-6);
  }
  if (num_processes() == 4) {
    each<megatron_on<2>::model>("Megatron pair on 2x2", {64, 1024}, 0.01);
    each<megatron_on<2>::deep>("Megatron pair and four layers on 2x2, one gradient per bucket",
                               {64, 1024}, 0.01, 1e-6);
  }
}

}  // namespace tessel::testing::memory_plan_cases
