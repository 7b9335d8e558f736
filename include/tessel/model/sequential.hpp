// sequential_model: Keras's Sequential model with its structure as a type — the model, apart
// from its trainer (trainer/trainer.hpp, Keras's trainers/trainer.py). Layer names, shapes and
// parameter counts are computed when the type is formed (a dense layer on an unflattened input,
// or two layers with one name, do not compile). The model holds its layers and variables, runs
// forward and backward on this process's rows, and gives the planner its description; the
// public `tessel::sequential` (trainer/sequential.hpp) is this model with a trainer.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/default.hpp"
#include "../core/auto_layout.hpp"
#include "../core/compilation.hpp"
#include "../core/diagnostics.hpp"
#include "../core/distribution.hpp"
#include "../core/explain.hpp"
#include "../core/layer_planner.hpp"
#include "../core/shape.hpp"
#include "../data/array.hpp"
#include "../data/array_ops.hpp"
#include "../layers/elementwise.hpp"
#include "../layers/layer.hpp"
#include "../runtime/process_mesh.hpp"
#include "../runtime/reshard.hpp"
#include "distribute.hpp"
#include "executor.hpp"
#include "../state.hpp"
#include "graph.hpp"
#include "summary.hpp"

namespace tessel {

namespace utils {
namespace detail {
inline std::uint64_t& seed_ref() {
  static std::uint64_t seed = 1337;
  return seed;
}
}  // namespace detail
// keras.utils.set_random_seed: the seed of the models built after this call (initial weights,
// dropout masks). The default seed is fixed, so a program gives the same result every run.
inline void set_random_seed(std::uint64_t seed) { detail::seed_ref() = seed; }
inline std::uint64_t random_seed() { return detail::seed_ref(); }
}  // namespace utils

template <class T>
struct is_input : std::false_type {};
template <std::size_t... D>
struct is_input<layers::input<D...>> : std::true_type {};

namespace detail {

// What the table asks of a layer type, with the defaults of a layer of one input.
template <class L>
constexpr std::size_t min_inputs_of() {
  if constexpr (requires { L::min_inputs; })
    return L::min_inputs;
  else
    return 1;
}
template <class L>
constexpr std::size_t max_inputs_of() {
  if constexpr (requires { L::max_inputs; })
    return L::max_inputs;
  else
    return 1;
}
// What a layer that cannot take its input says it takes (a layer's input_requirement(in)), or
// nothing: a layer without one takes samples of rank 1 (dense), and the diagnostic says so.
template <class L>
constexpr key_string requirement_of(const shape_value& in) {
  if constexpr (requires { L::input_requirement(in); })
    return key_string(L::input_requirement(in));
  else
    return key_string{};
}
// The first input whose shape the layer cannot join with input 0's (n: none).
template <class L>
constexpr std::size_t mismatch_of(const shape_value* in, std::size_t n) {
  if constexpr (requires { L::mismatch(in, n); })
    return L::mismatch(in, n);
  else
    return n;
}
template <class L>
constexpr bool draws_random_of() {
  if constexpr (requires { L::draws_random; })
    return L::draws_random;
  else
    return false;
}
template <class L>
constexpr shape_value output_of(const shape_value* in, std::size_t n) {
  if constexpr (requires { L::merged_shape(in, n); })
    return L::merged_shape(in, n);
  else
    return L::accepts(in[0]) ? L::output_shape(in[0]) : in[0];
}

// The layers of a model's graph (`Edges`: graph_edges, model/executor.hpp): names (Keras's
// auto-naming), shapes, and the first broken rule (as an index), in one pass in topological
// order.
template <auto Edges, class... Layers>
struct layer_table {
  static constexpr std::size_t size = sizeof...(Layers);
  struct result {
    std::array<layer_info, sizeof...(Layers) + 1> info{};
    std::size_t bad_input = size;  // a layer that cannot take its input
    key_string requirement{};      // what it takes, where it says
    std::size_t duplicate = size;  // a layer whose name an earlier layer has
    std::size_t bad_arity = size;  // a layer called on a number of inputs it does not take
    std::size_t bad_merge = size;  // a merge whose input `bad_operand` does not fit input 0
    std::size_t bad_operand = 0;
  };
  // The name of node n: the model's input ("input_layer", as Keras names a functional model's
  // Input) or layer n - 1.
  static constexpr name_string node_name(const result& r, std::size_t n) {
    return n == 0 ? name_string{"input_layer"} : r.info[n - 1].name;
  }
  static constexpr result compute(shape_value input) {
    result r;
    constexpr std::array<std::string_view, size + 1> bases{Layers::base_name..., ""};
    constexpr std::array<name_string, size + 1> given{Layers::given_name..., name_string{}};
    constexpr std::array<bool (*)(const shape_value&), size + 1> accepts{&Layers::accepts...,
                                                                         nullptr};
    constexpr std::array<key_string (*)(const shape_value&), size + 1> requirements{
        &requirement_of<Layers>..., nullptr};
    constexpr std::array<std::size_t, size + 1> min_in{min_inputs_of<Layers>()..., 0};
    constexpr std::array<std::size_t, size + 1> max_in{max_inputs_of<Layers>()..., 0};
    constexpr std::array<std::size_t (*)(const shape_value*, std::size_t), size + 1> mismatch{
        &mismatch_of<Layers>..., nullptr};
    constexpr std::array<shape_value (*)(const shape_value*, std::size_t), size + 1> outs{
        &output_of<Layers>..., nullptr};
    std::array<shape_value, size + 1> nodes{};
    nodes[0] = input;
    for (std::size_t i = 0; i < size; ++i) {
      if (given[i].empty()) {
        std::size_t before = 0;
        for (std::size_t j = 0; j < i; ++j)
          if (given[j].empty() && bases[j] == bases[i]) ++before;
        r.info[i].name = auto_name(bases[i], before);
      } else {
        r.info[i].name = given[i];
      }
      for (std::size_t j = 0; j < i && r.duplicate == size; ++j)
        if (r.info[j].name.view() == r.info[i].name.view()) r.duplicate = i;
      const std::size_t n = Edges.count[i];
      std::array<shape_value, max_op_inputs> in{};
      for (std::size_t k = 0; k < n && k < max_op_inputs; ++k) in[k] = nodes[Edges.inputs[i][k]];
      r.info[i].input = in[0];
      if ((n < min_in[i] || n > max_in[i]) && r.bad_arity == size) r.bad_arity = i;
      if (n >= 2 && r.bad_merge == size && r.bad_arity == size) {
        const std::size_t k = mismatch[i](in.data(), n);
        if (k < n) r.bad_merge = i, r.bad_operand = k;
      }
      if (!accepts[i](in[0]) && r.bad_input == size) {
        r.bad_input = i;
        r.requirement = requirements[i](in[0]);
      }
      nodes[i + 1] = outs[i](in.data(), n < 1 ? 1 : n);
      r.info[i].output = nodes[i + 1];
    }
    return r;
  }
};

template <class Table, shape_value In, auto Edges>
struct checked_layers {
  static constexpr auto r = Table::compute(In);
  static constexpr name_string arity_name =
      r.bad_arity < Table::size ? r.info[r.bad_arity].name : name_string{};
  static constexpr std::size_t arity = r.bad_arity < Table::size ? Edges.count[r.bad_arity] : 0;
  static_assert(require<r.bad_arity == Table::size,
                        diagnostic::layer_called_on_wrong_number_of_inputs<arity_name, arity>>);
  static constexpr name_string merge_name =
      r.bad_merge < Table::size ? r.info[r.bad_merge].name : name_string{};
  static constexpr name_string merge_first =
      r.bad_merge < Table::size ? Table::node_name(r, Edges.inputs[r.bad_merge][0]) : name_string{};
  static constexpr name_string merge_other =
      r.bad_merge < Table::size ? Table::node_name(r, Edges.inputs[r.bad_merge][r.bad_operand])
                                : name_string{};
  static_assert(
      require<r.bad_merge == Table::size, diagnostic::merge_inputs_have_incompatible_shapes<
                                              merge_name, merge_first, merge_other>>);
  static constexpr name_string bad_name =
      r.bad_input < Table::size ? r.info[r.bad_input].name : name_string{};
  static constexpr std::size_t bad_rank =
      r.bad_input < Table::size ? r.info[r.bad_input].input.rank : 0;
  static constexpr name_string dup_name =
      r.duplicate < Table::size ? r.info[r.duplicate].name : name_string{};
  static constexpr key_string requirement = r.requirement;
  static_assert(require<r.bad_input == Table::size || !requirement.empty(),
                        diagnostic::layer_needs_flat_input<bad_name, bad_rank>>);
  static_assert(require<r.bad_input == Table::size || requirement.empty(),
                        diagnostic::layer_cannot_take_input<bad_name, bad_rank, requirement>>);
  static_assert(require<r.duplicate == Table::size, diagnostic::duplicate_layer_name<dup_name>>);
  static constexpr auto info = r.info;
};

}  // namespace detail

// A model's code that does not depend on its type (its layers), over its variables, mesh and
// resharder: compiled once per backend, in tessel::tessel for the host (TESSEL_MODEL_TEMPLATES),
// instead of once per model.
namespace detail {
// Keras's path of the random stream's counter (its seed generator's state).
inline constexpr std::string_view seed_generator_state_path = "seed_generator/seed_generator_state";
// Every variable's global values with its shape (a sharded variable is gathered).
template <class B, class C>
std::vector<array<float>> gathered_weights(const variable_store<B>& vars,
                                           tensor_resharder<B, C>& reshard);
// Checks `w` against the variables on every process, then keeps each variable's block of device
// 0's values.
template <class B, class C>
void assign_weights(variable_store<B>& vars, const bound_mesh<C>& pm, const std::string& model,
                    const std::vector<array<float>>& w);
// The trainable (or non-trainable) variables as state variables, copies or (copy false) the
// variables' own tensors; the non-trainable group ends with the random stream's counter `step`
// when a layer draws random numbers.
template <class B>
state_list<B> variables_state(const variable_store<B>& vars, bool trainable, bool copy,
                              bool draws_random, std::uint64_t step);
// A store that places each variable as the plan `p` lays it out on `pm` (replicated under data
// parallelism), this device holding its block.
template <class B, class C>
variable_store<B> placed_variables(const model_plan& p, const bound_mesh<C>& pm);
// x's values against its shape, then its shape against the model's input (`input`, its first
// layer `first_layer`).
TESSEL_INLINE void check_model_input(const array<float>& x, const shape_value& input,
                                     std::string_view first_layer);

template <class B, class C>
std::vector<array<float>> gathered_weights(const variable_store<B>& vars,
                                           tensor_resharder<B, C>& reshard) {
  std::vector<array<float>> out;
  for (const auto& v : vars) {
    if (v.value.size() == v.size()) {
      out.emplace_back(v.shape, v.numpy());
      continue;
    }
    typename B::matrix store;
    const basic_dtensor<B> whole =
        reshard(v.value, layout_value::replicated(v.shape.size()), store, "gathered");
    std::vector<float> values(v.size());
    B::download(whole.local(), std::span<float>(values));
    out.emplace_back(v.shape, std::move(values));
  }
  return out;
}

template <class B, class C>
void assign_weights(variable_store<B>& vars, const bound_mesh<C>& pm, const std::string& model,
                    const std::vector<array<float>>& w) {
  if (w.size() != vars.size())
    throw value_error("You called `set_weights(weights)` on model '" + model + "' with " +
                      std::to_string(w.size()) + " arrays, but the model has " +
                      std::to_string(vars.size()) + " variables.");
  detail::on_every_process(pm, "set_weights", [&] {
    std::size_t i = 0;
    for (const auto& v : vars) {
      if (w[i].size() != v.size())
        throw value_error("Variable '" + v.path + "' has " + std::to_string(v.size()) +
                          " values; cannot assign " + std::to_string(w[i].size()) + ".");
      if (w[i].shape != v.shape)
        throw value_error("Layer " + model + " weight shape " + shape_to_string(v.shape) +
                          " is not compatible with provided weight shape " +
                          shape_to_string(w[i].shape) + ". The variable is '" + v.path +
                          "' (weights[" + std::to_string(i) +
                          "]); pass the arrays get_weights() returns, in its order and with "
                          "its shapes.");
      ++i;
    }
  });
  std::size_t i = 0;
  for (auto& v : vars) {
    std::vector<float> values = w[i].values;
    pm.broadcast_from_device_0(std::span<float>(values));
    v.assign(block_of(v.value, std::span<const float>(values)));
    ++i;
  }
}

template <class B>
state_list<B> variables_state(const variable_store<B>& vars, bool trainable, bool copy,
                              bool draws_random, std::uint64_t step) {
  state_list<B> out;
  for (const auto& v : vars)
    if (v.trainable == trainable) out.push_back(state_of(v, copy));
  if (!trainable && draws_random)
    out.push_back({std::string(seed_generator_state_path), {}, static_cast<std::int64_t>(step)});
  return out;
}

template <class B, class C>
variable_store<B> placed_variables(const model_plan& p, const bound_mesh<C>& pm) {
  variable_store<B> store;
  std::vector<std::pair<std::string, layout_value>> layouts;
  for (std::size_t i = 0; p.ok && i < p.variable_count; ++i)
    layouts.emplace_back(std::string(p.variables[i].path.view()), p.variables[i].layout);
  variable_placement at{layout_value{}, pm.shape(), {}};
  for (std::size_t a = 0; a < pm.axis_count(); ++a) at.coords[a] = pm.coordinate(a);
  store.place = [layouts = std::move(layouts), at](std::string_view path, std::size_t) {
    variable_placement v = at;
    for (const auto& [name, layout] : layouts)
      if (name == path) v.layout = layout;
    return v;
  };
  return store;
}
}  // namespace detail

#define TESSEL_MODEL_TEMPLATES(prefix, B, C)                                                    \
  prefix template std::vector<array<float>> detail::gathered_weights(const variable_store<B>&, \
                                                                     tensor_resharder<B, C>&); \
  prefix template void detail::assign_weights(variable_store<B>&, const bound_mesh<C>&,        \
                                              const std::string&,                              \
                                              const std::vector<array<float>>&);               \
  prefix template state_list<B> detail::variables_state(const variable_store<B>&, bool, bool,  \
                                                        bool, std::uint64_t);                  \
  prefix template variable_store<B> detail::placed_variables<B, C>(const model_plan&,          \
                                                                   const bound_mesh<C>&);
#if TESSEL_EXTERN_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_MODEL_TEMPLATES(extern, backend::host, comm::communicator)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_MODEL_TEMPLATES(extern, backend::cuda, comm::cuda_communicator)
#endif

namespace detail {
// A model's layers and edges as the planner sees them (graph_model::describe without a loss).
template <class... Layers, class Infos, std::size_t N>
constexpr model_desc describe_layers(const shape_value& input, const Infos& infos,
                                     const graph_edges<N>& graph) {
  model_desc m{input, {}, sizeof...(Layers), &no_loss, 4, false, 1};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((m.ops[I] = Layers::plan_op(infos[I].name.view())), ...);
  }(std::make_index_sequence<sizeof...(Layers)>{});
  for (std::size_t i = 0; i < sizeof...(Layers); ++i) {
    m.ops[i].inputs = graph.inputs[i];
    m.ops[i].input_count = graph.count[i];
  }
  return m;
}
}  // namespace detail

