// The communication plan of a model: for a chain of layers under a distribution, every
// collective of a training step (forward and backward), its mesh axis and its bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "distribution.hpp"
#include "planner.hpp"
#include "propagation.hpp"
#include "shard.hpp"

namespace tessel {

// ---------------------------------------------------------------------------------------------
// What the planner needs to know of a layer. The core knows no layer type: each layer gives an
// op_desc whose `rule` plans it (its propagation rule and its collectives, as DTensor's per-op
// sharding strategies do), written against layer_planner below. Dense's rule lives in
// layers/plan/dense.hpp, flatten's, dropout's and the activations' in
// layers/plan/elementwise.hpp, add's in layers/plan/merge.hpp; a new layer brings its own.

// The loss as the planner sees it: squared error (element-wise), cross-entropy on logits (a
// log-softmax: row max and row sum) or on probabilities (Keras normalises each row by its sum).
enum class loss_kind : std::uint8_t {
  none,
  mean_squared_error,
  softmax_cross_entropy,
  crossentropy
};

class layer_planner;
struct op_desc;
// A layer type's planning rule: reads the layer's inputs from the planner, adds its variables
// and steps, and leaves its output's shape and layout (see layer_planner). op_desc points to a
// rule object, not to the function: GCC 12 refuses a function pointer inside a class-type
// template argument (static_model_plan takes the model_desc as one), but takes a pointer to a
// constexpr variable.
struct plan_rule {
  void (*plan)(layer_planner&, const op_desc&) = nullptr;
  std::string_view type{};  // the layer type, as `explain` may name it ("dense")
};
namespace detail {
constexpr void plan_without_rule(layer_planner& p, const op_desc&);
// What an op_desc that names no rule plans with: it fails the plan. A default object rather than
// a null pointer, because GCC 12's -fsanitize=undefined makes a test of a pointer to a constexpr
// object against null a non-constant expression, and the plan is computed at compile time.
inline constexpr plan_rule no_rule{&plan_without_rule, "unknown"};
}  // namespace detail

inline constexpr std::size_t max_op_inputs = 4;

struct op_desc {
  const plan_rule* rule = &detail::no_rule;
  name_string name{};
  // The layer's parameters, as its rule reads them (dense: sizes[0] the units, flags bit 0
  // use_bias, option the activation).
  std::array<std::size_t, 4> sizes{};
  std::uint32_t flags = 0;
  name_string option{"linear"};
  // The graph's edges: the nodes this layer reads, 0 being the model's input and i + 1 the
  // output of layer i. With none given the layer reads the one before it (a chain).
  std::array<std::uint8_t, max_op_inputs> inputs{};
  std::uint8_t input_count = 0;
};

inline constexpr std::size_t max_ops = 32;

// A model as the planner sees it: a graph of layers in topological order (each reads only the
// model's input or layers before it); the last layer's output is the model's output, where the
// loss applies. A chain is the case where each layer reads the one before.
struct model_desc {
  shape_value input{};  // per-sample shape (without the batch)
  std::array<op_desc, max_ops> ops{};
  std::size_t count = 0;
  loss_kind loss = loss_kind::none;
  std::size_t element_size = 4;
  // Whether the gradient of the model's input is needed (a model nested in another one).
  bool input_requires_grad = false;
  // Values (of element_size bytes) the loss step reduces: the loss sum, and whatever a model
  // reduces with it (tessel's models add one count per metric, as doubles).
  std::size_t loss_values = 1;
  // Whether a metric takes the arg-max of the output (the accuracies): over a class dimension
  // split across devices each row's arg-max is all_reduced (one 8-byte key per row).
  bool argmax_metrics = false;
};

template <std::size_t N>
constexpr model_desc describe_model(const shape_value& input, const std::array<op_desc, N>& ops,
                                    loss_kind loss = loss_kind::none) noexcept {
  static_assert(N <= max_ops, "tessel: at most 32 layers in one planned model");
  model_desc m{input, {}, N, loss};
  for (std::size_t i = 0; i < N; ++i) m.ops[i] = ops[i];
  return m;
}

// A graph's edges: `reads(add_op("sum"), {1, 3})` is a layer that reads the outputs of layers 0
// and 2.
constexpr op_desc reads(op_desc op, std::initializer_list<std::uint8_t> nodes) noexcept {
  op.input_count = 0;
  for (std::uint8_t n : nodes)
    if (op.input_count < max_op_inputs) op.inputs[op.input_count++] = n;
  return op;
}

// ---------------------------------------------------------------------------------------------
// The plan.

enum class phase : std::uint8_t { forward, backward };

// The tensor a planned step moves. The runtime executes steps by role (a kernel gradient's
// all_reduce becomes a gradient bucket, the loss's reduces the loss and metric sums); `explain`
// prints role_name.
enum class step_role : std::uint8_t {
  input,             // a layer's input, resharded to what the layer needs
  output,            // a layer's output, resharded to its laid-out layout
  input_gradient,    // the transposes of those, in backward
  output_gradient,
  kernel,            // a variable, resharded to the layout its layer computes with
  bias,
  kernel_gradient,   // a variable's gradient, reduced or resharded to the variable's layout
  bias_gradient,
  row_max,           // a softmax's or cross-entropy's reductions over a sharded class dimension
  row_sum,
  target_terms,      // a cross-entropy's per-row sums with the targets (two per row)
  row_argmax,        // the accuracies' arg-max of each row (an 8-byte key per row)
  loss,              // the loss sum (and metric counts), reduced over the batch axes
};
constexpr std::string_view role_name(step_role r) noexcept {
  switch (r) {
    case step_role::input: return "input";
    case step_role::output: return "output";
    case step_role::input_gradient: return "input gradient";
    case step_role::output_gradient: return "output gradient";
    case step_role::kernel: return "kernel";
    case step_role::bias: return "bias";
    case step_role::kernel_gradient: return "kernel gradient";
    case step_role::bias_gradient: return "bias gradient";
    case step_role::row_max: return "row max";
    case step_role::row_sum: return "row sum";
    case step_role::target_terms: return "target terms";
    case step_role::row_argmax: return "row arg-max";
    case step_role::loss: return "loss";
  }
  return "";
}
// A variable's gradient (a bucket of the data-parallel gradient reduction).
constexpr bool is_gradient_of_variable(step_role r) noexcept {
  return r == step_role::kernel_gradient || r == step_role::bias_gradient;
}

struct planned_step {
  phase when{};
  std::uint8_t op = 0;  // index of the layer; the loss is op == count
  step_role role{};
  reshard_step step{};
};

struct variable_plan {
  std::uint8_t op = 0;
  key_string path{};
  shape_value shape{};
  layout_value layout{};
  shape_value local{};
};

struct activation_plan {
  shape_value shape{};  // global, with the batch
  layout_value layout{};
  // Layers that read this node: past one, their input gradients are summed (fan-out), each
  // first returned to this layout by the reader's own backward steps.
  std::size_t uses = 0;
};

// The layouts a layer computes with, as its rule chose them, so that the runtime can execute the
// layer (the plan's steps leave out the free local slices between them). Dense: the input and
// the kernel as the product uses them, the product (partial where the contraction is split),
// the complete output, the bias as added to it. Other layers: the input as they use it, what
// they produce (`product`) and their output after a layout_map "<layer>/output" rule.
struct op_layouts {
  bool set = false;
  layout_value input{}, kernel{}, product{}, output{}, bias{};
};

inline constexpr std::size_t max_planned_steps = 160;
inline constexpr std::size_t max_variables = 2 * max_ops;

struct model_plan {
  bool ok = true;
  std::string_view error{};
  std::uint8_t error_op = 0;
  key_string error_path{};      // the variable or output path involved, when there is one
  key_string error_key{}, other_error_key{};  // the two layout_map keys a path matched

