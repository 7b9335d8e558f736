// Compile-time diagnostics: each is a class template whose instantiation fails a static_assert.
// The offending names travel as template arguments, so gcc and clang print them in the first
// lines of the error ("In instantiation of 'struct tessel::diagnostic::axis_not_in_mesh<...>'").
#pragma once

#include <cstddef>
#include <type_traits>

#include "fixed_string.hpp"

namespace tessel {
namespace detail {
template <class...>
inline constexpr bool always_false = false;
struct passed {
  static constexpr bool value = true;
};
}  // namespace detail

// `require<Ok, Diagnostic>`: true when Ok, else instantiates Diagnostic (and fails there).
template <bool Ok, class Diagnostic>
inline constexpr bool require = std::conditional_t<Ok, detail::passed, Diagnostic>::value;

namespace diagnostic {

#define COMMA ,
#define TESSEL_DIAGNOSTIC(decl, name, message)                                                  \
  template <decl>                                                                               \
  struct name {                                                                                 \
    static_assert(::tessel::detail::always_false<name>, message);                               \
    static constexpr bool value = false;                                                        \
  }

// device_mesh and axis
TESSEL_DIAGNOSTIC(fixed_string Axis, axis_size_must_be_positive,
                  "tessel::axis: a mesh axis must have size >= 1 (see the axis name above)");
TESSEL_DIAGNOSTIC(std::size_t Unused, axis_name_must_not_be_empty,
                  "tessel::axis: a mesh axis needs a non-empty name");
TESSEL_DIAGNOSTIC(std::size_t Unused, device_mesh_needs_at_least_one_axis,
                  "tessel::device_mesh: a device_mesh must have at least one axis");
TESSEL_DIAGNOSTIC(fixed_string Axis, duplicate_mesh_axis,
                  "tessel::device_mesh: two axes have the same name (see the axis name above)");

// tensor_layout
TESSEL_DIAGNOSTIC(fixed_string Axis COMMA class Mesh, axis_not_in_mesh,
                  "tessel: the axis named here is not an axis of the device_mesh");
TESSEL_DIAGNOSTIC(fixed_string Axis, axis_used_twice_in_layout,
                  "tessel::tensor_layout: a mesh axis may shard at most one tensor dimension");
TESSEL_DIAGNOSTIC(std::size_t LayoutRank COMMA std::size_t TensorRank, layout_rank_mismatch,
                  "tessel::tensor_layout: the layout's rank differs from the tensor's rank");
TESSEL_DIAGNOSTIC(std::size_t Dimension COMMA std::size_t Extent COMMA fixed_string Axes COMMA
                      std::size_t AxesSize,
                  dimension_not_divisible,
                  "tessel::tensor_layout: a static tensor dimension does not divide by the size "
                  "of the mesh axes it is sharded over");

// layout_map
TESSEL_DIAGNOSTIC(fixed_string Path COMMA fixed_string FirstKey COMMA fixed_string SecondKey,
                  path_matches_two_layout_map_keys,
                  "tessel::layout_map: the path matches more than one key; make the keys "
                  "disjoint (see the path and both keys above)");
TESSEL_DIAGNOSTIC(fixed_string Key COMMA fixed_string Axis, layout_map_rule_names_unknown_axis,
                  "tessel::layout_map: a rule names an axis the device_mesh does not have");
TESSEL_DIAGNOSTIC(fixed_string Key COMMA fixed_string Axis, layout_map_rule_uses_axis_twice,
                  "tessel::layout_map: a rule uses one mesh axis for two dimensions");
TESSEL_DIAGNOSTIC(fixed_string Key COMMA std::size_t Position, unsupported_regex_in_layout_map_key,
                  "tessel::layout_map: the key uses regular-expression syntax outside tessel's "
                  "subset (literals . * + ? [...] | (...) \\d \\w \\s); see docs/errors.md");
TESSEL_DIAGNOSTIC(fixed_string Key, duplicate_layout_map_key,
                  "tessel::layout_map: the same key is given twice");

// distributions
TESSEL_DIAGNOSTIC(fixed_string Axis COMMA class Mesh, batch_axis_not_in_mesh,
                  "tessel::model_parallel: the batch axis is not an axis of the layout_map's mesh");
TESSEL_DIAGNOSTIC(class Mesh, data_parallel_needs_a_1d_mesh,
                  "tessel::data_parallel: the mesh must have exactly one axis");

// tf.distribute strategies
TESSEL_DIAGNOSTIC(int Device COMMA class Mesh, parameter_device_not_in_mesh,
                  "tessel::central_storage_strategy: the parameter device (the first argument "
                  "above) is not a coordinate of the mesh's batch axis (from 0, below its size)");
TESSEL_DIAGNOSTIC(int Gpus, multi_gpu_model_needs_at_least_2_gpus,
                  "tessel::multi_gpu_model: for multi-gpu usage to be effective, call "
                  "multi_gpu_model with gpus >= 2 (the count above)");

// planning
TESSEL_DIAGNOSTIC(fixed_string Layer COMMA fixed_string Reason, layer_cannot_be_planned,
                  "tessel: the layouts given for this layer cannot be planned (see the layer "
                  "name and reason above)");
TESSEL_DIAGNOSTIC(fixed_string Largest COMMA std::size_t LargestBytes COMMA std::size_t PeakBytes
                      COMMA std::size_t BudgetBytes,
                  model_exceeds_device_memory,
                  "tessel: the model's memory plan needs more bytes per device than the budget "
                  "(see its largest part, that part's bytes, the peak and the budget above): "
                  "split the state (shard_state), shard the largest variables over a model axis, "
                  "or take a smaller batch");

TESSEL_DIAGNOSTIC(std::size_t BudgetBytes COMMA std::size_t SmallestPeakBytes,
                  no_layout_fits_device_memory,
                  "tessel::auto_layout: no choice of layouts fits the memory budget (see the "
                  "budget and the smallest peak found above): give a larger memory_budget, a "
                  "mesh with a larger model axis, or a smaller global_batch");
TESSEL_DIAGNOSTIC(fixed_string Reason, auto_layout_cannot_plan_the_model,
                  "tessel::auto_layout: no choice of layouts can be planned for this model (see "
                  "the reason above)");

// sequential models
TESSEL_DIAGNOSTIC(fixed_string Layer COMMA std::size_t InputRank, layer_needs_flat_input,
                  "tessel::sequential: this layer takes samples of rank 1; put a flatten layer "
                  "before it (see the layer name and the input rank above)");
TESSEL_DIAGNOSTIC(fixed_string Layer COMMA std::size_t InputRank COMMA fixed_string Requirement,
                  layer_cannot_take_input,
                  "tessel::sequential: this layer cannot take its input (see the layer name, the "
                  "input's rank per sample and what the layer takes above)");
TESSEL_DIAGNOSTIC(fixed_string Layer, duplicate_layer_name,
                  "tessel::sequential: All layers added to a Sequential model should have unique "
                  "names (see the repeated name above)");
TESSEL_DIAGNOSTIC(std::size_t Unused, sequential_needs_an_input,
                  "tessel::sequential: the first entry must be layers::input<...> giving the "
                  "shape of one sample, like keras.Input(shape=(784,))");

// models of many layers
TESSEL_DIAGNOSTIC(std::size_t Layers COMMA std::size_t MaxOps, model_has_more_layers_than_max_ops,
                  "tessel: the model has more layers than the planner's arrays hold (see the two "
                  "counts above); define TESSEL_MAX_OPS (default 32, at most 254) larger, the "
                  "same in every translation unit");

// losses and metrics
TESSEL_DIAGNOSTIC(class Loss COMMA class Backend, not_a_loss_on_this_backend,
                  "tessel: compile() was given a loss (see its type and the model's backend "
                  "above) that is not one: a loss has a `name`, `plan_rule()` and "
                  "`compute<B>(const loss_call<B>&)` for the model's backend B (losses.hpp)");
TESSEL_DIAGNOSTIC(class Metric COMMA class Backend, not_a_metric_on_this_backend,
                  "tessel: compile() was given a metric (see its type and the model's backend "
                  "above) that is not one: a metric has a `name` and "
                  "`local_sum<B>(const metric_call<B>&)` for the model's backend B (metrics.hpp)");

// optimizers (optimizers/protocol.hpp): the first names the type and the backend, the others
// the member it lacks
TESSEL_DIAGNOSTIC(class Optimizer COMMA class Backend, not_an_optimizer_on_this_backend,
                  "tessel: compile() was given an optimizer (see its type and the model's backend "
                  "above) that is not one: an optimizer has `class_name`, `name`, "
                  "`learning_rate`, `fields()`, `slot_names()` and "
                  "`update<B>(const optimizers::step<B>&)` for the model's backend B "
                  "(optimizers/protocol.hpp)");
TESSEL_DIAGNOSTIC(class Optimizer COMMA class Backend, optimizer_has_no_update_for_this_backend,
                  "tessel: this optimizer has no `template <class B> void update(const "
                  "tessel::optimizers::step<B>&) const` for the model's backend B");
TESSEL_DIAGNOSTIC(class Optimizer, optimizer_has_no_class_name_or_name,
                  "tessel: this optimizer has no `static constexpr std::string_view class_name` "
                  "(Keras's class, \"Adam\") and `name` (its variables' prefix, \"adam\")");
TESSEL_DIAGNOSTIC(class Optimizer, optimizer_has_no_learning_rate,
                  "tessel: this optimizer has no `double learning_rate` member");
TESSEL_DIAGNOSTIC(class Optimizer, optimizer_has_no_fields,
                  "tessel: this optimizer has no `static constexpr auto fields()` returning a "
                  "std::tuple of tessel::optimizers::field{\"name\", &T::member}");
TESSEL_DIAGNOSTIC(class Optimizer, optimizer_has_no_slot_names,
                  "tessel: this optimizer has no `std::array<const char*, 3> slot_names() const`");

// functional models
TESSEL_DIAGNOSTIC(fixed_string Layer COMMA std::size_t Count, layer_called_on_wrong_number_of_inputs,
                  "tessel::functional: this layer is called on a number of inputs it does not "
                  "take (see the layer name and the count above): one for most layers, two or "
                  "more for add and concatenate");
TESSEL_DIAGNOSTIC(fixed_string Merge COMMA fixed_string First COMMA fixed_string Other,
                  merge_inputs_have_incompatible_shapes,
                  "tessel::functional: a merge layer joins inputs of incompatible shapes (add: "
                  "equal shapes; concatenate: equal but for the last axis); see the merge "
                  "layer's name and the two layers whose outputs it joins above");
TESSEL_DIAGNOSTIC(fixed_string Layer, layer_reads_an_input_that_is_not_the_models,
                  "tessel::functional: this layer reads an input that is not the model's input; "
                  "every path of the graph must start at the input given to "
                  "functional<..., Input, Output>");

#undef TESSEL_DIAGNOSTIC
#undef COMMA
}  // namespace diagnostic
}  // namespace tessel
