// executor: runs a model's graph of ops (layers/op.hpp), forward in topological order and
// backward in reverse, on this process's blocks. It does every reshard around an op that the
// plan chose: each operand and variable to the layout the op computes with, the result to the
// output's layout (and the op's epilogue after it), backward the output's gradient to the
// result's layout, each variable's gradient to the variable's layout (left partial where a
// gradient bucket reduces it), each operand's gradient back to its input's layout. Gradients
// that fan in to one tensor (a tensor read by several ops) are summed. After an op's backward
// its variables' gradients are final, and `on_op` hands them to the distribution (the gradient
// buckets, which reduce them while the rest of the backward pass runs).
//
// Without a plan (one device, data parallelism) nothing is resharded and each op runs on its
// operands as they come, fusing its epilogue (a dense layer's bias and activation) into its GEMM.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/model_plan.hpp"
#include "../layers/layer.hpp"
#include "../layers/op.hpp"
#if TESSEL_EXTERN_TEMPLATES && TESSEL_DEFAULT_LIMITS
// The declarations at the end name members of executor_core<backend::host>, which instantiates
// the class: the backend must be complete, not only declared as core/compilation.hpp declares it.
#include "../backend/host.hpp"
#endif

namespace tessel {

// A model's graph: op i reads `inputs[i][0 .. count[i])`, node 0 being the model's input and node
// j + 1 the output of op j (each op reads only nodes before it); op i has variables when
// `has_variables[i]`. The last op's output is the model's output.
template <std::size_t N>
struct graph_edges {
  std::array<std::array<std::uint8_t, max_op_inputs>, N> inputs{};
  std::array<std::uint8_t, N> count{};
  std::array<bool, N> has_variables{};