// A model over a graph of layers: `Graph` gives its edges (graph_edges: which nodes each layer
// reads, in topological order), whether it is a functional model (summary() then lists the input
// and, for a graph that is not a chain, what each layer is connected to) and its default name.
// sequential_model and functional_model are this class over a chain and over a graph of nodes.
template <class B, class Dist, class Input, class Graph, class... Layers>
class graph_model;

template <class B, class DistArg, std::size_t... InputDims, class Graph, class... Layers>
class graph_model<B, DistArg, layers::input<InputDims...>, Graph, Layers...> {
  static constexpr graph_edges<sizeof...(Layers)> graph_ = Graph::edges;
  using table = detail::layer_table<graph_, Layers...>;
  using checked = detail::checked_layers<table, shape_value{InputDims...}, graph_>;
  static_assert(detail::is_distribution<DistArg>,
                "tessel: a model's distribution must be one_device, data_parallel<...>, "
                "model_parallel<...> or a strategy (mirrored_strategy<>, ...)");
  static_assert(require<sizeof...(Layers) <= max_ops,
                        diagnostic::model_has_more_layers_than_max_ops<sizeof...(Layers), max_ops>>);
  // The model as the planner sees it (describe() without a loss).
  static constexpr model_desc desc_ =
      detail::describe_layers<Layers...>(shape_value{InputDims...}, checked::info, graph_);
  // The distribution given, or for model_parallel<auto_layout<...>> the layouts the compiler
  // chose for this model (core/auto_layout.hpp).
  using Dist = resolved_distribution_t<DistArg, desc_>;

