// Model parallelism with each process's state split over the batch axis (model_parallel<Map,
// "data", shard_state::optimizer>, gradients and weights): the Megatron pair on 2x1, 2x2
// and 2x4 meshes (2, 4 and 8 processes):
//   - each equals one device (compare_models.hpp: 20 steps with adam, sgd and rmsprop, losses,
//     accuracy, weights, predictions and evaluate; a further step's collectives are the plan's,
//     its reduce_scatters and all_gathers over "data" with their bytes), and so does the pair
//     followed by six replicated layers, whose reduce-scattered gradients take turns in a window
//     (of two layers, and with adam of one without overlap);
//   - each process keeps its part of its shards' optimizer state only (1/2 over "data");
//   - explain() prints the steps and the split;
//   - a checkpoint saved under one option restores under the other, under plain model_parallel
//     and under data_parallel, and a .weights.h5 into one device; each trains on as one device.
#include "model_parallel_sharded_cases.hpp"

using namespace tessel::testing::model_parallel_sharded;

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const testing::data_set d = testing::make_data(512, 12, 4);
    switch (num_processes()) {
      case 2:
        run<1>(d);
        break;
      case 4:
        run_2x2(d);
        break;
      case 8:
        run_2x4(d);
        break;
      default:
        check(false, "model_parallel_sharded_test runs on 2, 4 or 8 processes");
    }
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return testing::finish("model_parallel_sharded_test");
}