  // A chain: op i reads op i - 1's output (op 0 the input).
  static constexpr graph_edges chain(const std::array<bool, N>& has) {
    graph_edges g;
    for (std::size_t i = 0; i < N; ++i) {
      g.inputs[i][0] = static_cast<std::uint8_t>(i);
      g.count[i] = 1;
      g.has_variables[i] = has[i];
    }
    return g;
  }
  // Whether op i reads op i - 1's output only (op 0 the input), for every op.
  constexpr bool is_chain() const {
    for (std::size_t i = 0; i < N; ++i)
      if (count[i] != 1 || inputs[i][0] != i) return false;
    return true;
  }
  // Whether backward must reach node n: some op that made it, or one before, has variables.
  constexpr std::array<bool, N + 1> needs_gradient() const {
    std::array<bool, N + 1> up{};
    for (std::size_t i = 0; i < N; ++i) {
      bool u = has_variables[i];
      for (std::size_t k = 0; k < count[i]; ++k) u = u || up[inputs[i][k]];
      up[i + 1] = u;
    }
    return up;
  }
  // How many ops read node n (past one, their gradients for it are summed).
  constexpr std::array<std::size_t, N + 1> readers() const {
    std::array<std::size_t, N + 1> r{};
    for (std::size_t i = 0; i < N; ++i)
      for (std::size_t k = 0; k < count[i]; ++k) ++r[inputs[i][k]];
    return r;
  }
};

// What an executor does around every op, written once per backend and mesh rather than once per
// op and model (a program compiles the reshards around its ops once): the graph as run-time
// data, each op's arguments, reshards and gradients. (Its slots' arrays have the planner's
// sizes: its name carries the limits, as the planner's compiled functions' do.)
inline namespace TESSEL_LIMITS_NAMESPACE {
template <class B>
class executor_core {
 public:
  using matrix = typename B::matrix;
  using tensor = basic_dtensor<B>;
  // Called after an op's backward with its variables, whose gradients are then final; and, when
  // the caller asks, before it (`before`: the gradients' memory is the caller's to provide).
  struct variables_ready {
    void* target = nullptr;
    void (*call)(void*, std::span<variable<B>* const>) = nullptr;
    void (*before)(void*, std::span<variable<B>* const>) = nullptr;
    void operator()(std::span<variable<B>* const> v) const { call(target, v); }
    void starting(std::span<variable<B>* const> v) const {
      if (before != nullptr) before(target, v);
    }
  };

  // Called before each op's forward that has variables, with them (a state split over the
  // batch axis gathers the weights there, shard_state::weights); none by default.
  void set_before_forward(variables_ready r) noexcept { before_forward_ = r; }

  // The layouts the plan chose for each op, and this device's mesh coordinates (under a
  // distribution that reshards); none: every op runs on its blocks as they come.
  template <class Resharder>
  void set_plan(const std::array<op_layouts, max_ops>* layouts, const Resharder& reshard) {
    planned_ = layouts != nullptr;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      slot& s = slots_[i];
      s.args = op_args<B>{};
      s.args.operand_count = count_[i];
      s.args.wants_operand_gradients = 0;
      for (std::size_t k = 0; k < count_[i]; ++k)
        if (needs_gradient_[inputs_[i][k]]) s.args.wants_operand_gradients |= 1u << k;
      if (!planned_) continue;
      s.layouts = (*layouts)[i];
      s.args.layouts = &s.layouts;
      s.args.whole = s.layouts.result == s.layouts.output;
      s.args.adds_constants = true;
      for (std::size_t a = 0; a < max_mesh_rank; ++a)
        if ((s.layouts.result.partial >> a) & 1u)
          s.args.adds_constants = s.args.adds_constants && reshard.coordinates()[a] == 0;
      // A variable's gradient computed where nothing moves it after is written in place.
      for (std::size_t v = 0; v < vars_[i].size() && v < max_op_variables; ++v) {
        const variable<B>& var = *vars_[i][v];
        const shape_value& g = var.value.global_shape();
        bool moves = s.layouts.variable_gradients[v].rank != g.rank;
        for (const op_edge& e : variable_gradient_edges(s.layouts, var.value.layout(), v))
          moves = moves || !plan_reshard(e.from, e.to, reshard.mesh(), g).empty();
        s.in_place[v] = !moves;
      }
    }
  }

 protected:
  // The graph: op i reads nodes inputs[i][0 .. count[i]); `needs_gradient[n]`, `readers[n]` of
  // node n (graph_edges).
  template <std::size_t N>
  explicit executor_core(const graph_edges<N>& g)
      : executor_core(g.count, g.inputs, g.needs_gradient(), g.readers()) {}
  // The graph as spans: compiled once per backend (tessel::tessel for the host), not per model.
  executor_core(std::span<const std::uint8_t> count,
                std::span<const std::array<std::uint8_t, max_op_inputs>> inputs,
                std::span<const bool> needs_gradient, std::span<const std::size_t> readers);

 public:
  executor_core(const executor_core&) = default;
  executor_core(executor_core&&) noexcept = default;
  executor_core& operator=(const executor_core&) = default;
  executor_core& operator=(executor_core&&) noexcept = default;
  ~executor_core();

 protected:
  struct slot {
    op_args<B> args;
    op_layouts layouts{};
    std::array<bool, max_op_variables> in_place{};
    std::array<tensor, max_op_inputs> operands;
    std::array<tensor, max_op_variables> variables;
    tensor output, result_gradient;
    std::array<tensor, max_op_variables> variable_gradients;
    std::array<matrix, max_op_inputs> operand_stores, gradient_used_stores, gradient_in_stores;
    std::array<matrix, max_op_variables> variable_stores, gradient_stores, gradient_var_stores,
        gradient_copy_stores;
    matrix output_store, result_gradient_store;
  };

  // `t` along the edge `e` of op i (model_plan.hpp's edges, whose collectives the planner listed
  // as the op's steps), into `store`. A tensor that arrives in another layout than the edge's is
  // a fault of the op, not of the program that uses it.
  template <class Resharder>
  static tensor follow(Resharder& reshard, std::size_t i, const tensor& t, const op_edge& e,
                       matrix& store, const char* label) {
    if (!(t.layout() == e.from))
      throw std::logic_error("tessel: layer " + std::to_string(i) + "'s " + label +
                             " arrives laid out as " + to_string(t.layout(), reshard.mesh()) +
                             ", where the plan has " + to_string(e.from, reshard.mesh()) +
                             ": the layer's op and its planning rule disagree");
    return reshard(t, e.to, store, label);
  }

  // Op i's operands and variables, resharded to the layouts it computes with (or as they are).
  template <class Resharder>
  void bring_arguments(std::size_t i, Resharder& reshard) {
    slot& s = slots_[i];
    for (std::size_t k = 0; k < count_[i]; ++k) {
      const tensor& in = *nodes_[inputs_[i][k]];
      if (!planned_) {
        s.args.operands[k] = &in;
        continue;
      }
      s.operands[k] = follow(reshard, i, in, operand_edge(s.layouts, in.layout(), k),
                             s.operand_stores[k], "operand");
      s.args.operands[k] = &s.operands[k];
    }
    for (std::size_t v = 0; v < vars_[i].size() && v < max_op_variables; ++v) {
      const tensor& value = vars_[i][v]->value;
      if (!planned_) {
        s.args.variables[v] = &value;
        continue;
      }
      s.variables[v] = follow(reshard, i, value, variable_edge(s.layouts, value.layout(), v),
                              s.variable_stores[v], "variable");
      s.args.variables[v] = &s.variables[v];
    }
  }

  // Where op i's backward writes its variables' gradients.
  template <class Resharder>
  op_grads<B> gradient_targets(std::size_t i, Resharder& reshard) {
    slot& s = slots_[i];
    op_grads<B> g;
    const std::size_t nv = std::min(vars_[i].size(), max_op_variables);
    for (std::size_t v = 0; v < nv; ++v) {
      variable<B>& var = *vars_[i][v];
      if (!var.trainable) continue;
      g.wanted |= static_cast<std::uint8_t>(1u << v);
      if (!planned_ || var.reduced_in_bucket || s.in_place[v]) {
        g.variables[v] = var.gradient;
        continue;
      }
      s.variable_gradients[v] =
          reshard.make(var.value.global_shape(), s.layouts.variable_gradients[v],
                       s.gradient_stores[v], "variable_gradient");
      g.variables[v] = s.variable_gradients[v].local();
    }
    return g;
  }

  // After op i's backward: its variables' gradients to their layouts and handed on, its
  // operands' gradients to their inputs' layouts and summed into them.
  template <class Resharder>
  void after_backward(std::size_t i, const op_gradients<B>& d, Resharder& reshard,
                      const variables_ready& on_op) {
    slot& s = slots_[i];
    const std::size_t nv = std::min(vars_[i].size(), max_op_variables);
    for (std::size_t v = 0; planned_ && v < nv; ++v) {
      variable<B>& var = *vars_[i][v];
      if (!var.trainable || var.reduced_in_bucket || s.in_place[v]) continue;
      // Through the layout the op used the variable in (when the op says so), to the variable's.
      tensor t = s.variable_gradients[v];
      const op_edges edges = variable_gradient_edges(s.layouts, var.value.layout(), v);
      if (edges.count == 2)
        t = follow(reshard, i, t, edges.edge[0], s.gradient_var_stores[v],
                   "variable_gradient_used");
      B::copy(follow(reshard, i, t, edges.edge[edges.count - 1], s.gradient_copy_stores[v],
                     "variable_gradient")
                  .local(),
              var.gradient);
    }
    on_op(std::span<variable<B>* const>(vars_[i]));
    for (std::size_t k = 0; k < count_[i]; ++k) {
      const std::size_t n = inputs_[i][k];
      // An op that gives no gradient for an operand leaves its tensor default (rank 0). Its
      // storage cannot tell: a process that holds no rows of the batch gets a gradient of 0 rows,
      // whose storage may be null, and must still run the backward of the ops before (their
      // collectives and gradient buckets) as the processes that hold rows do.
      if (!((s.args.wants_operand_gradients >> k) & 1u) || d.operands[k].global_shape().rank == 0)
        continue;
      tensor dx = d.operands[k];
      if (planned_) {
        const op_edges edges = operand_gradient_edges(s.layouts, nodes_[n]->layout(), k);
        dx = follow(reshard, i, dx, edges.edge[0], s.gradient_used_stores[k],
                    "operand_gradient_used");
        dx = follow(reshard, i, dx, edges.edge[1], s.gradient_in_stores[k], "operand_gradient");
      }
      // The same memory given to two operands (an add passes its gradient to each): every
      // copy but the first gets its own, since a reader may change its gradient in place.
      for (std::size_t j = 0; j < k; ++j)
        if (d.operands[j].local().data() == dx.local().data()) {
          matrix own = sized<B>(s.gradient_in_stores[k], B::rows(dx.local()), B::cols(dx.local()),
                                "operand_gradient");
          B::copy(dx.local(), own);
          dx = dx.like(own);
          break;
        }
      accumulate(n, dx);
    }
  }

  // The gradient of node n: the first contribution as it is, the next ones summed into it.
  void accumulate(std::size_t n, const tensor& g) {
    if (!grad_set_[n]) {
      grads_[n] = g;
      grad_set_[n] = true;
      return;
    }
    if (readers_[n] > 1 && !own_[n]) {
      // The first contribution may be another op's buffer: sum into a buffer of the node's own.
      matrix own = sized<B>(sum_stores_[n], B::rows(g.local()), B::cols(g.local()), "gradient_sum");
      B::add(grads_[n].local(), g.local(), own);
      grads_[n] = grads_[n].like(own);
      own_[n] = true;
      return;
    }
    B::add(grads_[n].local(), g.local(), grads_[n].local());
  }

  // Starts a backward pass from the gradient of the output (node N).
  void start_backward(const matrix& dy) {
    std::fill(grad_set_.begin(), grad_set_.end(), false);
    std::fill(own_.begin(), own_.end(), false);
    const std::size_t n = grads_.size() - 1;
    grads_[n] = nodes_[n]->like(dy);
    grad_set_[n] = true;
  }

  std::vector<std::uint8_t> count_;
  std::vector<std::array<std::uint8_t, max_op_inputs>> inputs_;
  std::vector<bool> needs_gradient_;
  std::vector<std::size_t> readers_;
  bool planned_ = false;
  std::vector<slot> slots_;
  std::vector<std::vector<variable<B>*>> vars_;
  std::vector<const tensor*> nodes_;
  std::vector<tensor> grads_;
  std::vector<bool> grad_set_, own_;
  std::vector<matrix> sum_stores_;
  variables_ready before_forward_{};
};
}  // namespace TESSEL_LIMITS_NAMESPACE