 public:
  using backend = B;
  using distribution = Dist;
  // The distribution as written, and whether the compiler chose its layouts (auto_layout).
  using requested_distribution = DistArg;
  static constexpr bool automatic_layouts = !std::is_same_v<DistArg, Dist>;
  using mesh_type = typename Dist::mesh;
  // The communicator of the mesh's axes: the backend's (comm::communicator_of), else MPI's.
  using communicator_type = typename comm::communicator_of<B>::type;
  using mesh_binding = process_mesh<mesh_type, communicator_type>;
  using matrix = typename B::matrix;
  using tensor = basic_dtensor<B>;
  using resharder = tensor_resharder<B, communicator_type>;
  // Under model_parallel the executor runs every planned step around each layer, the variables'
  // gradients included (left partial for the buckets where only an all_reduce over the batch
  // axes remains); under data_parallel every layer computes on its blocks as they come and the
  // trainer's gradient buckets reduce the gradients.
  static constexpr bool model_parallel = Dist::value.kind == distribution_value::model;
  static constexpr std::size_t layer_count = sizeof...(Layers);
  static constexpr shape_value input_shape{InputDims...};
  static constexpr auto layer_infos = checked::info;
  static constexpr shape_value output_shape =
      layer_count ? layer_infos[layer_count - 1].output : input_shape;
  static constexpr std::size_t input_features = input_shape.elements();
  static constexpr std::size_t output_features = output_shape.elements();