  mesh_value mesh{};
  std::size_t batch = 0;
  std::array<planned_step, max_planned_steps> steps{};
  std::size_t count = 0;
  std::array<variable_plan, max_variables> variables{};
  std::size_t variable_count = 0;
  std::array<activation_plan, max_ops + 1> activations{};  // [0] is the input
  std::size_t activation_count = 0;
  std::array<op_layouts, max_ops> layouts{};  // per layer

  [[nodiscard]] constexpr const planned_step* begin() const noexcept { return steps.data(); }
  [[nodiscard]] constexpr const planned_step* end() const noexcept { return steps.data() + count; }

  // Collectives that move data in `p` (slices are local and free), optionally of one kind and
  // over one mesh axis (-1: any).
  [[nodiscard]] constexpr std::size_t collectives(phase p, int kind = -1,
                                                  int axis = -1) const noexcept {
    std::size_t n = 0;
    for (const auto& s : *this)
      n += s.when == p && s.step.kind != collective::slice &&
           (kind < 0 || s.step.kind == static_cast<collective>(kind)) &&
           (axis < 0 || s.step.axis == axis);
    return n;
  }
  [[nodiscard]] constexpr std::size_t collectives(phase p, collective c,
                                                  int axis = -1) const noexcept {
    return collectives(p, static_cast<int>(c), axis);
  }
  [[nodiscard]] constexpr std::size_t wire_bytes(phase p) const noexcept {
    std::size_t n = 0;
    for (const auto& s : *this) {
      if (s.when != p) continue;
      if (s.step.wire_bytes == unknown_bytes) return unknown_bytes;
      n += s.step.wire_bytes;
    }
    return n;
  }
  [[nodiscard]] constexpr const variable_plan* variable(std::string_view path) const noexcept {
    for (std::size_t i = 0; i < variable_count; ++i)
      if (variables[i].path.view() == path) return &variables[i];
    return nullptr;
  }
};

constexpr key_string make_path(const name_string& layer, std::string_view leaf) noexcept {
  key_string k{};
  std::size_t n = 0;
  for (char c : layer.view()) k.data[n++] = c;
  k.data[n++] = '/';
  for (char c : leaf)
    if (n < max_key_length) k.data[n++] = c;
  return k;
}

// The planner: walks the model's graph in topological order and calls each layer's rule. A rule
// sees its inputs (input(k)), the layout it transforms (`layout()`/`shape()`, input 0's when it
// starts, the layer's output when it returns) and whether that tensor needs a gradient
// (`needs_grad()`), and adds the layer's variables and steps. The planner keeps the generic
// algebra a rule builds on: variable layouts from the layout_map, divisibility, resharding
// with its backward transpose, the loss, and the order of the backward groups.
class layer_planner {
 public:
  struct node {
    shape_value shape{};
    layout_value layout{};
    bool needs_grad = false;
  };