template <class B>
executor_core<B>::executor_core(std::span<const std::uint8_t> count,
                                std::span<const std::array<std::uint8_t, max_op_inputs>> inputs,
                                std::span<const bool> needs_gradient,
                                std::span<const std::size_t> readers)
    : count_(count.begin(), count.end()),
      inputs_(inputs.begin(), inputs.end()),
      needs_gradient_(needs_gradient.begin(), needs_gradient.end()),
      readers_(readers.begin(), readers.end()),
      slots_(count.size()),
      vars_(count.size()),
      nodes_(count.size() + 1),
      grads_(count.size() + 1),
      grad_set_(count.size() + 1),
      own_(count.size() + 1),
      sum_stores_(count.size() + 1) {}

template <class B>
executor_core<B>::~executor_core() {}

// Compiled once for the host backend at the default limits, in tessel::tessel.
#define TESSEL_EXECUTOR_TEMPLATES(prefix, B)                                                   \
  prefix template executor_core<B>::executor_core(                                             \
      std::span<const std::uint8_t>, std::span<const std::array<std::uint8_t, max_op_inputs>>, \
      std::span<const bool>, std::span<const std::size_t>);                                    \
  prefix template executor_core<B>::~executor_core();
#if TESSEL_EXTERN_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_EXECUTOR_TEMPLATES(extern, backend::host)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_EXECUTOR_TEMPLATES(extern, backend::cuda)
#endif