  // The mesh axis the batch is split over, and the model as the planner sees it.
  static constexpr std::size_t batch_axis = Dist::value.batch_axis;
  // `loss_values`: the floats the loss step reduces (the loss sum and one count per metric, as
  // doubles).
  static constexpr model_desc describe(const loss_rule* loss = &no_loss,
                                       std::size_t loss_values = 1) {
    model_desc m = desc_;
    m.loss = loss;
    m.loss_values = loss_values;
    return m;
  }

  // Builds the model on the distribution's mesh, bound to the job's processes (a mesh whose size
  // differs from the number of processes is an error naming both). Every process draws the same
  // initial weights: they are keyed by the seed (device 0's, if processes set different ones)
  // and each variable's path, not by the process.
  explicit graph_model(std::string name = std::string(Graph::default_name))
      : name_(std::move(name)),
        pm_(bind_mesh()),
        seed_(common_seed(pm_)),
        vars_(placed_store(pm_)),
        layouts_(planned_layouts(pm_)),
        reshard_(pm_),
        layers_(make_layers(std::make_index_sequence<layer_count>{})) {
    exec_.bind(layers_);
    exec_.set_plan(model_parallel ? &layouts_ : nullptr, reshard_);
  }
  graph_model(const graph_model&) = delete;
  graph_model& operator=(const graph_model&) = delete;

