// Distributions: data_parallel and model_parallel (Keras DataParallel / ModelParallel) as types
// that answer, at compile time, the layout of a variable, of a layer output and of the batch.
// Any type with the same three members (a device_mesh `mesh`, its `batch_dim_name` and a
// distribution_value `value`) is a distribution; `local` true says the model lives whole on its
// own process (one_device). tf.distribute's strategies (strategy/) are such types.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

#include "device_mesh.hpp"
#include "layout_map.hpp"
#include "shard.hpp"
#include "tensor_layout.hpp"

namespace tessel {

inline constexpr std::size_t max_rules = 32;

// How the replicas of a data-parallel distribution reduce their gradients (tf.distribute's
// `cross_device_ops`).
enum class cross_device_ops : std::uint8_t {
  // One all-reduce over the batch axis: MPI's, NCCL's on GPUs (TF's NcclAllReduce).
  all_reduce,
  // A reduce to one process (the batch axis's first), then a broadcast of the sum (TF's
  // ReductionToOneDevice).
  reduction_to_one_device,
};
inline constexpr cross_device_ops nccl_all_reduce = cross_device_ops::all_reduce;
inline constexpr cross_device_ops reduction_to_one_device =
    cross_device_ops::reduction_to_one_device;

// What a distribution splits over its batch axis besides the batch (ZeRO's stages, FSDP's
// sharding strategies), under data_parallel and model_parallel alike. Each process updates one
// part of every gradient bucket (under model_parallel, of its own shards of the variables) and
// keeps the optimizer state of that part only; the updated parts are all-gathered over the batch
// axis, so every process holds its whole weights again for the next step, or (weights) each
// process keeps its parts only, and a layer's weights are all-gathered before it runs.
enum class shard_state : std::uint8_t {
  none,       // every process updates the whole model (DDP, FSDP's NO_SHARD)
  optimizer,  // the optimizer state split; gradients all-reduced (ZeRO-1)
  gradients,  // and the gradients reduce-scattered: each process receives its part's sum only
              // (ZeRO-2, FSDP's SHARD_GRAD_OP without the weights' resharding)
  weights,    // and the weights: each process keeps its part, and each layer's weights are
              // all-gathered before its forward and again before its backward (ZeRO-3, FSDP's
              // FULL_SHARD)
};

// A distribution as a value, for constexpr planning.
struct distribution_value {
  enum kind_t : std::uint8_t { data, model } kind = data;
  mesh_value mesh{};
  std::size_t batch_axis = 0;
  std::array<rule_value, max_rules> rules{};
  std::size_t rule_count = 0;
  // Data-parallel only: the gradients' reduction, and central storage: the coordinate on the
  // batch axis of the process that holds the variables and the optimizer state, reduces the
  // gradients to itself, updates once and broadcasts the variables (-1: every replica holds
  // them, TF's mirrored variables).
  cross_device_ops reduction = cross_device_ops::all_reduce;
  int variable_device = -1;
  // What is split over the batch axis besides the batch.
  shard_state shard = shard_state::none;

  // Central storage: a data-parallel distribution whose variables live on one process.
  [[nodiscard]] constexpr bool central_storage() const noexcept {
    return kind == data && variable_device >= 0;
  }
  // A distribution that splits its state over the batch axis (shard_state).
  [[nodiscard]] constexpr bool splits_state() const noexcept { return shard != shard_state::none; }