  constexpr layer_planner(const distribution_value& d, const mesh_value& mesh, const model_desc& m,
                          std::size_t batch) noexcept
      : dist_(d), model_(m) {
    plan_.mesh = mesh;
    plan_.batch = batch;
  }

  constexpr model_plan run() noexcept {
    node in{};
    in.shape.rank = model_.input.rank + 1;
    in.shape.extents[0] = plan_.batch;
    for (std::size_t i = 0; i < model_.input.rank; ++i) in.shape.extents[i + 1] = model_.input[i];
    in.layout = dist_.batch_layout(in.shape.rank);
    in.needs_grad = model_.input_requires_grad;
    if (!check_divides(in.layout, in.shape, {})) return plan_;
    nodes_[0] = in;
    record_activation(in.shape, in.layout);
    for (std::size_t i = 0; i < model_.count && plan_.ok; ++i) {
      op_ = static_cast<std::uint8_t>(i);
      backward_mark_ = bw_count_;
      const op_desc& op = model_.ops[i];
      if (!bind_inputs(op)) break;
      cur_ = nodes_[inputs_[0]];
      input_used_ = cur_.layout;
      output_set_ = false;
      op.rule->plan(*this, op);
      if (!plan_.ok) break;
      if (!output_set_) {
        // A layer without its own layouts computes locally on the input as resharded (if it
        // was) and its output is resharded to the layout_map's "<layer>/output": recorded for
        // the runtime as input, product (what the layer gives) and output.
        const layout_value produced = cur_.layout;
        constrain_output(op);
        plan_.layouts[op_] = {true, input_used_, {}, produced, cur_.layout, {}};
      }
      nodes_[i + 1] = cur_;
      record_activation(cur_.shape, cur_.layout);
      close_backward_group();
    }
    if (plan_.ok) {
      op_ = static_cast<std::uint8_t>(model_.count);
      backward_mark_ = bw_count_;
      loss(cur_.layout, cur_.shape);
      close_backward_group();
    }
    // Backward runs in reverse topological order: append the per-layer groups last layer first.
    for (std::size_t g = groups_; g-- > 0;)
      for (std::size_t k = group_begin_[g]; k < group_end_[g]; ++k) push(backward_[k]);
    return plan_;
  }