  const std::string& name() const { return name_; }

  // ---- state ---------------------------------------------------------------------------------
  std::vector<variable<B>*> variables() {
    return pointers([](const variable<B>&) { return true; });
  }
  std::vector<variable<B>*> trainable_variables() {
    return pointers([](const variable<B>& v) { return v.trainable; });
  }
  std::vector<variable<B>*> non_trainable_variables() {
    return pointers([](const variable<B>& v) { return !v.trainable; });
  }
  variable<B>& get_variable(std::string_view path) {
    for (auto& v : vars_)
      if (v.path == path) return v;
    throw value_error("No variable named '" + std::string(path) + "' in model '" + name_ + "'.");
  }
  std::size_t count_params() const {
    std::size_t n = 0;
    for (const auto& v : vars_) n += v.size();
    return n;
  }
  // Every variable's global values with its shape, in Keras's order (d1/kernel (in, out),
  // d1/bias (out,), ...), on every process (a sharded variable is gathered).
  std::vector<array<float>> get_weights() const {
    return detail::gathered_weights(vars_, reshard_);
  }
  // Loads weights: global values with their variables' shapes, in get_weights' order. Every
  // array is checked (its values, then its shape, as Keras checks it) on every process before
  // anything changes; on a distributed model every process calls it, the values of the process
  // at device 0 are broadcast, and each process keeps its block of every variable.
  void set_weights(const std::vector<array<float>>& w) {
    detail::assign_weights(vars_, pm_, name_, w);
  }
  bool is_chief() const { return pm_.is_chief(); }
  // The collectives the layers ran in their planned steps under model_parallel (kind, mesh
  // axis, dimensions, bytes), to hold a run against its plan; clear_collectives() starts over.
  const collective_log& collectives() const noexcept { return reshard_.log(); }
  void clear_collectives() { reshard_.clear_log(); }
  // What runs the planned steps over the bound mesh, and logs them: the trainer's loss and
  // metrics reduce rows with it when the output's classes are split across devices.
  resharder& resharding() noexcept { return reshard_; }
  // The mesh bound to the processes, with one communicator per axis.
  const mesh_binding& mesh() const noexcept { return pm_; }

  // Forward pass on a batch; returns the output (rows = batch) in device memory.
  // It runs on this process alone, on every row of x.
  const matrix& call(const array<float>& x, bool training = false) {
    if constexpr (model_parallel)
      throw value_error(
          "call() runs the model on this process alone, on every row of x; a "
          "model_parallel model's layers are split across processes. Use "
          "predict(x), which every process calls with the global batch.");
    return forward_rows(x, 0, 0, x.rows(), x.rows(), training).local();
  }
  // The counter of training calls that keys dropout masks. Setting it replays a call's masks
  // (Keras's stateless_call takes its seed state as an argument for the same purpose).
  std::uint64_t training_step() const { return pass_.step; }
  void set_training_step(std::uint64_t step) { pass_.step = step; }

