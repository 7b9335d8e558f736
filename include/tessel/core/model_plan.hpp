// The communication plan of a model: for a chain of layers under a distribution, every
// collective of a training step (forward and backward), its mesh axis and its bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "distribution.hpp"
#include "planner.hpp"
#include "propagation.hpp"
#include "shard.hpp"

namespace tessel {

// ---------------------------------------------------------------------------------------------
// What the planner needs to know of a layer. The model API produces these from its layer types.

enum class op_kind : std::uint8_t { flatten, dense, activation, dropout };
enum class loss_kind : std::uint8_t { none, mean_squared_error, softmax_cross_entropy };

struct op_desc {
  op_kind kind{};
  name_string name{};
  std::size_t units = 0;         // dense
  bool use_bias = true;          // dense
  name_string activation{"linear"};  // dense and activation: "linear", "relu", "softmax", ...
};

constexpr op_desc flatten_op(std::string_view name) noexcept {
  return {op_kind::flatten, name_string(name), 0, false, name_string("linear")};
}
constexpr op_desc dense_op(std::string_view name, std::size_t units, bool use_bias = true,
                           std::string_view activation = "linear") noexcept {
  return {op_kind::dense, name_string(name), units, use_bias, name_string(activation)};
}
constexpr op_desc activation_op(std::string_view name, std::string_view fn) noexcept {
  return {op_kind::activation, name_string(name), 0, false, name_string(fn)};
}
constexpr op_desc dropout_op(std::string_view name) noexcept {
  return {op_kind::dropout, name_string(name), 0, false, name_string("linear")};
}

inline constexpr std::size_t max_ops = 32;

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
};