  // ---- what a rule reads ---------------------------------------------------------------------
  [[nodiscard]] constexpr std::size_t input_count() const noexcept { return input_count_; }
  [[nodiscard]] constexpr const node& input(std::size_t k = 0) const noexcept {
    return nodes_[inputs_[k]];
  }
  // The tensor the rule transforms: input 0 when the rule starts, its output when it returns.
  [[nodiscard]] constexpr layout_value& layout() noexcept { return cur_.layout; }
  [[nodiscard]] constexpr shape_value& shape() noexcept { return cur_.shape; }
  [[nodiscard]] constexpr bool& needs_grad() noexcept { return cur_.needs_grad; }
  [[nodiscard]] constexpr const mesh_value& mesh() const noexcept { return plan_.mesh; }
  [[nodiscard]] constexpr std::size_t element_size() const noexcept { return model_.element_size; }
  [[nodiscard]] constexpr bool ok() const noexcept { return plan_.ok; }

  // ---- what a rule does ----------------------------------------------------------------------
  constexpr void fail(std::string_view why, const key_string& path = {}) noexcept {
    if (!plan_.ok) return;
    plan_.ok = false;
    plan_.error = why;
    plan_.error_op = op_;
    plan_.error_path = path;
  }
  // The collectives of a resharding (slices are local and free) as steps of this layer:
  // forward steps in order, backward steps into the layer's backward group.
  constexpr void add(phase p, step_role role, const reshard_plan& r) noexcept {
    if (!r.ok) return fail("no resharding plan between these layouts");
    for (const auto& s : r) {
      if (s.kind == collective::slice) continue;
      const planned_step ps{p, op_, role, s};
      if (p == phase::forward) {
        push(ps);
      } else {
        if (bw_count_ == max_backward) return fail("the plan has too many steps");
        backward_[bw_count_++] = ps;
      }
    }
  }
  // Reshards `layout` (a tensor of `shape`) to `to`: the forward steps, and, when the tensor needs
  // its gradient, the transposed steps in backward.
  // An output's backward steps run first in the layer's backward (they bring the output's
  // gradient back to what the layer produced), so they go to the front of the layer's group.
  constexpr void reshard_forward(step_role role, layout_value& layout, const layout_value& to,
                                 const shape_value& shape, bool needs_grad) noexcept {
    add(phase::forward, role, plan_reshard(layout, to, plan_.mesh, shape, model_.element_size));
    if (needs_grad) {
      const std::size_t before = bw_count_;
      add(phase::backward,
          role == step_role::output ? step_role::output_gradient : step_role::input_gradient,
          plan_reshard_backward(layout, to.without_partial(), plan_.mesh, shape,
                                model_.element_size));
      if (role == step_role::output) rotate_to_group_front(before);
    }
    if (role == step_role::input && &layout == &cur_.layout) input_used_ = to;
    layout = to;
  }
  constexpr bool check_divides(const layout_value& l, const shape_value& s,
                               const key_string& path) noexcept {
    if (l.rank != s.rank) {
      fail("the layout's rank differs from the tensor's rank", path);
      return false;
    }
    for (std::size_t d = 0; d < l.rank; ++d)
      if (s.extents[d] != dynamic_extent &&
          s.extents[d] % plan_.mesh.size_of(l.dims[d].mask()) != 0) {
        fail(d == 0 && path.empty() ? "the global batch does not divide by the batch axis"
                                    : "a dimension does not divide by the size of its mesh axes",
             path);
        return false;
      }
    return true;
  }
  // The layout_map's layout for `path`, or nothing when no key matches; an ambiguous path
  // fails the plan, naming both keys. A copy, not a pointer into dist_.rules: under GCC 12's
  // -fsanitize=undefined, testing a pointer into a constexpr object against null is not a
  // constant expression.
  constexpr std::optional<layout_value> find_layout(const key_string& path) noexcept {
    const lookup_result f = dist_.find(path.view());
    if (f.kind == lookup_result::ambiguous) {
      fail("the path matches two layout_map keys", path);
      plan_.error_key = dist_.rules[f.index].key;
      plan_.other_error_key = dist_.rules[f.second].key;
    }
    if (f.kind == lookup_result::none_matched || f.kind == lookup_result::ambiguous)
      return std::nullopt;
    return dist_.rules[f.index].layout;
  }
  // A variable of this layer, "<layer>/<leaf>": its layout (the layout_map's, else
  // replicated), checked to divide, recorded with its local shard.
  constexpr layout_value add_variable(const name_string& layer, std::string_view leaf,
                                      const shape_value& shape) noexcept {
    const key_string path = make_path(layer, leaf);
    const layout_value l = find_layout(path).value_or(layout_value::replicated(shape.rank));
    if (plan_.ok && check_divides(l, shape, path)) {
      auto& v = plan_.variables[plan_.variable_count++];
      v = {op_, path, shape, l, shape};
      for (std::size_t d = 0; d < shape.rank; ++d)
        v.local.extents[d] = shape.extents[d] / plan_.mesh.size_of(l.dims[d].mask());
    }
    return l;
  }
  // The layouts this layer computes with (op_layouts), for the runtime.
  constexpr void record_layouts(const op_layouts& l) noexcept {
    plan_.layouts[op_] = l;
    plan_.layouts[op_].set = true;
  }
  // The rule applied the layout_map's "<layer>/output" itself (dense chooses its product's
  // layout knowing it); otherwise the planner reshards the rule's output to it.
  constexpr void output_applied() noexcept { output_set_ = true; }
  // The all_reduce of `values` per-row values (a softmax's row max or row sum) of `bytes` each
  // (the model's element size if 0) over `axes`, the mesh axes a row's elements are split over:
  // one step per axis, in the order of the mesh.
  constexpr void row_reduction(std::uint32_t axes, const layout_value& layout,
                               const shape_value& shape, phase p, step_role role,
                               std::size_t values = 1, std::size_t bytes = 0) noexcept {
    if (!axes) return;
    layout_value rows = layout_value::replicated(2);
    rows.dims[0] = layout.dims[0];
    rows.partial = axes;
    const shape_value rs{shape.extents[0], values};
    add(p, role,
        plan_reshard(rows, rows.without_partial(), plan_.mesh, rs,
                     bytes ? bytes : model_.element_size));
  }

