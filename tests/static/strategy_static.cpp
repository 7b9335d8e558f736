// The tf.distribute strategies are distributions (strategy/strategy.hpp): a type with a mesh, its
// batch axis's name and a distribution value is one, whatever its name (core/distribution.hpp's
// concept); the mirrored strategies lay out variables and batches as data_parallel<> does, the
// one-device ones as one_device (their model lives whole on each process).
#include <tessel/tessel.hpp>

namespace {
using namespace tessel;

using mirrored = mirrored_strategy<>;
using workers = multi_worker_mirrored_strategy<>;
static_assert(detail::is_distribution<mirrored> && detail::is_distribution<workers> &&
              detail::is_distribution<one_device_strategy> &&
              detail::is_distribution<default_strategy>);
static_assert(!detail::is_local_distribution<mirrored> && !detail::is_local_distribution<workers>);
static_assert(detail::is_local_distribution<one_device_strategy> &&
              detail::is_local_distribution<default_strategy> &&
              detail::is_local_distribution<one_device>);
static_assert(!detail::is_local_distribution<data_parallel<>>);
// Neither a layer nor a mesh is a distribution (sequential<...> tells its first argument so).
static_assert(!detail::is_distribution<layers::input<784>>);
static_assert(!detail::is_distribution<device_mesh<axis<"batch">>>);
static_assert(!detail::is_distribution<strategy>);

static_assert(std::is_same_v<mirrored::mesh, data_parallel<>::mesh>);
static_assert(mirrored::batch_dim_name == fixed_string("batch"));
static_assert(std::is_same_v<variable_layout_t<mirrored, "d1/kernel", shape<784, 200>>,
                             variable_layout_t<data_parallel<>, "d1/kernel", shape<784, 200>>>);
static_assert(std::is_same_v<batch_layout_t<workers, shape<dynamic_extent, 784>>,
                             tensor_layout<data_parallel<>::mesh, "batch", none>>);
static_assert(std::is_same_v<one_device_strategy::mesh, one_device::mesh>);

// The split of a global batch over the replicas: B / R rows each, one more for the first B % R
// (split_batch_rows, which the trainer and experimental_distribute_dataset share).
static_assert(split_batch_rows(10, 4, 0).first == 0 && split_batch_rows(10, 4, 0).count == 3);
static_assert(split_batch_rows(10, 4, 1).first == 3 && split_batch_rows(10, 4, 1).count == 3);
static_assert(split_batch_rows(10, 4, 2).first == 6 && split_batch_rows(10, 4, 2).count == 2);
static_assert(split_batch_rows(10, 4, 3).first == 8 && split_batch_rows(10, 4, 3).count == 2);
static_assert(split_batch_rows(10, 4, 3).largest == 3 && split_batch_rows(8, 4, 1).largest == 2);
static_assert(split_batch_rows(2, 4, 3).count == 0);
}  // namespace
