// layer_planner: the planner of a model's training step. It walks the model's graph in
// topological order and calls each layer's rule (the layer's own sharding rule, as DTensor's
// per-op strategies), which reads its inputs' layouts, adds its variables, records the layouts
// it computes with and the statistics it reduces, and leaves its output; the planner derives
// every reshard from the layouts (model_plan.hpp's edges, which the executor runs) and keeps the
// algebra a rule builds on. plan_model at run time,
// model_plan_v when the program compiles (a plan that fails is a diagnostic naming the layer).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "compilation.hpp"
#include "diagnostics.hpp"
#include "model_plan.hpp"

namespace tessel {

// The planner: walks the model's graph in topological order and calls each layer's rule. A rule
// sees its inputs (input(k)), the layout it transforms (`layout()`/`shape()`, input 0's when it
// starts, the layer's output when it returns) and whether that tensor needs a gradient
// (`needs_grad()`), and adds the layer's variables, layouts and statistics. The planner keeps
// the generic algebra a rule builds on: variable layouts from the layout_map, divisibility, the
// reshards around each op (forward and backward), the loss, and the order of the backward
// groups.
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
    // Every array of the plan is sized by TESSEL_MAX_OPS: a model described by hand with more
    // layers (describe_model refuses them when the program compiles) is refused, not read past.
    if (model_.count > max_ops) {
      fail("the model has more layers than TESSEL_MAX_OPS; define TESSEL_MAX_OPS larger");
      return plan_;
    }
    node in{};
    in.shape.rank = model_.input.rank + 1;
    in.shape.extents[0] = plan_.batch;
    for (std::size_t i = 0; i < model_.input.rank; ++i) in.shape.extents[i + 1] = model_.input[i];
    in.layout = dist_.batch_layout(in.shape.rank);
    in.needs_grad = model_.input_requires_grad;
    if (!check_divides(in.layout, in.shape, {})) return plan_;
    nodes_[0] = in;
    record_activation(in.shape, in.layout, in.needs_grad);
    for (std::size_t i = 0; i < model_.count && plan_.ok; ++i) {
      op_ = static_cast<std::uint8_t>(i);
      backward_mark_ = bw_count_;
      const op_desc& op = model_.ops[i];
      if (!bind_inputs(op)) break;
      if (op.rule->type.empty()) {
        fail("the layer has no planning rule");
        break;
      }
      cur_ = nodes_[inputs_[0]];
      for (std::size_t k = 0; k < input_count_; ++k)
        inputs_need_grad_[i] = inputs_need_grad_[i] || nodes_[inputs_[k]].needs_grad;
      used_ = op_layouts{};
      for (std::size_t k = 0; k < input_count_; ++k) used_.operands[k] = nodes_[inputs_[k]].layout;
      output_set_ = false;
      derive_backward_ = false;
      op.rule->plan(*this, op);
      if (!plan_.ok) break;
      if (derive_backward_) add_backward_edges();
      if (!plan_.ok) break;
      if (!output_set_ && plan_.layouts[op_].set) {
        // The rule recorded its layouts but left the layout_map's "<layer>/output" to the
        // planner: its output is resharded to it (after the rule's own output, which is then
        // its result).
        constrain_output(op);
        plan_.layouts[op_].output = cur_.layout;
      } else if (!output_set_) {
        // An op without its own layouts computes locally on its operands as resharded (if they
        // were), and its result is resharded to the layout_map's "<layer>/output": recorded for
        // the runtime as operands, result and output.
        used_.result = cur_.layout;
        constrain_output(op);
        used_.output = cur_.layout;
        used_.set = true;
        plan_.layouts[op_] = used_;
      }
      nodes_[i + 1] = cur_;
      record_activation(cur_.shape, cur_.layout, cur_.needs_grad);
      close_backward_group();
    }
    // The targets, the loss and predict's rows follow the input's batch: the output's rows must
    // be laid out as they are. A variable split over the batch axis gathers the batch (each
    // device then computes every row), and nothing yet splits it again before the output.
    if (plan_.ok && model_.count > 0 &&
        !(split_rows(cur_.layout.dims[0]) == split_rows(nodes_[0].layout.dims[0])))
      fail("its output rows are gathered, not split over the batch axis. The model's output "
           "must be split over the batch axis as its input is; a variable split over the batch "
           "axis gathers the batch: split that variable over another mesh axis, or lay this "
           "layer's output out over the batch axis with a layout_map rule for '<layer>/output'");
    if (plan_.ok) {
      op_ = static_cast<std::uint8_t>(model_.count);
      backward_mark_ = bw_count_;
      loss(cur_.layout, cur_.shape);
      close_backward_group();
    }
    // Backward runs in reverse topological order: append the per-layer groups last layer first.
    const std::size_t backward_begin = plan_.count;
    for (std::size_t g = groups_; g-- > 0;)
      for (std::size_t k = group_begin_[g]; k < group_end_[g]; ++k) push_backward(backward_[k]);
    // Central storage: after the update, where the variables live, every variable whose gradient
    // was reduced there is broadcast to the other replicas.
    if (plan_.ok && central())
      for (std::size_t k = backward_begin, end = plan_.count; k < end; ++k)
        if (plan_.steps[k].role == step_role::variable_gradient &&
            plan_.steps[k].step.kind == collective::reduce) {
          planned_step b = plan_.steps[k];
          b.role = step_role::variable;
          b.step.kind = collective::broadcast;
          b.runner = step_runner::after_update;
          push(b);
        }
    // State split over the batch axis: after each process updates its part, the parts of every
    // variable whose gradient was reduced over the axis are all-gathered. Under
    // shard_state::weights they are instead all-gathered before the variable's layer runs
    // forward, and again before its backward, but for the last layer's (forward's last gather,
    // still held when backward starts; FSDP keeps the root's weights the same way) and for a
    // layer whose backward reads its variables only for input gradients none of its inputs needs
    // (plan_rule::variables_only_for_input_gradients: a dense first layer).
    std::array<bool, max_variables> gathered{};
    const auto is_part_step = [&](const planned_step& s) {
      return s.role == step_role::variable_gradient &&
             (s.step.kind == collective::all_reduce ||
              s.step.kind == collective::reduce_scatter) &&
             s.step.axis == dist_.batch_axis;
    };
    const bool per_layer = dist_.shard == shard_state::weights;
    std::size_t last_op = 0;
    for (std::size_t k = backward_begin; plan_.ok && sharded() && k < plan_.count; ++k)
      if (is_part_step(plan_.steps[k])) last_op = std::max<std::size_t>(last_op, plan_.steps[k].op);
    if (plan_.ok && sharded())
      for (std::size_t k = backward_begin, end = plan_.count; k < end; ++k)
        if (is_part_step(plan_.steps[k])) {
          planned_step b = plan_.steps[k];
          const std::size_t n = plan_.mesh.sizes[b.step.axis];
          b.role = step_role::variable;
          b.step.kind = collective::all_gather;
          b.step.bytes = b.step.bytes == unknown_bytes ? unknown_bytes : b.step.bytes / n;
          b.step.wire_bytes = detail::wire_bytes(collective::all_gather, b.step.bytes, n);
          b.runner = per_layer ? step_runner::split_weights : step_runner::after_update;
          gathered[b.index] = true;
          if (per_layer) {
            planned_step f = b;
            f.when = phase::forward;
            push(f);
            if (b.op == last_op) continue;
            if (b.op < model_.count && !inputs_need_grad_[b.op] &&
                model_.ops[b.op].rule->variables_only_for_input_gradients)
              continue;
          }
          push(b);
        }
    // Each part of a split state is a run of values reduced over the batch axis: a trainable
    // variable without that reduction (under model_parallel, one split over the batch axis
    // itself) has no part to update.
    if (plan_.ok && sharded() && plan_.mesh.sizes[dist_.batch_axis] != 1)
      for (std::size_t v = 0; v < plan_.variable_count; ++v) {
        if (gathered[v] || !plan_.variables[v].trainable) continue;
        op_ = plan_.variables[v].op;
        fail("state split over the batch axis (shard_state) needs every trainable variable's "
             "gradient reduced over that axis, and this variable is split over it; lay it out "
             "over other mesh axes, or use shard_state::none",
             plan_.variables[v].path);
        return plan_;
      }
    if (plan_.ok) tag_runners();
    return plan_;
  }

  // Who runs each step: under model_parallel a layer runs every step of its planned layouts
  // (its variables' gradients left partial for the buckets where only an all_reduce over the
  // batch axes remains) and the loss those of the output's rows; under any distribution a
  // layer reduces its own statistics and the trainer the loss sums; under data parallelism the
  // trainer's buckets reduce the gradients. The steps after the update (central storage's
  // broadcasts, a split state's all-gathers) are tagged where they are planned.
  constexpr void tag_runners() noexcept {
    const bool model = dist_.kind == distribution_value::model;
    for (std::size_t k = 0; k < plan_.count; ++k) {
      planned_step& s = plan_.steps[k];
      const bool backward = s.when == phase::backward;
      const collective c = s.step.kind;
      // (Tagged when planned: the distribution's steps after the update.)
      if (s.runner == step_runner::after_update || s.runner == step_runner::split_weights)
        continue;
      if (s.when == phase::forward && s.role == step_role::loss)
        s.runner = step_runner::loss_reduction;
      else if (model && s.op < model_.count && plan_.layouts[s.op].set)
        s.runner = step_runner::layer;
      else if (model && s.op == model_.count)
        s.runner = step_runner::loss;
      else if (s.role == step_role::statistic && s.op < model_.count)
        s.runner = step_runner::layer;
      else if (!model && backward && s.role == step_role::variable_gradient &&
               (c == collective::all_reduce || c == collective::reduce_scatter ||
                c == collective::reduce || c == collective::broadcast))
        s.runner = step_runner::gradient_buckets;
      else
        s.runner = step_runner::none;
    }
  }

  [[nodiscard]] constexpr bool sharded() const noexcept { return dist_.splits_state(); }

  [[nodiscard]] constexpr bool central() const noexcept { return dist_.central_storage(); }
  // A backward step as the distribution runs it: a variable's gradient all-reduced over the
  // batch axis is, with a reduction to one device, reduced to it and broadcast back; under
  // central storage, reduced to the process that holds the variables.
  constexpr void push_backward(planned_step s) noexcept {
    const bool to_one = dist_.kind == distribution_value::data &&
                        (central() || dist_.reduction == cross_device_ops::reduction_to_one_device);
    const bool reduced = s.role == step_role::variable_gradient &&
                         s.step.kind == collective::all_reduce && s.step.axis == dist_.batch_axis;
    const std::size_t n = plan_.mesh.sizes[s.step.axis];
    if (reduced && sharded()) {
      // Each process's part of a variable is a contiguous run of its values, the variable padded
      // to a multiple of the processes: the steps move the padded size.
      if (to_one)
        return fail("state split over the batch axis needs the gradients all-reduced or "
                    "reduce-scattered, not reduced to one process");
      if (s.step.bytes != unknown_bytes && n != dynamic_extent) {
        const std::size_t es = model_.element_size, values = s.step.bytes / es;
        s.step.bytes = (values + n - 1) / n * n * es;
      }
      if (dist_.shard >= shard_state::gradients) s.step.kind = collective::reduce_scatter;
      s.step.wire_bytes = detail::wire_bytes(s.step.kind, s.step.bytes, n);
      return push(s);
    }
    if (!to_one || !reduced) return push(s);
    const int root = central() ? dist_.variable_device : 0;
    if (n != dynamic_extent && static_cast<std::size_t>(root) >= n)
      return fail("central storage names a process the batch axis does not have");
    s.step.kind = collective::reduce;
    s.step.root = static_cast<std::uint8_t>(root);
    s.step.wire_bytes = detail::wire_bytes(collective::reduce, s.step.bytes, n);
    push(s);
    if (central()) return;
    s.step.kind = collective::broadcast;
    push(s);
  }

  // A dimension's sharding without the mesh axes of one device (they split nothing).
  [[nodiscard]] constexpr dim_sharding split_rows(const dim_sharding& d) const noexcept {
    dim_sharding out{};
    for (std::size_t k = 0; k < d.count; ++k)
      if (plan_.mesh.sizes[d.axes[k]] != 1) out.push(d.axes[k]);
    return out;
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
  // forward steps in order, backward steps into the layer's backward group. `index`: the
  // operand or variable the steps move (planned_step::index); `label`: a statistic's name.
  constexpr void add(phase p, step_role role, const reshard_plan& r, std::size_t index = 0,
                     std::string_view label = {}) noexcept {
    if (!r.ok) return fail("no resharding plan between these layouts");
    for (const auto& s : r) {
      if (s.kind == collective::slice) continue;
      const planned_step ps{p, op_, role, s, static_cast<std::uint16_t>(index), label};
      if (p == phase::forward) {
        push(ps);
      } else {
        if (bw_count_ == max_backward) return fail("the plan has too many steps");
        backward_[bw_count_++] = ps;
      }
    }
  }
  // The collectives of one edge of the layer (model_plan.hpp), a tensor of `shape`, as steps.
  constexpr void add_edge(phase p, step_role role, const op_edge& e, const shape_value& shape,
                          std::size_t index = 0) noexcept {
    add(p, role, plan_reshard(e.from, e.to, plan_.mesh, shape, model_.element_size), index);
  }
  // Reshards `layout` (a tensor of `shape`) to `to`, for a layer without layouts of its own: the
  // forward steps, and, when the tensor needs its gradient, the backward ones, the edges the
  // executor runs. `role` is operand (operand `index`, whose layout as used is recorded for the
  // runtime) or output (the layer's result to the layout_map's "<layer>/output").
  // An output's backward steps run first in the layer's backward (they bring the output's
  // gradient back to what the layer produced), so they go to the front of the layer's group.
  constexpr void reshard_forward(step_role role, layout_value& layout, const layout_value& to,
                                 const shape_value& shape, bool needs_grad,
                                 std::size_t index = 0) noexcept {
    if (role == step_role::operand && index < max_op_inputs) {
      used_.operands[index] = to;
      add_edge(phase::forward, role, operand_edge(used_, layout, index), shape, index);
      if (needs_grad)
        for (const op_edge& e : operand_gradient_edges(used_, layout, index))
          add_edge(phase::backward, step_role::operand_gradient, e, shape, index);
    } else if (role == step_role::output) {
      // (The planner records the op's result and output once the rule returns.)
      op_layouts l{};
      l.result = layout;
      l.output = to;
      add_edge(phase::forward, role, output_edge(l), shape);
      if (needs_grad) {
        const std::size_t before = bw_count_;
        add_edge(phase::backward, step_role::output_gradient, output_gradient_edge(l), shape);
        rotate_to_group_front(before);
      }
    }
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
  // replicated), checked to divide, recorded with its local shard; last_variable() is its index
  // among the plan's variables. `trainable` false: it has no gradient (batch statistics); `use`:
  // what it is to the op's product (a weight, a bias).
  constexpr layout_value add_variable(const name_string& layer, std::string_view leaf,
                                      const shape_value& shape, bool trainable = true,
                                      variable_use use = variable_use::other) noexcept {
    const key_string path = make_path(layer, leaf);
    const layout_value l = find_layout(path).value_or(layout_value::replicated(shape.rank));
    std::size_t of_this_op = 0;
    for (std::size_t i = 0; i < plan_.variable_count; ++i)
      of_this_op += plan_.variables[i].op == op_;
    if (of_this_op == max_op_variables || plan_.variable_count == max_variables) {
      fail("a layer has more than 4 variables (max_op_variables)", path);
      return l;
    }
    if (plan_.ok && check_divides(l, shape, path)) {
      auto& v = plan_.variables[plan_.variable_count++];
      v = {op_, path, shape, l, shape, trainable, use};
      for (std::size_t d = 0; d < shape.rank; ++d)
        v.local.extents[d] = shape.extents[d] / plan_.mesh.size_of(l.dims[d].mask());
    }
    return l;
  }
  // The index among the plan's variables of the one add_variable added last.
  [[nodiscard]] constexpr std::size_t last_variable() const noexcept {
    return plan_.variable_count - 1;
  }
  // The layouts this layer computes with (op_layouts), for the runtime, and its output's shape.
  // The planner derives the layer's reshards from them, as the executor runs them
  // (model_plan.hpp's edges): the forward steps now, before the statistics the rule reduces
  // after its product; the backward steps when the rule returns, after the statistics its
  // backward reduces first.
  constexpr void record_layouts(const op_layouts& l, const shape_value& output_shape) noexcept {
    plan_.layouts[op_] = l;
    plan_.layouts[op_].set = true;
    output_shape_ = output_shape;
    derive_backward_ = true;
    const op_layouts& r = plan_.layouts[op_];
    for (std::size_t k = 0; k < input_count_; ++k)
      add_edge(phase::forward, step_role::operand, operand_edge(r, input(k).layout, k),
               input(k).shape, k);
    for (std::size_t i = 0, v = 0; i < plan_.variable_count; ++i)
      if (plan_.variables[i].op == op_)
        add_edge(phase::forward, step_role::variable,
                 variable_edge(r, plan_.variables[i].layout, v++), plan_.variables[i].shape, i);
    add_edge(phase::forward, step_role::output, output_edge(r), output_shape);
  }
  // The layer's output is its input's memory, not a buffer of its own (flatten): the memory
  // plan does not count it.
  constexpr void output_is_view() noexcept { output_view_ = true; }
  // The rule applied the layout_map's "<layer>/output" itself (dense chooses its product's
  // layout knowing it); otherwise the planner reshards the rule's output to it.
  constexpr void output_applied() noexcept { output_set_ = true; }
  // The all_reduce of `values` per-row values (a softmax's row max or row sum, named `what` by
  // the rule) of `bytes` each (the model's element size if 0) over `axes`, the mesh axes a
  // row's elements are split over: one step per axis, in the order of the mesh.
  constexpr void row_reduction(std::uint32_t axes, const layout_value& layout,
                               const shape_value& shape, phase p, std::string_view what,
                               std::size_t values = 1, std::size_t bytes = 0) noexcept {
    if (!axes) return;
    layout_value rows = layout_value::replicated(2);
    rows.dims[0] = layout.dims[0];
    rows.partial = axes;
    const shape_value rs{shape.extents[0], values};
    add(p, step_role::statistic,
        plan_reshard(rows, rows.without_partial(), plan_.mesh, rs,
                     bytes ? bytes : model_.element_size),
        0, what);
  }
  // The all_reduce of `values` values (a batch normalization's per-channel sums, named `what`
  // by the rule) over `axes`, the mesh axes the batch is split over: one step per axis, in the
  // order of the mesh.
  constexpr void batch_reduction(std::uint32_t axes, phase p, std::string_view what,
                                 std::size_t values) noexcept {
    if (!axes) return;
    layout_value sums = layout_value::replicated(1);
    sums.partial = axes;
    add(p, step_role::statistic,
        plan_reshard(sums, sums.without_partial(), plan_.mesh, shape_value{values},
                     model_.element_size),
        0, what);
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
      inputs_[k] = static_cast<std::uint8_t>(input_node(op, op_, k));
      if (inputs_[k] > op_) {
        fail("reads a later layer; list the layers in topological order");
        return false;
      }
      ++plan_.activations[inputs_[k]].uses;
    }
    return true;
  }
  // The backward steps of a layer that recorded its layouts, in the order the executor runs
  // them: its output's gradient, its trainable variables' gradients, the gradients of the
  // operands that need one.
  constexpr void add_backward_edges() noexcept {
    const op_layouts& r = plan_.layouts[op_];
    add_edge(phase::backward, step_role::output_gradient, output_gradient_edge(r), output_shape_);
    for (std::size_t i = 0, v = 0; i < plan_.variable_count; ++i) {
      const variable_plan& var = plan_.variables[i];
      if (var.op != op_) continue;
      if (var.trainable)
        for (const op_edge& e : variable_gradient_edges(r, var.layout, v))
          add_edge(phase::backward, step_role::variable_gradient, e, var.shape, i);
      ++v;
    }
    for (std::size_t k = 0; k < input_count_; ++k)
      if (input(k).needs_grad)
        for (const op_edge& e : operand_gradient_edges(r, input(k).layout, k))
          add_edge(phase::backward, step_role::operand_gradient, e, input(k).shape, k);
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
    if (plan_.count == max_planned_steps)
      return fail("the plan has too many steps for TESSEL_MAX_OPS (5 steps per op); define "
                  "TESSEL_MAX_OPS larger");
    plan_.steps[plan_.count++] = s;
  }
  // Ends the current layer's group of backward steps (kept in execution order within the
  // layer); run() appends the groups last layer first.
  constexpr void close_backward_group() noexcept {
    group_begin_[groups_] = backward_mark_;
    group_end_[groups_] = bw_count_;
    ++groups_;
  }
  constexpr void record_activation(const shape_value& s, const layout_value& l,
                                   bool needs_grad) noexcept {
    plan_.activations[plan_.activation_count++] = {s, l, 0, needs_grad, output_view_};
    output_view_ = false;
  }
  constexpr void constrain_output(const op_desc& op) noexcept {
    const key_string path = make_path(op.name, "output");
    const std::optional<layout_value> forced = find_layout(path);
    if (forced && check_divides(*forced, cur_.shape, path))
      reshard_forward(step_role::output, cur_.layout, *forced, cur_.shape, cur_.needs_grad);
  }

  // The loss is a mean over the global batch: the local sum is all_reduced over every axis it is
  // partial over, as the loss's rule says (one value per loss_values). The rule first reduces
  // what it needs (a cross-entropy over a split class dimension, Megatron's vocab-parallel
  // cross-entropy, completes each row); the accuracies' arg-max is reduced as one key per row.
  constexpr void loss(const layout_value& layout, const shape_value& shape) noexcept {
    if (!model_.loss->sums) return;
    const std::uint32_t summed_over = model_.loss->plan(*this, layout, shape);
    if (!plan_.ok) return;
    const std::uint32_t class_axes = shape.rank == 2 ? layout.dims[1].mask() : 0;
    if (model_.argmax_metrics)
      row_reduction(class_axes, layout, shape, phase::forward, "row arg-max", 1, 8);
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
  std::array<bool, max_ops> inputs_need_grad_{};  // whether any input of op i needs its gradient
  node cur_{};
  std::array<std::uint8_t, max_op_inputs> inputs_{};
  std::size_t input_count_ = 0;
  bool output_set_ = false;
  bool derive_backward_ = false;  // the layer recorded its layouts: add_backward_edges
  shape_value output_shape_{};    // the output's shape, as the layer recorded it
  bool output_view_ = false;  // the current layer's output is its input's memory
  op_layouts used_{};  // the layouts the current op computes with
  std::array<planned_step, max_backward> backward_{};
  std::size_t bw_count_ = 0, backward_mark_ = 0, groups_ = 0;
  std::array<std::size_t, max_ops + 1> group_begin_{}, group_end_{};
};

// Plans a training step of `model` under `dist` on `mesh` (concrete sizes) for a global batch.
// When the program runs (a mesh or batch sized at run time, a new batch size), the planner's code
// is plan_model_at_run_time's, compiled once in tessel::tessel (inline with headers only), not
// emitted again by every translation unit that plans.
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE model_plan plan_model_at_run_time(const distribution_value& dist,
                                                const mesh_value& mesh, const model_desc& model,
                                                std::size_t global_batch) noexcept;
}
constexpr model_plan plan_model(const distribution_value& dist, const mesh_value& mesh,
                                const model_desc& model, std::size_t global_batch) noexcept {
  if (std::is_constant_evaluated())
    return layer_planner(dist, mesh, model, global_batch).run();
  return plan_model_at_run_time(dist, mesh, model, global_batch);
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

#if TESSEL_PLAN_DEFINITIONS
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE model_plan plan_model_at_run_time(const distribution_value& dist,
                                                const mesh_value& mesh, const model_desc& model,
                                                std::size_t global_batch) noexcept {
  return layer_planner(dist, mesh, model, global_batch).run();
}
}  // namespace TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