// A model's executor: its ops' own parts, each instantiated for its op, around the core.
template <class B, graph_edges Graph, class... Ops>
class executor : public executor_core<B> {
  using core = executor_core<B>;
  static constexpr std::size_t N = sizeof...(Ops);
  static constexpr auto needs_gradient = Graph.needs_gradient();
  using core::grad_set_;
  using core::grads_;
  using core::nodes_;
  using core::planned_;
  using core::slots_;
  using core::vars_;

 public:
  using matrix = typename B::matrix;
  using tensor = basic_dtensor<B>;
  using ops_tuple = std::tuple<typename Ops::template runtime<B>...>;

  executor() : core(Graph) {}

  // Each op's variables, in the order its rule lists them (the op's own).
  void bind(const ops_tuple& ops) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((vars_[I].assign(op_variables<B>(std::get<I>(ops)).begin(),
                        op_variables<B>(std::get<I>(ops)).end())),
       ...);
    }
    (std::make_index_sequence<N>{});
  }

  // Forward from the model's input (this device's block of the batch); returns the output.
  template <class Resharder>
  const tensor& forward(ops_tuple& ops, const tensor& input, const pass_context& c,
                        Resharder& reshard) {
    nodes_[0] = &input;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (forward_op<I>(std::get<I>(ops), c, reshard), ...);
    }
    (std::make_index_sequence<N>{});
    return *nodes_[N];
  }

  // Backward from dy, the gradient of this device's block of the output (the op that made the
  // output may change it in place). After each op, `on_op(variables)` receives its variables,
  // whose gradients are then final; before it, `on_op.before_layer(variables)`, if it has one
  // (the gradient buckets give the gradients their memory there, under a split of the gradients).
  template <class Resharder, class OnOp>
  void backward(ops_tuple& ops, const matrix& dy, const pass_context& c, Resharder& reshard,
                OnOp&& on_op) {
    using F = std::remove_reference_t<OnOp>;
    typename core::variables_ready ready{
        const_cast<void*>(static_cast<const void*>(&on_op)),
        [](void* f, std::span<variable<B>* const> v) { (*static_cast<F*>(f))(v); }};
    if constexpr (requires(F& f, std::span<variable<B>* const> v) { f.before_layer(v); })
      ready.before = [](void* f, std::span<variable<B>* const> v) {
        static_cast<F*>(f)->before_layer(v);
      };
    this->start_backward(dy);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (backward_op<N - 1 - I>(std::get<N - 1 - I>(ops), c, reshard, ready), ...);
    }
    (std::make_index_sequence<N>{});
  }

 private:
  template <std::size_t I, class Op, class Resharder>
  void forward_op(Op& op, const pass_context& c, Resharder& reshard) {
    auto& s = slots_[I];
    if (this->before_forward_.call != nullptr && !vars_[I].empty())
      this->before_forward_(std::span<variable<B>* const>(vars_[I]));
    this->bring_arguments(I, reshard);
    const tensor& result = op.forward(s.args, c, reshard);
    if (s.args.whole) {
      nodes_[I + 1] = &result;
      return;
    }
    s.output = this->follow(reshard, I, result, output_edge(s.layouts), s.output_store, "output");
    if constexpr (requires { op.finish(s.output, c, reshard); }) op.finish(s.output, c, reshard);
    nodes_[I + 1] = &s.output;
  }

  template <std::size_t I, class Op, class Resharder>
  void backward_op(Op& op, const pass_context& c, Resharder& reshard,
                   const typename core::variables_ready& on_op) {
    if constexpr (needs_gradient[I + 1]) {
      auto& s = slots_[I];
      if (!grad_set_[I + 1]) return;  // nothing downstream reads this op's output
      matrix dy = grads_[I + 1].local();
      if (planned_ && !s.args.whole) {
        if constexpr (requires { op.finish_backward(s.output, dy, c, reshard); })
          op.finish_backward(s.output, dy, c, reshard);
        s.result_gradient = this->follow(reshard, I, s.output.like(dy),
                                         output_gradient_edge(s.layouts),
                                         s.result_gradient_store, "output_gradient");
        dy = s.result_gradient.local();
      }
      on_op.starting(std::span<variable<B>* const>(this->vars_[I]));
      const op_grads<B> g = this->gradient_targets(I, reshard);
      const op_gradients<B> d = op.backward(s.args, dy, g, c, reshard);
      this->after_backward(I, d, reshard, on_op);
    } else {
      (void)op, (void)c, (void)reshard, (void)on_op;
    }
  }
};

}  // namespace tessel