  // ---- the state as values (state.hpp) ---------------------------------------------------
  // Whether a layer draws random numbers (dropout): the model's state then holds the random
  // stream's counter, as Keras's holds its seed generator's state.
  static constexpr bool draws_random = (detail::draws_random_of<Layers>() || ...);
  // Keras's path of that counter (the one seed generator every random layer of the model draws
  // from, each layer from its own stream of it).
  static constexpr std::string_view seed_generator_path = detail::seed_generator_state_path;
  // Copies of the trainable variables' values, in Keras's order.
  state_list<B> trainable_state() const { return state_where(true, true); }
  // Copies of the non-trainable variables' values, then the random stream's counter (an int64
  // scalar) when a layer draws random numbers.
  state_list<B> non_trainable_state() const { return state_where(false, true); }
  // The two lists without the copies: the variables' own memory, valid until the next step or
  // assignment (for a reader that copies the values out itself, as a checkpoint's snapshot does).
  state_list<B> trainable_state_view() const { return state_where(true, false); }
  state_list<B> non_trainable_state_view() const { return state_where(false, false); }
  // Writes values back into the model (Keras's variable.assign over the lists): each checked
  // against the model's variable of the same place (path, dtype, shape, layout) on every
  // process before anything changes.
  void assign_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                    std::string_view where = "set_state_tree") {
    check_state(trainable, non_trainable, where);
    auto assign = [&](const state_list<B>& values, bool trainable_group) {
      std::size_t i = 0;
      for (auto& v : vars_)
        if (v.trainable == trainable_group) B::copy(values[i++].tensor().local(), v.value.local());
      if (!trainable_group && draws_random)
        pass_.step = static_cast<std::uint64_t>(values[i].integer());
    };
    assign(trainable, true);
    assign(non_trainable, false);
  }
  // Runs `f` with the model's variables standing for `trainable` (their storage: no layer writes
  // a trainable value while it runs) and copies of `non_trainable` (batch normalization in
  // training writes its moving statistics into them, not into the caller's), and the random
  // stream's counter at theirs; the model's own values are back when f returns or throws. What f
  // reads of the model's state (non_trainable_state()) is the state it ran with, as f left it.
  template <class F>
  decltype(auto) with_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                            std::string_view where, F&& f) {
    check_state(trainable, non_trainable, where);
    std::vector<tensor> own;
    own.reserve(vars_.size());
    std::size_t t = 0, n = 0;
    for (auto& v : vars_) {
      own.push_back(v.value);
      v.value = v.trainable ? trainable[t++].tensor()
                            : copy_of(non_trainable[n++].tensor(), v.path);
    }
    const std::uint64_t own_step = pass_.step;
    if constexpr (draws_random) pass_.step = static_cast<std::uint64_t>(non_trainable[n].integer());
    struct restore {
      graph_model* m;
      std::vector<tensor>* own;
      std::uint64_t step;
      ~restore() {
        std::size_t i = 0;
        for (auto& v : m->vars_) v.value = (*own)[i++];
        m->pass_.step = step;
      }
    } guard{this, &own, own_step};
    return f();
  }

  // ---- summary -------------------------------------------------------------------------------
  std::string summary_text() const {
    std::vector<summary_row> rows;
    // A functional model lists its input first; one that is not a chain says what each layer
    // reads (Keras's "Connected to", `name[node][tensor]`).
    constexpr bool connections = Graph::functional && !graph_.is_chain();
    auto node_name = [](std::size_t n) {
      return n == 0 ? std::string("input_layer") : std::string(layer_infos[n - 1].name.view());
    };
    // Node n: the model's input (0) or layer n - 1.
    auto add = [&](std::size_t n, std::string_view name, std::string_view cls,
                   const shape_value& out, std::size_t params) {
      summary_row r;
      if (connections) {
        if (n == 0) r.connected_to = "-";
        for (std::size_t k = 0; n > 0 && k < graph_.count[n - 1]; ++k)
          r.connected_to += (k ? ", " : "") + node_name(graph_.inputs[n - 1][k]) + "[0][0]";
      }
      r.layer = std::string(name) + " (" + std::string(cls) + ")";
      r.output_shape = "(None" + [&] {
        std::string s;
        for (std::size_t i = 0; i < out.rank; ++i) s += ", " + std::to_string(out[i]);
        return s;
      }() + ")";
      r.params = params;
      for (const auto& v : vars_)
        if (v.path.starts_with(std::string(name) + "/"))
          r.layouts.push_back(v.path.substr(name.size() + 1) + " " +
                              to_string(v.value.layout(), pm_.shape()));
      rows.push_back(std::move(r));
    };
    if constexpr (Graph::functional) add(0, "input_layer", "InputLayer", input_shape, 0);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (add(I + 1, layer_infos[I].name.view(), Layers::class_name, layer_infos[I].output,
           Layers::param_count(layer_infos[I].input)),
       ...);
    }
    (std::make_index_sequence<layer_count>{});
    std::size_t trainable = 0, non_trainable = 0;
    for (const auto& v : vars_) (v.trainable ? trainable : non_trainable) += v.size();
    return format_summary(name_, rows, trainable, non_trainable, connections);
  }
  // Printed by the process at device 0 only.
  void summary() const {
    if (pm_.is_chief()) std::cout << summary_text() << std::flush;
  }

  // ---- what a trainer drives (trainer/trainer.hpp) ----------------------------------------------
  // The seed every process shares (initial weights, dropout masks, shuffling).
  std::uint64_t seed() const noexcept { return seed_; }
  // The name of layer `i`, as the plan's steps number them.
  static constexpr std::string_view layer_name(std::size_t i) { return layer_infos[i].name.view(); }
  // The Keras class of layer `i` ("Dense"), and whether Keras's model.layers lists an InputLayer
  // first (a functional model's): what a weights file names its groups by (saving/).
  static constexpr std::string_view layer_class_name(std::size_t i) {
    constexpr std::array<std::string_view, layer_count + 1> classes{Layers::class_name..., ""};
    return classes[i];
  }
  static constexpr bool keras_functional = Graph::functional;
  // x's values against its shape, then its shape against the model's input.
  void check_input_shape(const array<float>& x) const {
    detail::check_model_input(x, input_shape, layer_infos[0].name.view());
  }
  // Forward pass on rows [x_row, x_row + rows) of x: this device's block of a batch of `batch`
  // samples, its first row being row `first` of that batch (x holds the batch from some row on,
  // or, as a replica's per-replica batch, this device's rows alone). The input and every
  // activation are sharded tensors: the batch's global shape, its layout over the mesh (the
  // batch axis), this device's block (dropout masks are keyed by the block's global indices).
  const tensor& forward_rows(const array<float>& x, std::size_t x_row, std::size_t first,
                             std::size_t rows, std::size_t batch, bool training) {
    upload_inputs(x, x_row, rows);
    shape_value global{}, start{}, extent{};
    global.rank = start.rank = extent.rank = input_shape.rank + 1;
    global.extents[0] = batch;
    start.extents[0] = first;
    extent.extents[0] = rows;
    for (std::size_t d = 0; d < input_shape.rank; ++d)
      global.extents[d + 1] = extent.extents[d + 1] = input_shape[d];
    input_ =
        tensor(global, Dist::value.batch_layout(global.rank), block{start, extent}, input_rows_);
    // The layouts a layer computes with are chosen by the bytes they move, which depend on the
    // global batch: planned again when it changes, so that what runs is what explain() prints.
    if constexpr (model_parallel)
      if (batch != planned_batch_) {
        layouts_ = planned_layouts(pm_, batch);
        planned_batch_ = batch;
        exec_.set_plan(&layouts_, reshard_);
      }
    pass_.training = training;
    return exec_.forward(layers_, input_, pass_, reshard_);
  }
  // Before each layer's forward that has variables, `call(target, variables)` (a trainer whose
  // weights are split over the batch axis gathers them there); a null `call`: nothing.
  void set_before_forward(void* target, void (*call)(void*, std::span<variable<B>* const>)) {
    exec_.set_before_forward({target, call, nullptr});
  }
  // Backward pass from the gradient of the output, last layer first. After each layer's
  // backward, `on_layer` receives that layer's variables, whose gradients are then final (the
  // trainer starts their reduction there, overlapping the rest of the backward pass).
  template <class OnLayer>
  void backward(const matrix& dy, OnLayer&& on_layer) {
    exec_.backward(layers_, dy, pass_, reshard_, on_layer);
  }

 private:
  static mesh_binding bind_mesh() {
    // Every model needs the backend the guard starts, one on one device too.
    runtime::require_started("building a model");
    if constexpr (detail::is_local_distribution<Dist>)
      return mesh_binding::local();
    else
      return mesh_binding::bind();
  }
  // Every process starts from device 0's seed: processes given different seeds
  // (set_random_seed(1000 + rank)) would otherwise build different replicas.
  static std::uint64_t common_seed(const mesh_binding& pm) {
    std::uint64_t s = utils::random_seed();
    pm.broadcast_from_device_0(std::span<std::uint64_t>(&s, 1));
    return s;
  }
  // A store that places each variable as the plan lays it out on the bound mesh (replicated
  // under data parallelism), this device holding its block. Under split weights over more than
  // one process the trainable variables are drawn later: each process draws its parts alone
  // when the model is compiled, or the whole values when they are read first.
  static variable_store<B> placed_store(const mesh_binding& pm) {
    variable_store<B> store = detail::placed_variables<B, communicator_type>(
        plan_model(Dist::value, pm.shape(), describe(), dynamic_extent), pm);
    const std::size_t batch = Dist::value.batch_axis;
    store.defer = Dist::value.shard == shard_state::weights && batch < pm.shape().rank &&
                  pm.shape().sizes[batch] > 1;
    return store;
  }
  // ---- layers -----------------------------------------------------------------------------------
  template <std::size_t... I>
  std::tuple<typename Layers::template runtime<B>...> make_layers(std::index_sequence<I...>) {
    return {typename Layers::template runtime<B>(layer_infos[I], vars_, seed_)...};
  }
  // The layouts each layer computes with, from the plan on the bound mesh.
  static std::array<op_layouts, max_ops> planned_layouts(const mesh_binding& pm,
                                                         std::size_t batch = dynamic_extent) {
    const model_plan p = plan_model(Dist::value, pm.shape(), describe(), batch);
    if (!p.ok) throw value_error(tessel::explain(p, describe()));
    return p.layouts;
  }
  // Rows [first, first + rows) of x.
  void upload_inputs(const array<float>& x, std::size_t first, std::size_t rows) {
    check_input_shape(x);
    input_rows_ = sized<B>(input_store_, rows, input_features, "input");
    B::upload(
        std::span<const float>(x.values).subspan(first * input_features, rows * input_features),
        input_rows_);
  }
  // Checks given values against the model's variables, on every process before any changes.
  void check_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                   std::string_view where) const {
    detail::on_every_process(pm_, "checking a state", [&] {
      detail::check_state_list(state_where(true, false), trainable, where, "trainable_variables");
      detail::check_state_list(state_where(false, false), non_trainable, where,
                               "non_trainable_variables");
    });
  }
  // The trainable (or non-trainable) variables as state variables: copies of their values, or
  // (copy false) the model's own tensors, to check a given state against; the non-trainable
  // group ends with the random stream's counter when a layer draws random numbers.
  state_list<B> state_where(bool trainable, bool copy) const {
    return detail::variables_state(vars_, trainable, copy, draws_random, pass_.step);
  }
  template <class P>
  std::vector<variable<B>*> pointers(P pred) {
    std::vector<variable<B>*> out;
    for (auto& v : vars_)
      if (pred(v)) out.push_back(&v);
    return out;
  }

  std::string name_;
  mesh_binding pm_;
  std::uint64_t seed_;
  variable_store<B> vars_;
  std::array<op_layouts, max_ops> layouts_;
  std::size_t planned_batch_ = dynamic_extent;
  mutable resharder reshard_;
  std::tuple<typename Layers::template runtime<B>...> layers_;
  executor<B, graph_, Layers...> exec_;
  pass_context pass_{.training = false, .step = 0, .seed = 0};
  matrix input_store_, input_rows_;
  tensor input_;
};

