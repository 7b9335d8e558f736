// The tf.distribute strategies are distributions (strategy/strategy.hpp): a type with a mesh, its
// batch axis's name and a distribution value is one, whatever its name (core/distribution.hpp's
// concept); the mirrored strategies lay out variables and batches as data_parallel<> does, the
// one-device ones as one_device (their model lives whole on each process); the reductions to one
// process are planned when the program compiles.
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
// The reductions to one process, planned when the program compiles (a static mesh of 4): each
// gradient's all_reduce becomes a reduce to the root and a broadcast of the sum
// (reduction_to_one_device), or under central storage a reduce to the parameter device, and after
// every gradient one broadcast of each variable from it.
constexpr model_desc two_dense = describe_model(
    shape_value{12}, std::array{dense_op<{.units = 16}>("d1"), dense_op<{.units = 4}>("d2")},
    &loss_rules::elementwise);
using mesh4 = device_mesh<axis<"batch", 4>>;
constexpr phase bwd = phase::backward;
constexpr const model_plan& mirrored4 = model_plan_v<mirrored_strategy<mesh4>, two_dense, 16>;
constexpr const model_plan& to_one4 =
    model_plan_v<mirrored_strategy<mesh4, reduction_to_one_device>, two_dense, 16>;
constexpr const model_plan& central4 =
    model_plan_v<central_storage_strategy<mesh4, 2>, two_dense, 16>;
static_assert(mirrored4.collectives(bwd, collective::all_reduce) == 4 &&
              mirrored4.collectives(bwd, collective::reduce) == 0);
static_assert(to_one4.collectives(bwd, collective::all_reduce) == 0 &&
              to_one4.collectives(bwd, collective::reduce) == 4 &&
              to_one4.collectives(bwd, collective::broadcast) == 4);
static_assert(central4.collectives(bwd, collective::all_reduce) == 0 &&
              central4.collectives(bwd, collective::reduce) == 4 &&
              central4.collectives(bwd, collective::broadcast) == 4);
constexpr bool rooted_at(const model_plan& p, std::uint8_t root) {
  for (const auto& s : p)
    if ((s.step.kind == collective::reduce || s.step.kind == collective::broadcast) &&
        s.step.root != root)
      return false;
  return true;
}
static_assert(rooted_at(to_one4, 0) && rooted_at(central4, 2));
// Central storage broadcasts the variables (after the update), the reduction to one device the
// gradients (before it): the broadcasts' roles say which.
constexpr bool broadcasts_are(const model_plan& p, step_role role) {
  for (const auto& s : p)
    if (s.step.kind == collective::broadcast && s.role != role) return false;
  return true;
}
static_assert(broadcasts_are(central4, step_role::variable) &&
              broadcasts_are(to_one4, step_role::variable_gradient));
// The variables' broadcasts come last, after every gradient's reduce.
static_assert(central4.steps[central4.count - 4].step.kind == collective::broadcast &&
              central4.steps[central4.count - 5].step.kind == collective::reduce);
}  // namespace
