// A model of more than 255 variables (TESSEL_MAX_OPS raised to 80; 70 batch normalization layers
// hold 280): every planned step names the variable it moves, its index past 255 too. Each
// gradient's all_reduce under data_parallel names a variable of its own layer, and the last
// layer's are the plan's last variables.
#define TESSEL_MAX_OPS 80
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

namespace {
using batch_2 = tessel::data_parallel<tessel::device_mesh<tessel::axis<"batch", 2>>>;
constexpr std::size_t layers = 70;
constexpr tessel::model_desc norms = [] {
  std::array<tessel::op_desc, layers> ops{};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const char name[] = {'b', 'n', static_cast<char>('A' + i % 26),
                         static_cast<char>('a' + i / 26)};
    ops[i] = tessel::batch_normalization_op(std::string_view(name, 4));
  }
  return tessel::describe_model(tessel::shape_value{6}, ops);
}();
constexpr tessel::model_plan plan =
    tessel::plan_model(batch_2::value, batch_2::mesh::value, norms, 8);
static_assert(plan.ok);
static_assert(plan.variable_count == 4 * layers);

// Whether every gradient step names a variable of the layer it belongs to, and the largest index.
struct named {
  bool ok = true;
  std::size_t largest = 0, steps = 0;
};
constexpr named gradient_steps = [] {
  named n;
  for (const tessel::planned_step& s : plan) {
    if (!tessel::is_gradient_of_variable(s.role)) continue;
    ++n.steps;
    n.largest = std::max<std::size_t>(n.largest, s.index);
    const std::string_view path = plan.variables[s.index].path.view();
    const std::string_view layer = norms.ops[s.op].name.view();
    n.ok = n.ok && path.substr(0, layer.size()) == layer && path[layer.size()] == '/' &&
           plan.variables[s.index].trainable;
  }
  return n;
}();
static_assert(gradient_steps.steps == 2 * layers);  // gamma and beta of each
static_assert(gradient_steps.ok);
static_assert(gradient_steps.largest == 4 * layers - 3);  // the last layer's beta
}  // namespace
