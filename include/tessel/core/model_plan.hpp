// model_plan: the communication plan of a model, as data: what the planner knows of a layer
// (op_desc, model_desc) and what it gives (every collective of a training step, forward and
// backward, with its mesh axis and bytes; each variable's and activation's layout; the layouts
// each layer computes with). The planner that computes it is core/layer_planner.hpp, its text
// core/explain.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "compilation.hpp"
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

class layer_planner;
struct op_desc;

// The loss as the planner sees it: its own rule, as a layer's. `plan` reduces across devices
// what the loss needs besides its sum, with the planner's row_reduction (a cross-entropy over
// split classes completes each row: layers/../losses/plan.hpp), and returns the mesh axes the
// local loss sum is then partial over; the planner adds the arg-max of the accuracies and the
// reduction of the loss sum. A loss type gives its rule (plan_rule()); a new loss with
// statistics of its own brings its rule in its own file. `name` says which it is ("elementwise",
// "softmax_cross_entropy"); `sums` is false for no loss at all (a model planned without one).
struct loss_rule {
  std::uint32_t (*plan)(layer_planner&, const layout_value& predictions,
                        const shape_value& shape) = nullptr;
  std::string_view name{};
  bool sums = true;
};
namespace detail {
constexpr std::uint32_t plan_no_loss(layer_planner&, const layout_value&,
                                     const shape_value&) noexcept {
  return 0;
}
}  // namespace detail
// No loss: a model planned for predict, or before compile.
inline constexpr loss_rule no_loss{&detail::plan_no_loss, "none", false};
// A layer type's planning rule: reads the layer's inputs from the planner, adds its variables
// and steps, and leaves its output's shape and layout (see layer_planner). op_desc points to a
// rule object, not to the function: GCC 12 refuses a function pointer inside a class-type
// template argument (static_model_plan takes the model_desc as one), but takes a pointer to a
// constexpr variable.
struct plan_rule {
  void (*plan)(layer_planner&, const op_desc&) = nullptr;
  std::string_view type{};  // the layer type, as `explain` may name it ("dense")
  // The layer's backward reads its variables only for its inputs' gradients (dense: dx = dy
  // kernel^T; the kernel's own gradient is x^T dy): where no input needs a gradient (the
  // model's first layer), split weights (shard_state::weights) are not gathered again for it.
  bool variables_only_for_input_gradients = false;
};
namespace detail {
constexpr void plan_without_rule(layer_planner&, const op_desc&) noexcept {}
// What an op_desc that names no rule points at: a rule without a type, which the planner refuses
// ("the layer has no planning rule"). A default object rather than a null pointer, because GCC
// 12's -fsanitize=undefined makes a test of a pointer to a constexpr object against null a
// non-constant expression, and the plan is computed at compile time.
inline constexpr plan_rule no_rule{&plan_without_rule, ""};
}  // namespace detail

// The size of the planner's arrays, fixed when the program compiles (the plan is a constant
// expression, so its arrays have a size): the inputs of one op and the ops of one model. Define
// TESSEL_MAX_OP_INPUTS or TESSEL_MAX_OPS before including tessel, the same in every translation
// unit of a program (CMake: target_compile_definitions), for more; larger values cost compile
// time in every model.
#ifndef TESSEL_MAX_OP_INPUTS
#define TESSEL_MAX_OP_INPUTS 4
#endif
#ifndef TESSEL_MAX_OPS
#define TESSEL_MAX_OPS 32
#endif
inline constexpr std::size_t max_op_inputs = TESSEL_MAX_OP_INPUTS;
// (An op's operands needing gradients are bits of a 32-bit mask.)
static_assert(max_op_inputs >= 2 && max_op_inputs <= 32,
              "tessel: TESSEL_MAX_OP_INPUTS must be 2 to 32");

// A layer as a node of the model's graph. Its parameters (units, activation, ...) live in its own
// type, whose rule (one instance per set of parameters) knows them: the core sees none.
struct op_desc {
  const plan_rule* rule = &detail::no_rule;
  name_string name{};
  // The graph's edges: the nodes this layer reads, 0 being the model's input and i + 1 the
  // output of layer i. With none given the layer reads the one before it (a chain).
  std::array<std::uint8_t, max_op_inputs> inputs{};
  std::uint8_t input_count = 0;
};

inline constexpr std::size_t max_ops = TESSEL_MAX_OPS;
// A node is numbered in one byte (0 the model's input, i + 1 op i).
static_assert(max_ops >= 1 && max_ops <= 254, "tessel: TESSEL_MAX_OPS must be 1 to 254");