 private:
  static constexpr std::size_t max_backward = max_planned_steps;

  // The nodes `op` reads, each before it (topological order), each counted as a use.
  constexpr bool bind_inputs(const op_desc& op) noexcept {
    input_count_ = op.input_count ? op.input_count : 1;
    if (input_count_ > max_op_inputs) {
      fail("a layer reads more than 4 inputs");
      return false;
    }
    for (std::size_t k = 0; k < input_count_; ++k) {
      inputs_[k] = op.input_count ? op.inputs[k] : op_;
      if (inputs_[k] > op_) {
        fail("reads a later layer; list the layers in topological order");
        return false;
      }
      ++plan_.activations[inputs_[k]].uses;
    }
    return true;
  }
  // Moves the backward steps added since `from` to the front of the current layer's group.
  constexpr void rotate_to_group_front(std::size_t from) noexcept {
    for (std::size_t k = from; k < bw_count_; ++k) {
      const planned_step moved = backward_[k];
      for (std::size_t j = k; j > backward_mark_ + (k - from); --j) backward_[j] = backward_[j - 1];
      backward_[backward_mark_ + (k - from)] = moved;
    }
  }
  constexpr void push(const planned_step& s) noexcept {
    if (plan_.count == max_planned_steps) return fail("the plan has too many steps");
    plan_.steps[plan_.count++] = s;
  }
  // Ends the current layer's group of backward steps (kept in execution order within the
  // layer); run() appends the groups last layer first.
  constexpr void close_backward_group() noexcept {
    group_begin_[groups_] = backward_mark_;
    group_end_[groups_] = bw_count_;
    ++groups_;
  }
  constexpr void record_activation(const shape_value& s, const layout_value& l) noexcept {
    plan_.activations[plan_.activation_count++] = {s, l, 0};
  }
  constexpr void constrain_output(const op_desc& op) noexcept {
    const key_string path = make_path(op.name, "output");
    const std::optional<layout_value> forced = find_layout(path);
    if (forced && check_divides(*forced, cur_.shape, path))
      reshard_forward(step_role::output, cur_.layout, *forced, cur_.shape, cur_.needs_grad);
  }

