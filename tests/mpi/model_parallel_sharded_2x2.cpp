// model_parallel_sharded_test on the 2x2 mesh (4 processes), in a translation unit of its own.
#include "model_parallel_sharded_cases.hpp"

namespace tessel::testing::model_parallel_sharded {
void run_2x2(const testing::data_set& d) { run<2>(d); }
}  // namespace tessel::testing::model_parallel_sharded