// The planner's functions compiled once in tessel::tessel (plan_model_at_run_time, explain, the
// layers' rules when the program runs, the executor's core) take the planner's arrays, whose
// sizes are these limits, so they are compiled for the default limits (TESSEL_DEFAULT_LIMITS)
// only: a translation unit with other limits compiles them itself, inline (TESSEL_PLAN_INLINE,
// TESSEL_PLAN_DEFINITIONS), and their names carry the limits (namespace limits_<ops>_<inputs>),
// so that a program whose files disagree on the limits fails to link rather than reading arrays
// of another size.
#if TESSEL_MAX_OPS == 32 && TESSEL_MAX_OP_INPUTS == 4
#define TESSEL_DEFAULT_LIMITS 1
#else
#define TESSEL_DEFAULT_LIMITS 0
#endif
#if TESSEL_DEFAULT_LIMITS
#define TESSEL_PLAN_INLINE TESSEL_INLINE
#define TESSEL_PLAN_DEFINITIONS TESSEL_DEFINITIONS
#else
#define TESSEL_PLAN_INLINE inline
#define TESSEL_PLAN_DEFINITIONS 1
#endif
#define TESSEL_LIMITS_NAME_(ops, inputs) limits_##ops##_##inputs
#define TESSEL_LIMITS_NAME(ops, inputs) TESSEL_LIMITS_NAME_(ops, inputs)
#define TESSEL_LIMITS_NAMESPACE TESSEL_LIMITS_NAME(TESSEL_MAX_OPS, TESSEL_MAX_OP_INPUTS)