  // The loss is a mean over the global batch: the local sum is all_reduced over every axis the
  // predictions are sharded over (one float). A cross-entropy over a sharded class dimension
  // (Megatron's vocab-parallel cross-entropy) first completes each row: on logits the row max,
  // the row sum of exponentials and the target terms (sum(t * z), sum(t)); on probabilities the
  // row sum and the target terms (the loss and the gradient's correction). The accuracies'
  // arg-max is reduced as one key per row.
  constexpr void loss(const layout_value& layout, const shape_value& shape) noexcept {
    if (model_.loss == loss_kind::none) return;
    // The local sum runs over the per-sample losses (cross-entropy: one per row, complete after
    // the row reductions) or over every local element (squared error).
    std::uint32_t summed_over = layout.sharded_axes();
    std::uint32_t class_axes = 0;
    if (shape.rank == 2) class_axes = layout.dims[1].mask();
    if (model_.loss == loss_kind::softmax_cross_entropy ||
        model_.loss == loss_kind::crossentropy) {
      layout_value labels = layout_value::replicated(1);
      labels.dims[0] = layout.dims[0];
      const auto r = propagate_softmax_cross_entropy(layout, labels);
      if (!r.ok) return fail(r.error);
      if (model_.loss == loss_kind::softmax_cross_entropy)
        row_reduction(r.reduce_axes, layout, shape, phase::forward, step_role::row_max);
      row_reduction(r.reduce_axes, layout, shape, phase::forward, step_role::row_sum);
      row_reduction(r.reduce_axes, layout, shape, phase::forward, step_role::target_terms, 2);
      summed_over = r.out.sharded_axes();
    }
    if (model_.argmax_metrics)
      row_reduction(class_axes, layout, shape, phase::forward, step_role::row_argmax, 1, 8);
    layout_value scalar = layout_value::replicated(1);
    scalar.partial = summed_over;
    add(phase::forward, step_role::loss,
        plan_reshard(scalar, scalar.without_partial(), plan_.mesh,
                     shape_value{model_.loss_values}, model_.element_size));
  }

  const distribution_value& dist_;
  const model_desc& model_;
  model_plan plan_{};
  std::uint8_t op_ = 0;
  std::array<node, max_ops + 1> nodes_{};
  node cur_{};
  std::array<std::uint8_t, max_op_inputs> inputs_{};
  std::size_t input_count_ = 0;
  bool output_set_ = false;
  layout_value input_used_{};
  std::array<planned_step, max_backward> backward_{};
  std::size_t bw_count_ = 0, backward_mark_ = 0, groups_ = 0;
  std::array<std::size_t, max_ops + 1> group_begin_{}, group_end_{};
};

constexpr void detail::plan_without_rule(layer_planner& p, const op_desc&) {
  p.fail("the layer has no planning rule");
}

// Plans a training step of `model` under `dist` on `mesh` (concrete sizes) for a global batch.
constexpr model_plan plan_model(const distribution_value& dist, const mesh_value& mesh,
                                const model_desc& model, std::size_t global_batch) noexcept {
  return layer_planner(dist, mesh, model, global_batch).run();
}

// The plan computed when the program compiles (every mesh axis static). A plan that fails names
// the layer and, for an ambiguous path, the path and both keys.
template <class Dist, model_desc Model, std::size_t GlobalBatch>
struct static_model_plan {
  static_assert(Dist::mesh::is_static,
                "tessel::static_model_plan: the mesh must be static; use plan_model at run time");
  static constexpr model_plan value =
      plan_model(Dist::value, Dist::mesh::value, Model, GlobalBatch);

