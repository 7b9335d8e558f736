// Meshes, layouts and shards: the seeds/000 examples and the rules the core checks.
#include <tessel/core.hpp>

namespace {
using namespace tessel;

// seeds/000: mesh = DeviceMesh(shape=(2, 4), axis_names=["data", "model"])
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
static_assert(mesh_2x4::rank == 2 && mesh_2x4::is_static);
static_assert(mesh_2x4::value.size() == 8);
static_assert(mesh_2x4::index_of<"data"> == 0 && mesh_2x4::index_of<"model"> == 1);
static_assert(mesh_2x4::index_of<"batch"> == -1);
// Devices are ordered row-major over the mesh, as in Keras and JAX.
static_assert(mesh_2x4{}.coordinates(6) == std::array<std::size_t, 2>{1, 2});
static_assert(mesh_2x4{}.device_at({1, 2}) == 6);

// An axis without a size is sized at run time.
using mesh_dyn = device_mesh<axis<"batch">>;
static_assert(mesh_dyn::rank == 1 && mesh_dyn::rank_dynamic == 1 && !mesh_dyn::is_static);
static_assert(mesh_dyn::value.sizes[0] == dynamic_extent);
using mesh_mixed = device_mesh<axis<"data">, axis<"model", 2>>;
static_assert(mesh_mixed::rank_dynamic == 1 && mesh_mixed::value.sizes[1] == 2);

// seeds/000: layout_2d = TensorLayout(axes=("model", "data"), device_mesh=mesh)
using layout_2d = tensor_layout<mesh_2x4, "model", "data">;
static_assert(layout_2d::rank == 2);
static_assert(layout_2d::value.dims[0].axes[0] == 1 && layout_2d::value.dims[1].axes[0] == 0);
static_assert(local_shape_v<layout_2d, shape<16, 8>> == shape_value{4, 4});

// seeds/000: replicated_layout_4d = TensorLayout(axes=(None, None, None, None), device_mesh=mesh)
using replicated_layout_4d = tensor_layout<mesh_2x4, none, none, none, none>;
static_assert(replicated_layout_4d::rank == 4 && replicated_layout_4d::value.is_replicated());
static_assert(local_shape_v<replicated_layout_4d, shape<16, 28, 28, 1>> ==
              shape_value{16, 28, 28, 1});

// The seed's d1/kernel (None, "model"): 784x200 is 784x50 on each device of the 2x4 mesh.
using d1_kernel = tensor_layout<mesh_2x4, none, "model">;
static_assert(local_shape_v<d1_kernel, shape<784, 200>> == shape_value{784, 50});

// Several axes on one dimension, major to minor (JAX PartitionSpec(("data", "model"))).
using both = tensor_layout<mesh_2x4, axes<"data", "model">, none>;
static_assert(both::value.dims[0].count == 2);
static_assert(local_shape_v<both, shape<64, 10>> == shape_value{8, 10});

// A dimension of run-time size stays dynamic in the static shard shape.
static_assert(local_shape_v<tensor_layout<mesh_2x4, "data", none>, shape<dynamic_extent, 784>> ==
              shape_value{dynamic_extent, 784});
// An axis of run-time size leaves the sharded dimension's local size dynamic.
static_assert(local_shape_v<tensor_layout<mesh_dyn, "batch", none>, shape<32, 784>> ==
              shape_value{dynamic_extent, 784});

// Which block each device holds: row-major over the dimension's axes.
constexpr mesh_value m24 = mesh_2x4::value;
static_assert(shard_block(d1_kernel::value, m24, {784, 200}, {1, 3}).offset == shape_value{0, 150});
static_assert(shard_block(both::value, m24, {64, 10}, {1, 2}).offset == shape_value{48, 0});
static_assert(shard_block(both::value, m24, {64, 10}, {0, 3}).offset == shape_value{24, 0});
static_assert(shard_block(layout_2d::value, m24, {16, 8}, {1, 3}).offset == shape_value{12, 4});
static_assert(shard_block(layout_2d::value, m24, {16, 8}, {1, 3}).extent == shape_value{4, 4});

// Compile-time names.
static_assert(concat<"d1", "/kernel"> == fixed_string("d1/kernel"));
}  // namespace

namespace {
// local_shape in a constant expression refuses a layout that does not fit (it is not constant).
template <std::size_t N>
concept fits = requires { typename std::integral_constant<std::size_t,
    tessel::local_shape(tessel::layout_value::sharded(1, 0, 0),
                        tessel::device_mesh<tessel::axis<"x", 4>>::value, tessel::shape_value{N})[0]>; };
static_assert(fits<32> && !fits<30>);
}  // namespace
