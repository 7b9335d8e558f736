// model_parallel_sharded_test on the 2x4 mesh (8 processes), in a translation unit of its own.
#include "model_parallel_sharded_cases.hpp"

namespace tessel::testing::model_parallel_sharded {
void run_2x4(const testing::data_set& d) { run<4>(d); }
}  // namespace tessel::testing::model_parallel_sharded