template <std::size_t N>
constexpr model_desc describe_model(const shape_value& input, const std::array<op_desc, N>& ops,
                                    loss_kind loss = loss_kind::none) noexcept {
  static_assert(N <= max_ops, "tessel: at most 32 layers in one planned chain");
  model_desc m{input, {}, N, loss};
  for (std::size_t i = 0; i < N; ++i) m.ops[i] = ops[i];
  return m;
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
  true_class_logit,
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
    case step_role::true_class_logit: return "true-class logit";
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

namespace detail {

constexpr key_string make_path(const name_string& layer, std::string_view leaf) noexcept {
  key_string k{};
  std::size_t n = 0;
  for (char c : layer.view()) k.data[n++] = c;
  k.data[n++] = '/';
  for (char c : leaf)
    if (n < max_key_length) k.data[n++] = c;
  return k;
}

constexpr bool is_linear_activation(std::string_view fn) noexcept {
  return fn == "linear" || fn.empty();
}

// Removes from `l`'s dimensions `first`.. any axis in `mask` (a batch axis the weight needs).
constexpr layout_value drop_axes(layout_value l, std::uint32_t mask) noexcept {
  for (std::size_t d = 0; d < l.rank; ++d) {
    dim_sharding kept{};
    for (std::size_t k = 0; k < l.dims[d].count; ++k)
      if (!(mask & (1u << l.dims[d].axes[k]))) kept.push(l.dims[d].axes[k]);
    l.dims[d] = kept;
  }
  return l;
}

constexpr layout_value swap2(layout_value l) noexcept {
  const auto t = l.dims[0];
  l.dims[0] = l.dims[1];
  l.dims[1] = t;
  return l;
}

class planner {
 public:
  constexpr planner(const distribution_value& d, const mesh_value& mesh, const model_desc& m,
                    std::size_t batch) noexcept
      : dist_(d), model_(m) {
    plan_.mesh = mesh;
    plan_.batch = batch;
  }

  constexpr model_plan run() noexcept {
    shape_value shape{};
    shape.rank = model_.input.rank + 1;
    shape.extents[0] = plan_.batch;
    for (std::size_t i = 0; i < model_.input.rank; ++i) shape.extents[i + 1] = model_.input[i];
    layout_value layout = dist_.batch_layout(shape.rank);
    if (!check_divides(layout, shape, {})) return plan_;
    record_activation(shape, layout);
    bool needs_grad = model_.input_requires_grad;
    for (std::size_t i = 0; i < model_.count && plan_.ok; ++i) {
      op_ = static_cast<std::uint8_t>(i);
      backward_mark_ = bw_count_;
      const op_desc& op = model_.ops[i];
      switch (op.kind) {
        case op_kind::flatten: flatten(layout, shape, needs_grad); break;
        case op_kind::dense: dense(op, layout, shape, needs_grad); break;
        case op_kind::activation:
          if (op.activation.view() == "softmax") softmax(layout, shape);
          else if (!is_linear_activation(op.activation.view()))
            reshard_forward(step_role::input, layout, layout.without_partial(), shape, needs_grad);
          break;
        case op_kind::dropout: break;  // the mask is keyed by global index: linear, local
      }
      if (!plan_.ok) break;
      constrain_output(op, layout, shape, needs_grad);
      record_activation(shape, layout);
      close_backward_group();
    }
    if (plan_.ok) {
      op_ = static_cast<std::uint8_t>(model_.count);
      backward_mark_ = bw_count_;
      loss(layout, shape);
      close_backward_group();
    }
    // Backward runs last layer first: append the per-layer groups in reverse order.
    for (std::size_t g = groups_; g-- > 0;)
      for (std::size_t k = group_begin_[g]; k < group_end_[g]; ++k) push(backward_[k]);
    return plan_;
  }

 private:
  static constexpr std::size_t max_backward = max_planned_steps;

  constexpr void fail(std::string_view why, const key_string& path = {}) noexcept {
    if (!plan_.ok) return;
    plan_.ok = false;
    plan_.error = why;
    plan_.error_op = op_;
    plan_.error_path = path;
  }
  constexpr void push(const planned_step& s) noexcept {
    if (plan_.count == max_planned_steps) return fail("the plan has too many steps");
    plan_.steps[plan_.count++] = s;
  }
  constexpr void add(phase p, step_role role, const reshard_plan& r) noexcept {
    if (!r.ok) return fail("no resharding plan between these layouts");
    for (const auto& s : r) {
      if (s.kind == collective::slice) continue;  // local, free: not a collective
      const planned_step ps{p, op_, role, s};
      if (p == phase::forward) {
        push(ps);
      } else {
        if (bw_count_ == max_backward) return fail("the plan has too many steps");
        backward_[bw_count_++] = ps;
      }
    }
  }
  // Ends the current layer's group of backward steps (kept in execution order within the
  // layer); run() appends the groups last layer first.
  constexpr void close_backward_group() noexcept {
    group_begin_[groups_] = backward_mark_;
    group_end_[groups_] = bw_count_;
    ++groups_;
  }
  constexpr void record_activation(const shape_value& s, const layout_value& l) noexcept {
    plan_.activations[plan_.activation_count++] = {s, l};
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

  // A reshard of an activation whose gradient is needed: forward steps, and the transposed
  // steps in the backward group.
  constexpr void reshard_forward(step_role role, layout_value& layout, const layout_value& to,
                                 const shape_value& shape, bool needs_grad) noexcept {
    add(phase::forward, role, plan_reshard(layout, to, plan_.mesh, shape, model_.element_size));
    if (needs_grad)
      add(phase::backward,
          role == step_role::output ? step_role::output_gradient : step_role::input_gradient,
          plan_reshard_backward(layout, to.without_partial(), plan_.mesh, shape,
                                model_.element_size));
    layout = to;
  }

  constexpr void flatten(layout_value& layout, shape_value& shape, bool needs_grad) noexcept {
    const std::size_t last = shape.rank - 1;
    reshard_forward(step_role::input, layout, flatten_input_requirement(layout, 1, last), shape,
                    needs_grad);
    const auto r = propagate_flatten(layout, 1, last);
    if (!r.ok) return fail(r.error);
    std::size_t n = 1;
    for (std::size_t d = 1; d <= last; ++d) n *= shape.extents[d];
    layout = r.out;
    shape = shape_value{shape.extents[0], n};
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

  constexpr layout_value variable_layout(const key_string& path, std::size_t rank) noexcept {
    return find_layout(path).value_or(layout_value::replicated(rank));
  }

  constexpr layout_value add_variable(const name_string& layer, std::string_view leaf,
                                      const shape_value& shape) noexcept {
    const key_string path = make_path(layer, leaf);
    const layout_value l = variable_layout(path, shape.rank);
    if (plan_.ok && check_divides(l, shape, path)) {
      auto& v = plan_.variables[plan_.variable_count++];
      v = {op_, path, shape, l, shape};
      for (std::size_t d = 0; d < shape.rank; ++d)
        v.local.extents[d] = shape.extents[d] / plan_.mesh.size_of(l.dims[d].mask());
    }
    return l;
  }

  struct dense_choice {
    bool ok = false;
    layout_value x, w, y, out;  // input as used, weight as used, raw product, complete output
    std::size_t cost = 0;
  };

  // The complete output layout: the layout_map's "<name>/output" if given, else the product's
  // layout without its partial axes.
  constexpr layout_value output_target(const layout_value& y,
                                       const std::optional<layout_value>& forced) const {
    return forced ? *forced : y.without_partial();
  }

  constexpr dense_choice evaluate(const layout_value& x, const layout_value& xu,
                                  const layout_value& wu, const layout_value& w,
                                  const std::optional<layout_value>& forced,
                                  const shape_value& xs,
                                  const shape_value& ws, const shape_value& ys,
                                  bool needs_grad) const noexcept {
    dense_choice c;
    const auto y = propagate_matmul(xu, wu);
    if (!y.ok) return c;
    c = {true, xu, wu, y.out, output_target(y.out, forced), 0};
    const auto& m = plan_.mesh;
    const std::size_t es = model_.element_size;
    auto cost = [&](const reshard_plan& r) {
      const auto b = r.wire_bytes();
      if (!r.ok) c.ok = false;
      c.cost += b == unknown_bytes ? 0 : b;
    };
    cost(plan_reshard(x, xu, m, xs, es));
    cost(plan_reshard(y.out, c.out, m, ys, es));
    // backward: the weight gradient reduced over the batch axes and returned to w's layout
    const auto dw = propagate_matmul(swap2(xu), c.out.without_partial());
    if (dw.ok) cost(plan_reshard(dw.out, wu, m, ws, es));
    cost(plan_reshard(wu, w, m, ws, es));
    if (needs_grad) {
      const auto dx = propagate_matmul(y.out.without_partial(), swap2(wu));
      if (dx.ok) cost(plan_reshard(dx.out, xu, m, xs, es));
    }
    return c;
  }

  constexpr void dense(const op_desc& op, layout_value& layout, shape_value& shape,
                       bool& needs_grad) noexcept {
    if (shape.rank != 2) return fail("dense takes a 2-D input; flatten it first");
    const shape_value ws{shape.extents[1], op.units};
    const shape_value ys{shape.extents[0], op.units};
    const layout_value w = add_variable(op.name, "kernel", ws);
    layout_value b = layout_value::replicated(1);
    if (op.use_bias) b = add_variable(op.name, "bias", shape_value{op.units});
    if (!plan_.ok) return;
    const key_string out_path = make_path(op.name, "output");
    const std::optional<layout_value> forced = find_layout(out_path);
    if (!plan_.ok) return;
    if (forced && !check_divides(*forced, ys, out_path)) return;

    // (a) reshard the input to the kernel: its contracting dimension sharded like the kernel's,
    //     its batch free of the axes the kernel uses.
    layout_value xa = drop_axes(layout, w.sharded_axes());
    xa.dims[1] = w.dims[0];
    xa.partial = 0;
    dense_choice best = evaluate(layout, xa, w, w, forced, shape, ws, ys, needs_grad);
    // (b) keep the input, slice the kernel locally to match it (free), reduce the output.
    if (w.dims[0].is_prefix_of(layout.dims[1]) && !layout.partial) {
      layout_value wb = w;
      wb.dims[0] = layout.dims[1];
      bool free = !(layout.dims[1].mask() & ~w.dims[0].mask() & w.sharded_axes());
      if (free && !(wb.dims[0].mask() & wb.dims[1].mask())) {
        const dense_choice alt = evaluate(layout, layout, wb, w, forced, shape, ws, ys, needs_grad);
        if (alt.ok && (!best.ok || alt.cost < best.cost)) best = alt;
      }
    }
    if (!best.ok) return fail("no layout of the input fits the kernel's layout");

    const auto& m = plan_.mesh;
    const std::size_t es = model_.element_size;
    // forward
    add(phase::forward, step_role::input, plan_reshard(layout, best.x, m, shape, es));
    add(phase::forward, step_role::kernel, plan_reshard(w, best.w, m, ws, es));
    if (op.use_bias) {
      layout_value want_b = layout_value::replicated(1);
      want_b.dims[0] = best.out.dims[1];
      add(phase::forward, step_role::bias, plan_reshard(b, want_b, m, shape_value{op.units}, es));
    }
    add(phase::forward, step_role::output, plan_reshard(best.y, best.out, m, ys, es));
    if (!plan_.ok) return;
    // backward, in execution order
    const layout_value g = best.y.without_partial();
    add(phase::backward, step_role::output_gradient, plan_reshard(best.out, g, m, ys, es));
    const auto dw = propagate_matmul(swap2(best.x), g);
    if (!dw.ok) return fail(dw.error);
    add(phase::backward, step_role::kernel_gradient, plan_reshard(dw.out, best.w, m, ws, es));
    add(phase::backward, step_role::kernel_gradient, plan_reshard(best.w, w, m, ws, es));
    if (op.use_bias) {
      const auto db = propagate_reduce(g, 0);
      add(phase::backward, step_role::bias_gradient, plan_reshard(db.out, b, m, shape_value{op.units}, es));
    }
    if (needs_grad) {
      const auto dx = propagate_matmul(g, swap2(best.w));
      if (!dx.ok) return fail(dx.error);
      add(phase::backward, step_role::input_gradient, plan_reshard(dx.out, best.x, m, shape, es));
      add(phase::backward, step_role::input_gradient,
          plan_reshard_backward(layout, best.x, m, shape, es));
    }
    layout = best.out;
    shape = ys;
    needs_grad = true;
    if (op.activation.view() == "softmax")
      softmax(layout, shape);
  }

  // softmax over a sharded last dimension: all_reduce of the row max and the row sum forward,
  // and of the row sum of (gradient * output) backward.
  constexpr void softmax(const layout_value& layout, const shape_value& shape) noexcept {
    const auto r = propagate_softmax(layout);
    if (!r.ok) return fail(r.error);
    row_reductions(r.reduce_axes, layout, shape, phase::forward, step_role::row_max,
                   step_role::row_sum);
    row_reductions(r.reduce_axes, layout, shape, phase::backward, step_role::row_sum);
  }

  constexpr void row_reductions(std::uint32_t axes, const layout_value& layout,
                                const shape_value& shape, phase p, step_role first,
                                std::optional<step_role> second = std::nullopt) noexcept {
    if (!axes) return;
    layout_value rows = layout_value::replicated(1);
    rows.dims[0] = layout.dims[0];
    rows.partial = axes;
    const shape_value rs{shape.extents[0]};
    const auto r = plan_reshard(rows, rows.without_partial(), plan_.mesh, rs, model_.element_size);
    add(p, first, r);
    if (second) add(p, *second, r);
  }

  constexpr void constrain_output(const op_desc& op, layout_value& layout, const shape_value& shape,
                                  bool needs_grad) noexcept {
    if (op.kind == op_kind::dense) return;  // dense applies its output layout itself
    const key_string path = make_path(op.name, "output");
    const std::optional<layout_value> forced = find_layout(path);
    if (forced && check_divides(*forced, shape, path))
      reshard_forward(step_role::output, layout, *forced, shape, needs_grad);
  }

  // The loss is a mean over the global batch: the local sum is all_reduced over every axis the
  // predictions are sharded over (one float). Softmax cross-entropy over a sharded class
  // dimension also reduces the row max, the row sum and the true-class logit.
  constexpr void loss(const layout_value& layout, const shape_value& shape) noexcept {
    if (model_.loss == loss_kind::none) return;
    // The local sum runs over the per-sample losses (cross-entropy: one per row, complete after
    // the row reductions) or over every local element (squared error).
    std::uint32_t summed_over = layout.sharded_axes();
    if (model_.loss == loss_kind::softmax_cross_entropy) {
      layout_value labels = layout_value::replicated(1);
      labels.dims[0] = layout.dims[0];
      const auto r = propagate_softmax_cross_entropy(layout, labels);
      if (!r.ok) return fail(r.error);
      row_reductions(r.reduce_axes, layout, shape, phase::forward, step_role::row_max,
                   step_role::row_sum);
      row_reductions(r.reduce_axes, layout, shape, phase::forward, step_role::true_class_logit);
      summed_over = r.out.sharded_axes();
    }
    layout_value scalar = layout_value::replicated(1);
    scalar.partial = summed_over;
    add(phase::forward, step_role::loss, plan_reshard(scalar, scalar.without_partial(), plan_.mesh,
                                             shape_value{model_.loss_values},
                                             model_.element_size));
  }

  const distribution_value& dist_;
  const model_desc& model_;
  model_plan plan_{};
  std::uint8_t op_ = 0;
  std::array<planned_step, max_backward> backward_{};
  std::size_t bw_count_ = 0, backward_mark_ = 0, groups_ = 0;
  std::array<std::size_t, max_ops + 1> group_begin_{}, group_end_{};
};

}  // namespace detail

// Plans a training step of `model` under `dist` on `mesh` (concrete sizes) for a global batch.
constexpr model_plan plan_model(const distribution_value& dist, const mesh_value& mesh,
                                const model_desc& model, std::size_t global_batch) noexcept {
  return detail::planner(dist, mesh, model, global_batch).run();
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
    s += "  " + pad(layer, 14) + pad(to_string(a.shape), 18) + to_string(a.layout, p.mesh) + "\n";
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
