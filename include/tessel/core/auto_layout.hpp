// auto_layout: the layouts of a model_parallel distribution chosen by the compiler.
// `model_parallel<auto_layout<Mesh>, "data">` picks, for each layer with a weight (dense's or
// conv2d's kernel, as the layer's rule tags it: variable_use), one of:
// replicated, split by columns over a model axis (the weight's last dimension and the bias), or
// split by rows (the weight's input dimension). The choice minimises the bytes each device moves
// in a training step, as the planner counts them (its own steps: activations resharded, partial
// products reduced, gradients reduced over the batch axis), with, if asked, the flops of its
// weights' products weighed in (bytes_per_flop), among the layouts whose memory plan fits the
// budget; when none fits, the search runs again with the state split over the batch axis
// (shard_state::gradients, split_state). It is a dynamic programme over the layers in
// topological order whose state is the layouts of the activations later layers still read, with
// a Pareto front of bytes and memory per state: exact for the planner's costs, which add up layer
// by layer. Every candidate is planned by plan_model itself, so a choice the planner refuses (a
// dimension that does not divide) is never made. When the program compiles, each layer's step is
// its own constant expression; the result is a plain model_parallel<layout_map<...>> type,
// printable as Keras code (layout_map_code).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "compilation.hpp"
#include "diagnostics.hpp"
#include "distribution.hpp"
#include "layer_planner.hpp"
#include "memory_plan.hpp"
#include "model_plan.hpp"