  // Keras get_data_layout: the batch split over the batch axis, the rest replicated.
  [[nodiscard]] constexpr layout_value batch_layout(std::size_t rank) const noexcept {
    return layout_value::sharded(rank, 0, static_cast<std::uint8_t>(batch_axis));
  }
  [[nodiscard]] constexpr lookup_result find(std::string_view path) const noexcept {
    return lookup(rules, rule_count, path);
  }
};

namespace detail {
// A dim_spec naming the axes of a dim_sharding, to lift a layout value back into a type.
constexpr dim_spec to_spec(const mesh_value& m, const dim_sharding& d) noexcept {
  dim_spec s;
  for (std::size_t k = 0; k < d.count; ++k) s.names[s.count++] = m.names[d.axes[k]];
  return s;
}
// Sources hold a layout value as `value` (gcc 12 crashes on dependent class-type template
// arguments here, so the value travels inside a type).
template <class Mesh, class Source, class I = std::make_index_sequence<Source::value.rank>>
struct layout_type;
template <class Mesh, class Source, std::size_t... I>
struct layout_type<Mesh, Source, std::index_sequence<I...>> {
  using type = tensor_layout<Mesh, to_spec(Mesh::value, Source::value.dims[I])...>;
};
template <std::size_t Rank>
struct replicated_source {
  static constexpr layout_value value = layout_value::replicated(Rank);
};
template <class Dist, std::size_t Rank>
struct batch_source {
  static constexpr layout_value value = Dist::value.batch_layout(Rank);
};
}  // namespace detail

// The tensor_layout type of the layout value `Source::value` on Mesh.
template <class Mesh, class Source>
using layout_type_t = typename detail::layout_type<Mesh, Source>::type;

// Weights replicated on every device of a 1-D mesh, each batch split along its first dimension.
// With no argument the mesh is 1-D of run-time size, axis "batch" (Keras: every local device).
// `Shard` splits the optimizer state (shard_state::optimizer, ZeRO-1) and the gradients
// (shard_state::gradients, ZeRO-2) over the mesh as well.
template <class Mesh = device_mesh<axis<"batch">>, shard_state Shard = shard_state::none>
struct data_parallel {
  static_assert(detail::is_device_mesh<Mesh>,
                "tessel::data_parallel: the argument must be a tessel::device_mesh<...>");
  static_assert(require<Mesh::rank == 1, diagnostic::data_parallel_needs_a_1d_mesh<Mesh>>);
  using mesh = Mesh;
  static constexpr name_string batch_dim_name = Mesh::axis_names[0];
  static constexpr distribution_value value = [] {
    distribution_value v{distribution_value::data, Mesh::value, 0, {}, 0};
    v.shard = Shard;
    return v;
  }();
};

// No distribution (Keras without set_distribution): the model lives whole on its own process. Run
// under `mpiexec`, every process then trains its own model; nothing is communicated.
struct one_device {
  static constexpr bool local = true;
  using mesh = device_mesh<axis<"batch", 1>>;
  static constexpr name_string batch_dim_name{"batch"};
  static constexpr distribution_value value{distribution_value::data, mesh::value, 0, {}, 0};
};

// Weights laid out by a layout_map, each batch split along `BatchDimName` (default: the mesh's
// first axis, as in Keras). `Shard` splits the optimizer state (shard_state::optimizer) and the
// gradients (shard_state::gradients) of each process's shards over the batch axis as well.
template <class LayoutMap, fixed_string BatchDimName = LayoutMap::mesh::axis_names[0],
          shard_state Shard = shard_state::none>
struct model_parallel {
  static_assert(detail::is_layout_map<LayoutMap>,
                "tessel::model_parallel: the first argument must be a tessel::layout_map<...>");
  static_assert(LayoutMap::size <= max_rules, "tessel::model_parallel: at most 32 rules");
  using mesh = typename LayoutMap::mesh;
  using layout_map = LayoutMap;
  static_assert(require<(mesh::template index_of<BatchDimName> >= 0),
                        diagnostic::batch_axis_not_in_mesh<BatchDimName, mesh>>);
  static constexpr name_string batch_dim_name{BatchDimName.view()};
  static constexpr distribution_value value = [] {
    distribution_value v{distribution_value::model, mesh::value,
                         static_cast<std::size_t>(mesh::template index_of<BatchDimName>), {},
                         LayoutMap::size};
    for (std::size_t i = 0; i < LayoutMap::size; ++i) v.rules[i] = LayoutMap::rules[i];
    v.shard = Shard;
    return v;
  }();
};

namespace detail {
// A distribution: a device_mesh, its batch axis's name and the distribution as a value.
template <class T>
concept distribution_type = requires {
  typename T::mesh;
  T::batch_dim_name;
  { T::value } -> std::convertible_to<distribution_value>;
} && is_device_mesh<typename T::mesh>;
template <class T>
inline constexpr bool is_distribution = distribution_type<T>;
// A distribution whose model lives whole on each process (nothing is communicated).
template <class T>
inline constexpr bool is_local_distribution = false;
template <distribution_type T>
  requires requires { T::local; }
inline constexpr bool is_local_distribution<T> = T::local;

template <class Dist, fixed_string Path>
struct map_lookup {
  using type = unmatched;
};
template <class Map, fixed_string B, shard_state S, fixed_string Path>
struct map_lookup<model_parallel<Map, B, S>, Path> {
  using type = lookup_t<Map, Path>;
};

template <class Dist, fixed_string Path, class Shape>
struct variable_layout {
  static_assert(is_distribution<Dist>,
                "tessel: expects data_parallel<...>, model_parallel<...> or one_device");
  using found = typename map_lookup<Dist, Path>::type;
  using layout = std::conditional_t<std::is_same_v<found, unmatched>,
                                    layout_type_t<typename Dist::mesh, replicated_source<Shape::rank>>,
                                    found>;
  // Checks the rank and that each static dimension divides by its axes.
  using type = typename laid_out<layout, Shape>::layout;
};
}  // namespace detail

// The layout of variable `Path` of shape `Shape`: the layout_map's, else replicated.
template <class Dist, fixed_string Path, class Shape>
using variable_layout_t = typename detail::variable_layout<Dist, Path, Shape>::type;

// The layout the distribution imposes on a layer output ("d2/output"), or unmatched.
template <class Dist, fixed_string Path>
using output_layout_t = typename detail::map_lookup<Dist, Path>::type;

// The layout of an input batch of shape `Shape` (first dimension the batch).
template <class Dist, class Shape>
using batch_layout_t =
    typename laid_out<layout_type_t<typename Dist::mesh, detail::batch_source<Dist, Shape::rank>>,
                      Shape>::layout;

}  // namespace tessel