 private:
  // Copied into plain members first: gcc 12 crashes on subobjects of `value` used directly as
  // template arguments.
  static constexpr bool ambiguous_ = !value.ok && !value.error_key.empty();
  static constexpr key_string path_ = value.error_path;
  static constexpr key_string first_key_ = value.error_key;
  static constexpr key_string second_key_ = value.other_error_key;
  static constexpr name_string layer_ = Model.ops[value.error_op].name;
  static constexpr key_string reason_{value.error};
  static_assert(require<!ambiguous_, diagnostic::path_matches_two_layout_map_keys<
                                         path_, first_key_, second_key_>>);
  static_assert(require<value.ok || ambiguous_,
                        diagnostic::layer_cannot_be_planned<layer_, reason_>>);
};

template <class Dist, model_desc Model, std::size_t GlobalBatch>
inline constexpr const model_plan& model_plan_v = static_model_plan<Dist, Model, GlobalBatch>::value;

// ---------------------------------------------------------------------------------------------
// Text output.

namespace detail {
inline std::string bytes_text(std::size_t b) {
  if (b == unknown_bytes) return "?";
  if (b < 10 * 1024) return std::to_string(b) + " B";
  if (b < 10 * 1024 * 1024) return std::to_string((b + 512) / 1024) + " KiB";
  return std::to_string((b + 512 * 1024) / (1024 * 1024)) + " MiB";
}
inline std::string pad(std::string s, std::size_t w) {
  // Pad by displayed characters: every byte that does not start a UTF-8 sequence continues one.
  std::size_t shown = 0;
  for (unsigned char c : s) shown += (c & 0xC0) != 0x80;
  if (shown < w) s.append(w - shown, ' ');
  return s;
}
}  // namespace detail

// The plan as text: variables with their layouts and shards, each layer's output layout, and
// every collective of a training step with its mesh axis and bytes.
inline std::string explain(const model_plan& p, const model_desc& m) {
  using detail::pad;
  std::string s;
  s += "mesh " + to_string(p.mesh) + " (" + std::to_string(p.mesh.size()) + " devices), global batch " +
       std::to_string(p.batch) + "\n";
  if (!p.ok) {
    // The batch split is checked on the model's input, before any layer.
    const bool input = p.error.starts_with("the global batch");
    s += (input ? std::string("cannot split the input batch")
                : "cannot plan layer '" + std::string(m.ops[p.error_op].name.view()) + "'") +
         ": " + std::string(p.error);
    if (!p.error_path.empty()) s += " (path '" + std::string(p.error_path.view()) + "'";
    if (!p.error_key.empty())
      s += ", keys '" + std::string(p.error_key.view()) + "' and '" +
           std::string(p.other_error_key.view()) + "'";
    if (!p.error_path.empty()) s += ")";
    return s + "\n";
  }
  s += "  " + pad("variable", 14) + pad("shape", 14) + pad("layout", 26) + "local shard\n";
  for (std::size_t i = 0; i < p.variable_count; ++i) {
    const auto& v = p.variables[i];
    s += "  " + pad(std::string(v.path.view()), 14) + pad(to_string(v.shape), 14) +
         pad(to_string(v.layout, p.mesh), 26) + to_string(v.local) + "\n";
  }
  s += "  " + pad("layer", 14) + pad("output shape", 18) + "output layout\n";
  for (std::size_t i = 0; i < p.activation_count; ++i) {
    const auto& a = p.activations[i];
    const std::string layer = i == 0 ? "input" : std::string(m.ops[i - 1].name.view());
    s += "  " + pad(layer, 14) + pad(to_string(a.shape), 18) + to_string(a.layout, p.mesh);
    if (a.uses > 1) s += "  (read by " + std::to_string(a.uses) + " layers: gradients summed)";
    s += "\n";
  }
  for (phase ph : {phase::forward, phase::backward}) {
    s += ph == phase::forward ? "  forward:\n" : "  backward:\n";
    std::size_t n = 0;
    for (const auto& st : p) {
      if (st.when != ph) continue;
      ++n;
      const std::string layer =
          st.op < m.count ? std::string(m.ops[st.op].name.view()) : std::string("loss");
      s += "    " + pad(layer, 10) + pad(std::string(role_name(st.role)), 18) +
           pad(to_string(st.step, p.mesh), 30) + detail::bytes_text(st.step.bytes) + " buffer, " +
           detail::bytes_text(st.step.wire_bytes) + " sent per device\n";
    }
    if (n == 0) s += "    (no collectives)\n";
  }
  s += "  per step: " + std::to_string(p.collectives(phase::forward)) + " forward + " +
       std::to_string(p.collectives(phase::backward)) + " backward collectives, " +
       detail::bytes_text(p.wire_bytes(phase::forward)) + " + " +
       detail::bytes_text(p.wire_bytes(phase::backward)) + " sent per device\n";
  return s;
}

}  // namespace tessel