// A model as the planner sees it: a graph of layers in topological order (each reads only the
// model's input or layers before it); the last layer's output is the model's output, where the
// loss applies. A chain is the case where each layer reads the one before.
struct model_desc {
  shape_value input{};  // per-sample shape (without the batch)
  std::array<op_desc, max_ops> ops{};
  std::size_t count = 0;
  // The loss's rule (a pointer to a constexpr rule, as op_desc's).
  const loss_rule* loss = &no_loss;
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
                                    const loss_rule* loss = &no_loss) noexcept {
  static_assert(N <= max_ops, "tessel: more layers than TESSEL_MAX_OPS (default 32) in one "
                              "planned model; define TESSEL_MAX_OPS larger");
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

// What a planned step moves, in the words of any op: one of its operands (`index`: which),
// its result on the way to its output, a variable (`index`: which of the plan's variables), a
// statistic a rule reduces (`label`: its name, given by the rule), or the loss. The
// runtime executes steps by role (a variable gradient's all_reduce becomes a gradient bucket,
// the loss's reduces the loss and metric sums); `explain` names them (step_name).
enum class step_role : std::uint8_t {
  operand,            // an operand, resharded to the layout the op computes with
  output,             // the op's result, resharded to its output's layout
  operand_gradient,   // the transposes of those, in backward
  output_gradient,
  variable,           // a variable, resharded to the layout the op computes with
  variable_gradient,  // its gradient, reduced or resharded to the variable's layout
  statistic,          // values a rule reduces across devices (a softmax's row sums, batch sums)
  loss,               // the loss sum (and what the model reduces with it), over the batch axes
};
// A variable's gradient (a bucket of the data-parallel gradient reduction).
constexpr bool is_gradient_of_variable(step_role r) noexcept {
  return r == step_role::variable_gradient;
}

// Who runs a planned step. The planner tags every step; the runtime routes each by its tag, and a
// plan with a step no part of tessel runs is refused before training starts.
enum class step_runner : std::uint8_t {
  none,              // nothing runs it: the model cannot train under this plan
  layer,             // the layer: its planned layouts (model_parallel), or its own statistics
  loss,              // the loss and the metrics: the rows of an output whose classes are split
  loss_reduction,    // the trainer: the loss and metric sums
  gradient_buckets,  // the trainer's gradient buckets (data parallelism)
  after_update,      // the trainer after the update: central storage's broadcast of the
                     // variables, a split state's all-gather of the updated parts
  split_weights,     // the trainer before a layer's forward and backward: the all-gather of its
                     // weights' parts (shard_state::weights)
};

struct planned_step {
  phase when{};
  std::uint8_t op = 0;  // index of the layer; the loss is op == count
  step_role role{};
  reshard_step step{};
  // The operand (operand, operand_gradient) or the variable among the plan's (variable,
  // variable_gradient) the step moves (up to max_variables: 4 x TESSEL_MAX_OPS, past 255).
  std::uint16_t index = 0;
  // A statistic's name, as the rule that reduces it gives it ("row max", "batch mean"): a
  // layer with statistics of its own names them in its own rule, not in the core.
  std::string_view label{};
  step_runner runner = step_runner::none;
};

// What a variable is to its op's product, as the op's rule says (for a search that chooses its
// layout, core/auto_layout.hpp; the core names no layer's variables): a weight the op multiplies
// its input by, contracting the weight's second-to-last dimension with the input's features and
// giving its last as the output's (dense's and conv2d's kernels); a bias, one value per output
// feature, added to the product; or anything else.
enum class variable_use : std::uint8_t { other, weight, bias };

// The node op `op` reads as its input `k`: the node its graph names, or for a chain (no inputs
// given) the one before it (0 being the model's input and i + 1 layer i's output).
constexpr std::size_t input_node(const op_desc& op, std::size_t index, std::size_t k) noexcept {
  return op.input_count ? op.inputs[k] : index;
}

struct variable_plan {
  std::uint8_t op = 0;
  key_string path{};
  shape_value shape{};
  layout_value layout{};
  shape_value local{};
  bool trainable = true;  // false: no gradient, no optimizer slots (batch statistics)
  variable_use use = variable_use::other;
};

struct activation_plan {
  shape_value shape{};  // global, with the batch
  layout_value layout{};
  // Layers that read this node: past one, their input gradients are summed (fan-out), each
  // first returned to this layout by the reader's own backward steps.
  std::size_t uses = 0;
  bool needs_grad = false;  // backward computes its gradient
  bool view = false;        // its layer's output is its input's memory (flatten)
};

inline constexpr std::size_t max_op_variables = 4;

// The layouts an op computes with, as its rule chose them, so that the executor can run it and
// every reshard around it (the plan's steps leave out the free local slices between them): each
// operand and each of the op's variables (in the order the op adds them) as the op uses them, its
// result (partial where it sums a contraction split across devices) and its output after the
// reshard to the layout_map's "<layer>/output" (or the result made whole). Backward, the layout
// each variable's gradient is computed in, and whether it goes to the variable's layout through
// the layout the op used the variable in (bit v of `gradients_through_variables`) or directly;
// and the layout each operand's gradient is computed in (partial where the op's contraction
// leaves it so; rank 0: the operand's layout as used).
struct op_layouts {
  bool set = false;
  std::array<layout_value, max_op_inputs> operands{};
  std::array<layout_value, max_op_variables> variables{};
  layout_value result{}, output{};
  std::array<layout_value, max_op_variables> variable_gradients{};
  std::uint8_t gradients_through_variables = 0;
  std::array<layout_value, max_op_inputs> operand_gradients{};
};

// ---------------------------------------------------------------------------------------------
// The reshards around an op, as edges from the layout a tensor arrives in to the one it leaves
// in. The planner lists each edge's collectives (plan_reshard) as the op's steps; the executor
// runs the same edges, taken from the same functions: what explain() prints is what runs.
struct op_edge {
  layout_value from{}, to{};
};
// At most two edges (a gradient on its way back through the layout its tensor was used in).
struct op_edges {
  std::array<op_edge, 2> edge{};
  std::size_t count = 0;
  [[nodiscard]] constexpr const op_edge* begin() const noexcept { return edge.data(); }
  [[nodiscard]] constexpr const op_edge* end() const noexcept { return edge.data() + count; }
};

// Forward, in the order they run: operand k (arriving laid out as `input`) and variable v
// (stored as `stored`) to the layouts the op computes with, then its result to its output.
constexpr op_edge operand_edge(const op_layouts& l, const layout_value& input,
                               std::size_t k) noexcept {
  return {input, l.operands[k]};
}
constexpr op_edge variable_edge(const op_layouts& l, const layout_value& stored,
                                std::size_t v) noexcept {
  return {stored, l.variables[v]};
}
constexpr op_edge output_edge(const op_layouts& l) noexcept { return {l.result, l.output}; }

// Backward, in the order they run: the output's gradient back to the result's layout (whole),
// each variable's gradient to the variable's layout (through the layout the op used it in when
// the op says so), each operand's gradient to the layout the op used it in, then to its input's.
constexpr op_edge output_gradient_edge(const op_layouts& l) noexcept {
  return {l.output, l.result.without_partial()};
}
constexpr op_edges variable_gradient_edges(const op_layouts& l, const layout_value& stored,
                                           std::size_t v) noexcept {
  if ((l.gradients_through_variables >> v) & 1u)
    return {{op_edge{l.variable_gradients[v], l.variables[v]}, op_edge{l.variables[v], stored}},
            2};
  return {{op_edge{l.variable_gradients[v], stored}}, 1};
}
constexpr op_edges operand_gradient_edges(const op_layouts& l, const layout_value& input,
                                          std::size_t k) noexcept {
  const layout_value& computed =
      l.operand_gradients[k].rank != 0 ? l.operand_gradients[k] : l.operands[k];
  return {{op_edge{computed, l.operands[k]}, op_edge{l.operands[k], input.without_partial()}}, 2};
}

// Five steps per op (160 at the default TESSEL_MAX_OPS): a plan that needs more is refused.
inline constexpr std::size_t max_planned_steps = 5 * max_ops;
// Room for every op's variables (an op has at most max_op_variables: the planner refuses a
// layer with more), so no model of at most max_ops layers runs out of it.
inline constexpr std::size_t max_variables = max_op_variables * max_ops;
static_assert(max_variables <= 0xffff, "tessel: planned_step::index must name every variable");

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

}  // namespace tessel
