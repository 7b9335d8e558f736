// layout_map: Keras LayoutMap lookups at compile time, and the distributions built on it.
#include <tessel/core.hpp>
#include <type_traits>

namespace {
using namespace tessel;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;

// seeds/000's map.
using seed_map = layout_map<mesh_2x4, rule<"d1/kernel", none, "model">, rule<"d1/bias", "model">,
                            rule<"d2/output", "data", none>>;
static_assert(std::is_same_v<lookup_t<seed_map, "d1/kernel">, tensor_layout<mesh_2x4, none, "model">>);
static_assert(std::is_same_v<lookup_t<seed_map, "d1/bias">, tensor_layout<mesh_2x4, "model">>);
static_assert(std::is_same_v<lookup_t<seed_map, "d2/output">, tensor_layout<mesh_2x4, "data", none>>);
static_assert(std::is_same_v<lookup_t<seed_map, "d2/kernel">, unmatched>);
// Keys match the whole path, not a part of it.
static_assert(std::is_same_v<lookup_t<seed_map, "xd1/kernel">, unmatched>);
static_assert(std::is_same_v<lookup_t<seed_map, "d1/kernel2">, unmatched>);

// Keras's own LayoutMap cases: an exact key wins over patterns that also match; otherwise a
// single pattern match is the answer.
using keras_map = layout_map<mesh_2x4, rule<"dense/kernel", none, "model">,
                             rule<".*dense.*bias", "model">, rule<"conv2d.*", none, none, none, "model">>;
static_assert(std::is_same_v<lookup_t<keras_map, "dense/kernel">, tensor_layout<mesh_2x4, none, "model">>);
static_assert(std::is_same_v<lookup_t<keras_map, "dense_2/bias">, tensor_layout<mesh_2x4, "model">>);
static_assert(std::is_same_v<lookup_t<keras_map, "conv2d_1/kernel">,
                             tensor_layout<mesh_2x4, none, none, none, "model">>);
static_assert(std::is_same_v<lookup_t<keras_map, "dense_2/kernel">, unmatched>);
// An exact key beats a pattern that also matches it.
using exact_first = layout_map<mesh_2x4, rule<".*kernel", "model", none>, rule<"d1/kernel", none, "model">>;
static_assert(std::is_same_v<lookup_t<exact_first, "d1/kernel">, tensor_layout<mesh_2x4, none, "model">>);
static_assert(std::is_same_v<lookup_t<exact_first, "d2/kernel">, tensor_layout<mesh_2x4, "model", none>>);
// Value-level lookup reports ambiguity instead of failing, for run-time paths.
using ambiguous = layout_map<mesh_2x4, rule<"dense/kernel", none, "model">,
                             rule<".*dense.*bias", "model">, rule<".*bias", "model">>;
static_assert(ambiguous::find("dense_2/bias").kind == lookup_result::ambiguous);
static_assert(ambiguous::find("dense_2/bias").index == 1 && ambiguous::find("dense_2/bias").second == 2);
static_assert(ambiguous::find("dense/kernel").kind == lookup_result::exact);
static_assert(ambiguous::find("dense/kernel_x").kind == lookup_result::none_matched);
static_assert(layout_map<mesh_2x4>::find("anything").kind == lookup_result::none_matched);

// Distributions answer the layouts of variables, outputs and batches.
using mp = model_parallel<seed_map, "data">;
static_assert(std::is_same_v<variable_layout_t<mp, "d1/kernel", shape<784, 200>>,
                             tensor_layout<mesh_2x4, none, "model">>);
static_assert(std::is_same_v<variable_layout_t<mp, "d2/kernel", shape<200, 10>>,
                             tensor_layout<mesh_2x4, none, none>>);
static_assert(std::is_same_v<output_layout_t<mp, "d2/output">, tensor_layout<mesh_2x4, "data", none>>);
static_assert(std::is_same_v<output_layout_t<mp, "d1/output">, unmatched>);
static_assert(std::is_same_v<batch_layout_t<mp, shape<16, 28, 28, 1>>,
                             tensor_layout<mesh_2x4, "data", none, none, none>>);
// The batch axis defaults to the mesh's first axis, and may be any other.
static_assert(model_parallel<seed_map>::value.batch_axis == 0);
static_assert(model_parallel<seed_map, "model">::value.batch_axis == 1);
static_assert(std::is_same_v<batch_layout_t<model_parallel<seed_map, "model">, shape<16, 784>>,
                             tensor_layout<mesh_2x4, "model", none>>);

// data_parallel<>: a 1-D mesh of run-time size, axis "batch"; every variable replicated.
using dp = data_parallel<>;
static_assert(std::is_same_v<dp::mesh, device_mesh<axis<"batch">>>);
static_assert(dp::batch_dim_name == fixed_string("batch"));
static_assert(std::is_same_v<variable_layout_t<dp, "d1/kernel", shape<784, 200>>,
                             tensor_layout<dp::mesh, none, none>>);
static_assert(std::is_same_v<output_layout_t<dp, "d2/output">, unmatched>);
static_assert(std::is_same_v<batch_layout_t<dp, shape<dynamic_extent, 784>>,
                             tensor_layout<dp::mesh, "batch", none>>);
using dp8 = data_parallel<device_mesh<axis<"data", 8>>>;
static_assert(std::is_same_v<batch_layout_t<dp8, shape<128, 28, 28, 1>>,
                             tensor_layout<dp8::mesh, "data", none, none, none>>);
}  // namespace

namespace {
// A map without rules matches nothing, and model_parallel over it replicates every variable.
using empty_map = tessel::layout_map<tessel::device_mesh<tessel::axis<"data", 2>>>;
static_assert(std::is_same_v<tessel::lookup_t<empty_map, "d1/kernel">, tessel::unmatched>);
static_assert(std::is_same_v<
              tessel::variable_layout_t<tessel::model_parallel<empty_map>, "d1/kernel", tessel::shape<4, 4>>,
              tessel::tensor_layout<empty_map::mesh, tessel::none, tessel::none>>);
}  // namespace
