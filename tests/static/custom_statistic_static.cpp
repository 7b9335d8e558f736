// A layer of one's own with statistics of its own: its rule, written here and nowhere else,
// reduces per-channel sums it names itself ("channel norm", forward; "channel norm gradient",
// backward) over the batch axis, and the planner plans them as steps of that layer with that
// name, as it plans batch normalization's; and a loss of one's own reduces a row statistic of its
// own the same way. Nothing in the core names them.
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

namespace {
using namespace tessel;

constexpr void plan_channel_norm(layer_planner& p, const op_desc&) noexcept {
  const std::uint32_t batch_axes = p.layout().dims[0].mask();
  const std::size_t channels = p.shape().extents[p.shape().rank - 1];
  p.batch_reduction(batch_axes, phase::forward, "channel norm", channels);
  if (p.needs_grad())
    p.batch_reduction(batch_axes, phase::backward, "channel norm gradient", channels);
}
inline constexpr plan_rule channel_norm_rule{&plan_channel_norm, "channel_norm"};

using mesh4 = device_mesh<axis<"batch", 4>>;
constexpr model_desc model = describe_model(
    shape_value{32}, std::array{dense_op<{.units = 16, .activation = activation_kind::relu}>("d1"),
                                op_desc{.rule = &channel_norm_rule, .name = name_string("norm")},
                                dense_op<{.units = 10}>("d2")});
constexpr const model_plan& plan = model_plan_v<data_parallel<mesh4>, model, 64>;
static_assert(plan.ok);

constexpr std::size_t count(std::string_view label, phase when) {
  std::size_t n = 0;
  for (const planned_step& s : plan)
    n += s.role == step_role::statistic && s.label == label && s.when == when && s.op == 1 &&
         s.step.kind == collective::all_reduce && s.step.axis == 0 &&
         s.step.bytes == 16 * sizeof(float);
  return n;
}
static_assert(count("channel norm", phase::forward) == 1);
static_assert(count("channel norm gradient", phase::backward) == 1);
// On one device nothing is reduced.
static_assert(model_plan_v<data_parallel<device_mesh<axis<"batch", 1>>>, model, 64>.collectives(
                  phase::forward) == 0);
}  // namespace

namespace {
// A model described by hand with more layers than the plan's arrays hold is refused by the
// planner, not read past.
constexpr tessel::model_plan too_many = [] {
  tessel::model_desc m = model;
  m.count = tessel::max_ops + 1;
  return tessel::plan_model(tessel::data_parallel<mesh4>::value, mesh4::value, m, 64);
}();
static_assert(!too_many.ok &&
              too_many.error ==
                  "the model has more layers than TESSEL_MAX_OPS; define TESSEL_MAX_OPS larger");
}  // namespace

namespace {
// A loss of one's own with a statistic of its own: its rule, written here, reduces each row's
// norm over the mesh axes the classes are split over ("row norm") before the loss sum, whose
// partial axes it returns. The planner plans it as the loss's step; the core names nothing.
constexpr std::uint32_t plan_row_norm_loss(tessel::layer_planner& p,
                                           const tessel::layout_value& predictions,
                                           const tessel::shape_value& shape) noexcept {
  p.row_reduction(predictions.dims[1].mask(), predictions, shape, tessel::phase::forward,
                  "row norm");
  return predictions.dims[0].mask();
}
inline constexpr tessel::loss_rule row_norm_loss{&plan_row_norm_loss, "row_norm"};

using mesh_2x2 = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 2>>;
using split_classes = tessel::model_parallel<
    tessel::layout_map<mesh_2x2, tessel::rule<"c/kernel", tessel::none, "model">,
                       tessel::rule<"c/bias", "model">>,
    "data">;
constexpr tessel::model_desc classifier =
    tessel::describe_model(tessel::shape_value{8}, std::array{tessel::dense_op<{.units = 4}>("c")},
                           &row_norm_loss);
constexpr const tessel::model_plan& loss_plan = tessel::model_plan_v<split_classes, classifier, 8>;
constexpr bool row_norm_then_loss = [] {
  int row_norm = -1, loss = -1, k = 0;
  for (const tessel::planned_step& s : loss_plan) {
    if (s.role == tessel::step_role::statistic && s.label == "row norm" && s.op == 1 &&
        s.step.kind == tessel::collective::all_reduce && s.step.axis == 1 &&
        s.step.bytes == 4 * sizeof(float) && s.runner == tessel::step_runner::loss)
      row_norm = k;
    if (s.role == tessel::step_role::loss && s.step.axis == 0) loss = k;
    ++k;
  }
  return row_norm >= 0 && loss > row_norm;
}();
static_assert(loss_plan.ok && row_norm_then_loss);
}  // namespace