// Sequential: a chain, each layer reading the one before.
template <std::size_t N, bool... HasVariables>
struct chain_graph {
  static constexpr graph_edges<N> edges = graph_edges<N>::chain({HasVariables...});
  static constexpr bool functional = false;
  static constexpr std::string_view default_name = "sequential";
};

// The primary template is reached only when the entry after the distribution is not an input.
template <class B, class Dist, class Input = void, class... Layers>
class sequential_model {
  static_assert(require<is_input<Input>::value, diagnostic::sequential_needs_an_input<0>>);
};

template <class B, class Dist, std::size_t... InputDims, class... Layers>
class sequential_model<B, Dist, layers::input<InputDims...>, Layers...>
    : public graph_model<B, Dist, layers::input<InputDims...>,
                         chain_graph<sizeof...(Layers), Layers::has_variables...>, Layers...> {
  using base = graph_model<B, Dist, layers::input<InputDims...>,
                           chain_graph<sizeof...(Layers), Layers::has_variables...>, Layers...>;

 public:
  explicit sequential_model(std::string name = "sequential") : base(std::move(name)) {}
};

// A functional model's graph: its nodes from Input to Output (model/graph.hpp).
template <class Input, class Output>
struct functional_spec {
  using graph = functional_graph<Input, Output>;
  static constexpr auto edges = graph::edges;
  static constexpr bool functional = true;
  static constexpr std::string_view default_name = "functional";
};