namespace tessel {

struct auto_layout_options {
  // The global batch a step's bytes and memory are counted for (Keras's fit default).
  std::size_t global_batch = 32;
  // The optimizer's slots per variable (Adam 2, SGD with momentum 1, SGD 0).
  std::size_t optimizer_slots = 2;
  // Bytes per device the memory plan must fit; 0: no budget.
  std::size_t memory_budget = 0;
  // The weight of compute against communication: a step's cost is the bytes each device sends
  // plus bytes_per_flop times the floating-point operations of its weights' products (a link's
  // bytes per second over the device's flop/s: about 0.1 for two CPU processes sharing memory,
  // 5e-4 for an H100 over NVLink). 0, the default: bytes alone, so that on a mesh whose batch axis
  // has size 1 replicated weights, which move nothing, win unless the budget forces a split.
  double bytes_per_flop = 0.0;
  // Whether, when no layout fits memory_budget, the search may also split each process's
  // optimizer state and gradients over the batch axis (shard_state::gradients, ZeRO-2): the same
  // bytes on the wire as the all-reduce it replaces, half or less of the slots. Not taken when a
  // layout fits without it, nor when the distribution names a shard_state itself.
  bool split_state = true;
};

// The layouts left to the compiler: model_parallel<auto_layout<Mesh, {.global_batch = 64}>,
// "data">. The batch axis splits the batch; every other axis of size > 1 may split weights.
template <class Mesh, auto_layout_options Options = auto_layout_options{}>
struct auto_layout {
  static_assert(detail::is_device_mesh<Mesh>,
                "tessel::auto_layout: the first argument must be a tessel::device_mesh<...>");
  static_assert(Mesh::is_static, "tessel::auto_layout: the mesh's axes need static sizes");
  using mesh = Mesh;
  static constexpr auto_layout_options options = Options;
};

// One layer's choice.
struct layer_choice {
  enum kind_t : std::uint8_t { replicated, columns, rows } kind = replicated;
  std::uint8_t axis = 0;  // the model axis it splits over
  constexpr bool operator==(const layer_choice&) const = default;
};

inline constexpr std::size_t max_layer_choices = 1 + 2 * (max_mesh_rank - 1);
// Candidates kept per step of the search (states times their Pareto fronts).
inline constexpr std::size_t max_layout_candidates = 16;

struct layout_candidate {
  std::array<layer_choice, max_ops> choices{};
  std::size_t bytes = 0;   // bytes each device sends per step, for the layers planned so far
  std::size_t cost = 0;    // bytes plus bytes_per_flop times their products' flops
  std::size_t memory = 0;  // their memory plan's peak
  std::size_t splits = 0;  // layers split (fewer wins a tie)
  // The layouts of the activations later layers read (the search's state).
  std::array<layout_value, max_ops + 1> live{};
};

// The search, as it stands after `done` layers, and its result when done == model.count.
struct layout_search {
  bool ok = true;
  std::string_view error{};
  distribution_value base{};  // the distribution without rules
  mesh_value mesh{};
  model_desc model{};
  auto_layout_options options{};
  // What the search minimises: the cost (the bytes moved, and compute by bytes_per_flop; memory
  // breaks ties), or the memory plan's peak (the cost breaks ties), to tell a budget nothing
  // fits how much the smallest layout needs.
  bool by_memory = false;
  // Per layer, as its rule tags its variables (variable_use): the rank of its weight (0: none,
  // the layer is left as the planner lays it out), the weight's path and its bias's (empty:
  // none).
  std::array<std::uint8_t, max_ops> weight_rank{};
  std::array<key_string, max_ops> weight_path{}, bias_path{};
  std::size_t done = 0;
  std::array<layout_candidate, max_layout_candidates> candidates{};
  std::size_t candidate_count = 0;
  std::size_t plans = 0;  // candidate plans evaluated
  // No choice fitted the budget, and the smallest peak of any choice (search_layouts and
  // auto_layout find it with a second search, by memory). And the bytes of the all-replicated
  // plan, for comparison.
  bool over_budget = false;
  std::size_t smallest_peak = 0;
  std::size_t replicated_bytes = 0;
  // The result: the chosen layouts as a distribution, its bytes per step, the flops of its
  // weights' products per device and step, its cost and its memory plan.
  distribution_value chosen{};
  std::size_t bytes = 0;
  std::size_t flops = 0;
  std::size_t cost = 0;
  memory_plan memory{};
  std::array<layer_choice, max_ops> choices{};
};

namespace detail {

constexpr std::size_t step_bytes(const model_plan& p) noexcept {
  const std::size_t f = p.wire_bytes(phase::forward), b = p.wire_bytes(phase::backward);
  return (f == unknown_bytes || b == unknown_bytes) ? unknown_bytes : f + b;
}

// The floating-point operations of a training step's weight products on one device: per layer
// with a weight, 6 x its rows x its output's positions (1 for dense; a convolution's height x
// width) x the weight's elements as the layer computes with them (forward, and the gradients of
// the input and of the weight).
constexpr std::size_t step_flops(const model_plan& p, const model_desc& m) noexcept {
  std::size_t total = 0;
  for (std::size_t op = 0; op < m.count && op < max_ops; ++op) {
    const op_layouts& used = p.layouts[op];
    if (!used.set) continue;
    std::size_t k = 0;  // the variable's index among the op's, as `used` lists them
    for (std::size_t v = 0; v < p.variable_count; ++v) {
      const variable_plan& var = p.variables[v];
      if (var.op != op) continue;
      if (var.use == variable_use::weight && k < max_op_variables) {
        const activation_plan& x = p.activations[input_node(m.ops[op], op, 0)];
        const activation_plan& y = p.activations[op + 1];
        const std::size_t rows =
            x.shape.extents[0] / p.mesh.size_of(used.operands[0].dims[0].mask());
        std::size_t positions = 1;
        for (std::size_t d = 1; d + 1 < y.shape.rank; ++d)
          positions *= y.shape.extents[d] / p.mesh.size_of(y.layout.dims[d].mask());
        total += 6 * rows * positions * local_elements(var.shape, used.variables[k], p.mesh);
      }
      ++k;
    }
  }
  return total;
}

constexpr std::size_t step_cost(std::size_t bytes, std::size_t flops,
                                const auto_layout_options& o) noexcept {
  return bytes + static_cast<std::size_t>(o.bytes_per_flop * static_cast<double>(flops));
}

// The distribution with the rules of the choices of layers [0, count).
constexpr distribution_value rules_of(const layout_search& s,
                                      const std::array<layer_choice, max_ops>& choices,
                                      std::size_t count, bool& ok) noexcept {
  distribution_value d = s.base;
  d.rule_count = 0;
  ok = true;
  auto add = [&](const key_string& path, layout_value l) {
    if (d.rule_count == max_rules) {
      ok = false;
      return;
    }
    d.rules[d.rule_count++] = {path, l};
  };
  for (std::size_t i = 0; i < count; ++i) {
    const layer_choice c = choices[i];
    if (c.kind == layer_choice::replicated) continue;
    const std::size_t r = s.weight_rank[i];
    layout_value w = layout_value::replicated(r);
    w.dims[c.kind == layer_choice::columns ? r - 1 : r - 2].push(c.axis);
    add(s.weight_path[i], w);
    if (c.kind == layer_choice::columns && !s.bias_path[i].empty())
      add(s.bias_path[i], layout_value::sharded(1, 0, c.axis));
  }
  return d;
}

// Whether node j (0 the input, i + 1 layer i's output) is read by a layer after `after`, or is
// the last layer's output.
constexpr bool read_after(const model_desc& m, std::size_t j, std::size_t after) noexcept {
  if (j == after + 1) return true;
  for (std::size_t k = after + 1; k < m.count; ++k) {
    for (std::size_t q = 0; q < std::max<std::size_t>(m.ops[k].input_count, 1); ++q)
      if (input_node(m.ops[k], k, q) == j) return true;
  }
  return false;
}

constexpr bool same_state(const layout_candidate& a, const layout_candidate& b,
                          std::size_t nodes) noexcept {
  for (std::size_t j = 0; j < nodes; ++j)
    if (!(a.live[j] == b.live[j])) return false;
  return true;
}

// What the search minimises first (the cost, or memory `by_memory`), then the other, then splits.
constexpr bool better(const layout_candidate& a, const layout_candidate& b,
                      bool by_memory) noexcept {
  const std::size_t a1 = by_memory ? a.memory : a.cost, b1 = by_memory ? b.memory : b.cost;
  const std::size_t a2 = by_memory ? a.cost : a.memory, b2 = by_memory ? b.cost : b.memory;
  if (a1 != b1) return a1 < b1;
  if (a2 != b2) return a2 < b2;
  return a.splits < b.splits;
}

// Whether `a` is no worse than `b` in what the search minimises and, under a budget (`front`:
// a Pareto front of bytes and memory), in both.
constexpr bool no_worse(const layout_candidate& a, const layout_candidate& b, bool by_memory,
                        bool front) noexcept {
  if (front) return a.cost <= b.cost && a.memory <= b.memory;
  return by_memory ? a.memory <= b.memory : a.cost <= b.cost;
}

// Adds `c` to the next step's candidates: dropped if another of its state is no worse; those it
// is no worse than leave. Past the room, the worst leaves.
constexpr void keep(std::array<layout_candidate, max_layout_candidates>& next, std::size_t& n,
                    const layout_candidate& c, std::size_t nodes, bool by_memory,
                    bool front) noexcept {
  for (std::size_t k = 0; k < n; ++k)
    if (same_state(next[k], c, nodes) && no_worse(next[k], c, by_memory, front) &&
        !better(c, next[k], by_memory))
      return;
  std::size_t w = 0;
  for (std::size_t k = 0; k < n; ++k)
    if (!(same_state(next[k], c, nodes) && no_worse(c, next[k], by_memory, front)))
      next[w++] = next[k];
  n = w;
  if (n < max_layout_candidates) {
    next[n++] = c;
    return;
  }
  std::size_t worst = 0;
  for (std::size_t k = 1; k < n; ++k)
    if (better(next[worst], next[k], by_memory)) worst = k;
  if (better(c, next[worst], by_memory)) next[worst] = c;
}

}  // namespace detail

// Starts the search: plans the model with every variable replicated to find its layers' weights.
constexpr layout_search start_layout_search(const distribution_value& base, const mesh_value& mesh,
                                            const model_desc& model, const auto_layout_options& o,
                                            bool by_memory = false) noexcept {
  layout_search s;
  s.by_memory = by_memory;
  s.base = base;
  s.base.rule_count = 0;
  s.mesh = mesh;
  s.model = model;
  s.options = o;
  const model_plan p = plan_model(s.base, mesh, model, o.global_batch);
  ++s.plans;
  if (!p.ok) {
    s.ok = false;
    s.error = p.error;
    return s;
  }
  s.replicated_bytes = detail::step_bytes(p);
  for (std::size_t v = 0; v < p.variable_count; ++v) {
    const variable_plan& var = p.variables[v];
    if (var.use == variable_use::weight && var.shape.rank >= 2) {
      s.weight_rank[var.op] = static_cast<std::uint8_t>(var.shape.rank);
      s.weight_path[var.op] = var.path;
    }
    if (var.use == variable_use::bias && var.shape.rank == 1) s.bias_path[var.op] = var.path;
  }
  s.candidates[0] = {};
  s.candidate_count = 1;
  return s;
}

// One step: layer `s.done` tries each choice from each candidate.
constexpr layout_search advance_layout_search(layout_search s) noexcept {
  if (!s.ok || s.done >= s.model.count) return s;
  const std::size_t i = s.done;
  const bool last = i + 1 == s.model.count;
  std::array<layer_choice, max_layer_choices> choices{};
  std::size_t choice_count = 1;
  if (s.weight_rank[i] >= 2)
    for (std::size_t a = 0; a < s.mesh.rank; ++a) {
      if (a == s.base.batch_axis || s.mesh.sizes[a] < 2) continue;
      choices[choice_count++] = {layer_choice::columns, static_cast<std::uint8_t>(a)};
      choices[choice_count++] = {layer_choice::rows, static_cast<std::uint8_t>(a)};
    }
  model_desc prefix = s.model;
  prefix.count = i + 1;
  if (!last) {
    prefix.loss = &no_loss;
    prefix.argmax_metrics = false;
  }
  std::array<layout_candidate, max_layout_candidates> next{};
  std::size_t n = 0;
  bool planned = false;
  for (std::size_t c = 0; c < s.candidate_count; ++c) {
    for (std::size_t k = 0; k < choice_count; ++k) {
      layout_candidate cand = s.candidates[c];
      cand.choices[i] = choices[k];
      bool room = true;
      const distribution_value d = detail::rules_of(s, cand.choices, i + 1, room);
      if (!room) continue;
      const model_plan p = plan_model(d, s.mesh, prefix, s.options.global_batch);
      ++s.plans;
      if (!p.ok) continue;
      cand.bytes = detail::step_bytes(p);
      if (cand.bytes == unknown_bytes) continue;
      cand.cost = detail::step_cost(cand.bytes, detail::step_flops(p, prefix), s.options);
      cand.memory = plan_memory(p, d, s.options.optimizer_slots).peak();
      cand.splits += choices[k].kind != layer_choice::replicated;
      planned = true;
      if (s.options.memory_budget && cand.memory > s.options.memory_budget) continue;
      for (std::size_t j = 0; j <= i + 1; ++j)
        cand.live[j] = detail::read_after(s.model, j, i) ? p.activations[j].layout : layout_value{};
      detail::keep(next, n, cand, i + 2, s.by_memory, s.options.memory_budget != 0);
    }
  }
  s.candidates = next;
  s.candidate_count = n;
  ++s.done;
  if (n == 0) {
    s.ok = false;
    s.over_budget = planned;
    s.error = s.over_budget ? "no choice of layouts fits the memory budget"
                            : "no choice of layouts can be planned";
  }
  return s;
}

// Ends the search: the best candidate, its distribution and memory plan.
constexpr layout_search finish_layout_search(layout_search s) noexcept {
  if (!s.ok) return s;
  std::size_t best = 0;
  for (std::size_t k = 1; k < s.candidate_count; ++k)
    if (detail::better(s.candidates[k], s.candidates[best], s.by_memory)) best = k;
  const layout_candidate& c = s.candidates[best];
  bool room = true;
  s.chosen = detail::rules_of(s, c.choices, s.model.count, room);
  s.choices = c.choices;
  const model_plan p = plan_model(s.chosen, s.mesh, s.model, s.options.global_batch);
  ++s.plans;
  s.bytes = detail::step_bytes(p);
  s.flops = detail::step_flops(p, s.model);
  s.cost = detail::step_cost(s.bytes, s.flops, s.options);
  s.memory = plan_memory(p, s.chosen, s.options.optimizer_slots);
  return s;
}

// Whether a search over `base` that found nothing within the budget is tried again with the state
// split over the batch axis (auto_layout_options::split_state).
constexpr bool splits_when_over_budget(const distribution_value& base, const mesh_value& mesh,
                                       const auto_layout_options& o) noexcept {
  return o.split_state && o.memory_budget != 0 && base.shard == shard_state::none &&
         mesh.sizes[base.batch_axis] > 1;
}
constexpr distribution_value with_split_state(distribution_value d) noexcept {
  d.shard = shard_state::gradients;
  return d;
}

// The whole search in one call (at run time, or at compile time for small models; a static
// auto_layout runs each layer's step as its own constant expression): over `base`, and when
// nothing fits the budget, again with the state split (splits_when_over_budget).
constexpr layout_search search_layouts(const distribution_value& base, const mesh_value& mesh,
                                       const model_desc& model,
                                       const auto_layout_options& o = {}) noexcept {
  auto search = [&](const distribution_value& b, const auto_layout_options& options,
                    bool by_memory) {
    layout_search s = start_layout_search(b, mesh, model, options, by_memory);
    while (s.ok && s.done < model.count) s = advance_layout_search(s);
    return finish_layout_search(s);
  };
  layout_search s = search(base, o, false);
  const bool split = s.over_budget && splits_when_over_budget(base, mesh, o);
  const distribution_value last = split ? with_split_state(base) : base;
  if (split) {
    const std::size_t plans = s.plans;
    s = search(last, o, false);
    s.plans += plans;
  }
  if (s.over_budget) {
    auto_layout_options unbounded = o;
    unbounded.memory_budget = 0;
    s.smallest_peak = search(last, unbounded, true).memory.peak();
  }
  return s;
}

// A model_parallel distribution as the Keras code that builds it: the DeviceMesh, the LayoutMap
// with one line per rule, and the ModelParallel distribution over the batch axis.
TESSEL_INLINE std::string layout_map_code(const distribution_value& d);

template <class Mesh, auto_layout_options Options, fixed_string BatchDimName, shard_state Shard>
struct model_parallel<auto_layout<Mesh, Options>, BatchDimName, Shard> {
  using mesh = Mesh;
  using layout_map = auto_layout<Mesh, Options>;
  static_assert(require<(mesh::template index_of<BatchDimName> >= 0),
                        diagnostic::batch_axis_not_in_mesh<BatchDimName, mesh>>);
  static constexpr name_string batch_dim_name{BatchDimName.view()};
  // Before a model resolves it: no rules (every variable replicated).
  static constexpr distribution_value value = [] {
    distribution_value v{distribution_value::model,
                         mesh::value,
                         static_cast<std::size_t>(mesh::template index_of<BatchDimName>),
                         {},
                         0};
    v.shard = Shard;
    return v;
  }();
};

namespace detail {

// The search when the program compiles, one constant expression per layer (each within the
// compiler's limit on a constant expression's operations).
template <class Dist, model_desc Model, bool ByMemory, std::size_t I>
struct layout_search_step {
  static constexpr layout_search value =
      advance_layout_search(layout_search_step<Dist, Model, ByMemory, I - 1>::value);
};
template <class Dist, model_desc Model, bool ByMemory>
struct layout_search_step<Dist, Model, ByMemory, 0> {
  static constexpr auto_layout_options options = [] {
    auto_layout_options o = Dist::layout_map::options;
    if (ByMemory) o.memory_budget = 0;
    return o;
  }();
  static constexpr layout_search value =
      start_layout_search(Dist::value, Dist::mesh::value, Model, options, ByMemory);
};
template <class Dist, model_desc Model, bool ByMemory>
inline constexpr layout_search searched_layouts =
    finish_layout_search(layout_search_step<Dist, Model, ByMemory, Model.count>::value);
template <class Dist, model_desc Model, bool OverBudget>
inline constexpr std::size_t smallest_peak = 0;
template <class Dist, model_desc Model>
inline constexpr std::size_t smallest_peak<Dist, Model, true> =
    searched_layouts<Dist, Model, true>.memory.peak();

// A chosen rule as a type.
template <class Mesh, class Search, std::size_t R,
          class D = std::make_index_sequence<Search::value.chosen.rules[R].layout.rank>>
struct chosen_rule;
template <class Mesh, class Search, std::size_t R, std::size_t... D>
struct chosen_rule<Mesh, Search, R, std::index_sequence<D...>> {
  static constexpr rule_value value = Search::value.chosen.rules[R];
  static constexpr key_string key = value.key;
  using type = rule<key, to_spec(Mesh::value, value.layout.dims[D])...>;
};
template <class Mesh, class Search, fixed_string B,
          class R = std::make_index_sequence<Search::value.chosen.rule_count>>
struct chosen_distribution;
template <class Mesh, class Search, fixed_string B, std::size_t... R>
struct chosen_distribution<Mesh, Search, B, std::index_sequence<R...>> {
  using type = model_parallel<layout_map<Mesh, typename chosen_rule<Mesh, Search, R>::type...>, B,
                              Search::value.chosen.shard>;
};

// The same distribution with its state split over the batch axis (the search's second try).
template <class Dist>
struct split_state_of;
template <class Mesh, auto_layout_options O, fixed_string B, shard_state S>
struct split_state_of<model_parallel<auto_layout<Mesh, O>, B, S>> {
  using type = model_parallel<auto_layout<Mesh, O>, B, shard_state::gradients>;
};
template <class Dist, model_desc Model>
struct auto_layout_of {
  // The distribution searched last: Dist, or, when nothing fits the budget and the options
  // allow, Dist with its state split (whose search is instantiated only then).
  using searched = std::conditional_t<searched_layouts<Dist, Model, false>.over_budget &&
                                          splits_when_over_budget(Dist::value, Dist::mesh::value,
                                                                  Dist::layout_map::options),
                                      typename split_state_of<Dist>::type, Dist>;
  static constexpr layout_search value = [] {
    layout_search s = searched_layouts<searched, Model, false>;
    if constexpr (!std::is_same_v<searched, Dist>)
      s.plans += searched_layouts<Dist, Model, false>.plans;
    s.smallest_peak =
        smallest_peak<searched, Model, searched_layouts<searched, Model, false>.over_budget>;
    return s;
  }();
  static constexpr key_string error_{value.error};
  static constexpr bool over_budget_ = value.over_budget;
  static constexpr std::size_t smallest_peak_ = value.smallest_peak;
  static_assert(require<value.ok || !over_budget_,
                        diagnostic::no_layout_fits_device_memory<
                            Dist::layout_map::options.memory_budget, smallest_peak_>>);
  static_assert(require<value.ok || over_budget_,
                        diagnostic::auto_layout_cannot_plan_the_model<error_>>);
};

// The distribution a model runs under: Dist, or for model_parallel<auto_layout<...>> the
// model_parallel<layout_map<...>> the search chose for `Model`.
template <class Dist, model_desc Model>
struct resolved_distribution {
  using type = Dist;
};
template <class Mesh, auto_layout_options O, fixed_string B, shard_state S, model_desc Model>
struct resolved_distribution<model_parallel<auto_layout<Mesh, O>, B, S>, Model> {
  using search = auto_layout_of<model_parallel<auto_layout<Mesh, O>, B, S>, Model>;
  using type = typename chosen_distribution<Mesh, search, B>::type;
};

}  // namespace detail

// The search's result for a model described as `Model` under `Dist` (model_parallel over an
// auto_layout), and the distribution type it chose.
template <class Dist, model_desc Model>
inline constexpr const layout_search& layout_search_v = detail::auto_layout_of<Dist, Model>::value;
template <class Dist, model_desc Model>
using resolved_distribution_t = typename detail::resolved_distribution<Dist, Model>::type;

#if TESSEL_DEFINITIONS
TESSEL_INLINE std::string layout_map_code(const distribution_value& d) {
  std::string shape, names;
  for (std::size_t a = 0; a < d.mesh.rank; ++a) {
    shape += (a ? ", " : "") + std::to_string(d.mesh.sizes[a]);
    names += (a ? ", \"" : "\"") + std::string(d.mesh.names[a].view()) + "\"";
  }
  std::string r = "device_mesh = keras.distribution.DeviceMesh(shape=(" + shape +
                  (d.mesh.rank == 1 ? ",)" : ")") + ", axis_names=[" + names + "])\n" +
                  "layout_map = keras.distribution.LayoutMap(device_mesh)\n";
  for (std::size_t i = 0; i < d.rule_count; ++i) {
    const layout_value& l = d.rules[i].layout;
    r += "layout_map[\"" + std::string(d.rules[i].key.view()) + "\"] = (";
    for (std::size_t k = 0; k < l.rank; ++k) {
      if (k) r += ", ";
      const dim_sharding& s = l.dims[k];
      if (s.count == 0) r += "None";
      if (s.count > 1) r += "(";
      for (std::size_t a = 0; a < s.count; ++a)
        r += (a ? ", \"" : "\"") + std::string(d.mesh.names[s.axes[a]].view()) + "\"";
      if (s.count > 1) r += ")";
    }
    r += l.rank == 1 ? ",)\n" : ")\n";
  }
  const std::string batch(d.mesh.names[d.batch_axis].view());
  r += "distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name=\"" +
       batch + "\")\n";
  if (d.splits_state())
    r += std::string("# tessel also splits each process's optimizer state") +
         (d.shard == shard_state::gradients ? " and gradients"
          : d.shard == shard_state::weights ? ", gradients and weights"
                                            : "") +
         " over \"" + batch +
         "\" (shard_state); Keras has no such option\n";
  return r;
}
#endif

}  // namespace tessel