namespace detail {
template <class B, class Dist, class Input, class Spec, class List>
struct graph_model_of;
template <class B, class Dist, class Input, class Spec, class... L>
struct graph_model_of<B, Dist, Input, Spec, type_list<L...>> {
  using type = graph_model<B, Dist, Input, Spec, L...>;
};
}  // namespace detail

// Keras's functional Model(inputs, outputs), its graph as types: the layers reached from
// Output, in Keras's order.
template <class B, class Dist, class Input, class Output>
class functional_model
    : public detail::graph_model_of<B, Dist, Input, functional_spec<Input, Output>,
                                    typename functional_graph<Input, Output>::layers>::type {
  static_assert(require<is_input<Input>::value, diagnostic::sequential_needs_an_input<0>>);
  using base =
      typename detail::graph_model_of<B, Dist, Input, functional_spec<Input, Output>,
                                      typename functional_graph<Input, Output>::layers>::type;

 public:
  explicit functional_model(std::string name = "functional") : base(std::move(name)) {}
};

}  // namespace tessel

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace tessel::detail {
TESSEL_INLINE void check_model_input(const array<float>& x, const shape_value& input,
                                     std::string_view first_layer) {
  data::check_shape(x, "x");
  bool ok = x.rank() == input.rank + 1;
  for (std::size_t i = 0; ok && i < input.rank; ++i) ok = x.shape[i + 1] == input[i];
  if (!ok) {
    std::string expected = "(None";
    for (std::size_t i = 0; i < input.rank; ++i) expected += ", " + std::to_string(input[i]);
    expected += ")";
    throw value_error("Input 0 of layer \"" + std::string(first_layer) +
                      "\" is incompatible with the layer: expected shape=" + expected +
                      ", found shape=" + shape_to_string(x.shape) +
                      ". Reshape the data so that each sample has the model's input shape.");
  }
}
}  // namespace tessel::detail
#endif  // TESSEL_DEFINITIONS
