// Model plans: the Megatron pair and the seeds/000 MLP on its four meshes.
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>
#include <tessel/losses/plan.hpp>

namespace {
using namespace tessel;
constexpr int data = 0, model = 1;
constexpr auto fwd = phase::forward;
constexpr auto bwd = phase::backward;

// Megatron: a column-parallel dense then a row-parallel dense. Inside a larger network (the
// input needs its gradient) this takes exactly one all_reduce over "model" forward (the row
// layer's output) and one backward (the column layer's input gradient).
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
using megatron_map = layout_map<mesh_2x4, rule<"col/kernel", none, "model">,
                                rule<"col/bias", "model">, rule<"row/kernel", "model", none>>;
using megatron = model_parallel<megatron_map, "data">;
constexpr model_desc mlp_pair = [] {
  auto m = describe_model(
      shape_value{1024},
      std::array{dense_op<{.units = 4096, .activation = activation_kind::relu}>("col"),
                 dense_op<{.units = 1024}>("row")});
  m.input_requires_grad = true;
  return m;
}();
constexpr const model_plan& mp = model_plan_v<megatron, mlp_pair, 64>;
static_assert(mp.ok);
static_assert(mp.collectives(fwd, -1, model) == 1 &&
              mp.collectives(fwd, collective::all_reduce, model) == 1);
static_assert(mp.collectives(bwd, -1, model) == 1 &&
              mp.collectives(bwd, collective::all_reduce, model) == 1);
// The forward one reduces the row layer's output: 32 x 1024 floats on each device.
static_assert(mp.steps[0].op == 1 && mp.steps[0].role == step_role::output);
static_assert(mp.steps[0].step.bytes == 32 * 1024 * 4);
// Over "data" only gradients are reduced: the two kernels and the two biases.
static_assert(mp.collectives(fwd, -1, data) == 0 &&
              mp.collectives(bwd, collective::all_reduce, data) == 4);
static_assert(mp.variable("col/kernel")->local == shape_value{1024, 1024});
static_assert(mp.variable("row/kernel")->local == shape_value{1024, 1024});
static_assert(mp.variable("col/bias")->local == shape_value{1024});
// As the first layers of a model (no input gradient) the backward all_reduce is not needed.
constexpr model_desc mlp_pair_first =
    describe_model(shape_value{1024},
                   std::array{dense_op<{.units = 4096, .activation = activation_kind::relu}>("col"),
                              dense_op<{.units = 1024}>("row")});
static_assert(model_plan_v<megatron, mlp_pair_first, 64>.collectives(bwd, -1, model) == 0);

// seeds/000: Flatten -> Dense(200, relu, no bias, d1) -> Dropout -> Dense(10, softmax, d2), MSE.
constexpr model_desc seed_mlp = describe_model(
    shape_value{28, 28, 1},
    std::array{
        flatten_op("flatten"),
        dense_op<{.units = 200, .use_bias = false, .activation = activation_kind::relu}>("d1"),
        dropout_op("dropout"),
        dense_op<{.units = 10, .activation = activation_kind::softmax}>("d2")},
    &loss_rules::elementwise);
template <std::size_t D, std::size_t M>
using seed_distribution = model_parallel<
    layout_map<device_mesh<axis<"data", D>, axis<"model", M>>, rule<"d1/kernel", none, "model">,
               rule<"d1/bias", "model">, rule<"d2/output", "data", none>>,
    "data">;
constexpr const model_plan& p8x1 = model_plan_v<seed_distribution<8, 1>, seed_mlp, 16>;
constexpr const model_plan& p2x4 = model_plan_v<seed_distribution<2, 4>, seed_mlp, 16>;
constexpr const model_plan& p1x8 = model_plan_v<seed_distribution<1, 8>, seed_mlp, 16>;
// 8x1 is pure data parallelism: nothing over "model"; every gradient all_reduced over "data".
static_assert(p8x1.collectives(fwd, -1, model) == 0 && p8x1.collectives(bwd, -1, model) == 0);
static_assert(p8x1.collectives(bwd, collective::all_reduce, data) == 3);
static_assert(p8x1.variable("d1/kernel")->local == shape_value{784, 200});
// 2x4: d1's kernel is split by columns, so d2 slices its (replicated) kernel by rows for free and
// all_reduces its small output over "model" instead of gathering d1's 200-wide activation.
static_assert(p2x4.variable("d1/kernel")->local == shape_value{784, 50});
static_assert(p2x4.collectives(fwd, collective::all_reduce, model) == 1);
static_assert(p2x4.collectives(fwd, collective::all_gather, model) == 0);
static_assert(p2x4.collectives(bwd, collective::all_gather, model) == 1);  // d2's kernel gradient
static_assert(p2x4.activations[2].layout.dims[1].axes[0] == model);        // d1's output
// What d2 computes with on 2x4, recorded for the runtime: its input as it comes (columns over
// "model"), its replicated kernel sliced by rows to match (free, so not among the steps), a
// product partial over "model", and the complete output the layout_map asks for.
static_assert(p2x4.layouts[3].set && p2x4.layouts[0].set && p2x4.layouts[2].set);
// Flatten and dropout compute locally on what they are given: input, product and output alike.
static_assert(p2x4.layouts[2].operands[0] == p2x4.layouts[2].result &&
              p2x4.layouts[2].result == p2x4.layouts[2].output);
static_assert(p2x4.layouts[3].operands[0].dims[1].axes[0] == model &&
              p2x4.layouts[3].operands[0].dims[1].count == 1);
static_assert(p2x4.layouts[3].variables[0].dims[0].axes[0] == model &&
              p2x4.layouts[3].variables[0].dims[1].count == 0);
static_assert(p2x4.layouts[3].result.partial == (1u << model));
static_assert(p2x4.layouts[3].output.partial == 0 && p2x4.layouts[3].output.dims[1].count == 0);
// 1x8 is pure model parallelism: no "data" collectives at all.
static_assert(p1x8.collectives(fwd, -1, data) == 0 && p1x8.collectives(bwd, -1, data) == 0);
static_assert(p1x8.variable("d1/kernel")->local == shape_value{784, 25});

// When gathering the activation is cheaper than reducing the output, the planner gathers: a
// narrow activation (16 wide, sharded) feeding a wide replicated layer (4096).
constexpr model_desc narrow_then_wide =
    describe_model(shape_value{64}, std::array{dense_op<{.units = 16, .use_bias = false}>("a"),
                                               dense_op<{.units = 4096, .use_bias = false}>("b")});
using narrow_map = layout_map<mesh_2x4, rule<"a/kernel", none, "model">>;
constexpr const model_plan& nw = model_plan_v<model_parallel<narrow_map>, narrow_then_wide, 64>;
static_assert(nw.collectives(fwd, collective::all_gather, model) == 1);
static_assert(nw.collectives(fwd, collective::all_reduce, model) == 0);

// Softmax cross-entropy over a class dimension sharded by the layout map reduces row statistics.
constexpr model_desc classifier =
    describe_model(shape_value{128}, std::array{dense_op<{.units = 1000}>("logits")},
                   &loss_rules::softmax_cross_entropy);
using class_map =
    layout_map<mesh_2x4, rule<"logits/kernel", none, "model">, rule<"logits/bias", "model">>;
constexpr const model_plan& cp = model_plan_v<model_parallel<class_map>, classifier, 64>;
static_assert(cp.ok && cp.collectives(fwd, collective::all_reduce, model) == 3);  // max, sum, logit
static_assert(cp.collectives(fwd, collective::all_reduce, data) == 1);            // the loss

// A graph: a residual block, d1 -> d2 -> sum(d1, d2) -> d3. d1's output is read twice (fan-out:
// its gradients are summed), and the plan is made in the order the layers are listed.
constexpr model_desc residual =
    describe_model(shape_value{64},
                   std::array{dense_op<{.units = 64, .activation = activation_kind::relu}>("d1"),
                              dense_op<{.units = 64}>("d2"), reads(add_op("sum"), {1, 2}),
                              dense_op<{.units = 10}>("d3")},
                   &loss_rules::softmax_cross_entropy);
using batch_4 = data_parallel<device_mesh<axis<"batch", 4>>>;
constexpr const model_plan& rd = model_plan_v<batch_4, residual, 64>;
static_assert(rd.ok && rd.activations[1].uses == 2 && rd.activations[2].uses == 1);
// Data parallel: the join moves nothing; the six gradients are reduced, last layer first.
static_assert(rd.collectives(fwd, -1, 0) == 1 &&
              rd.collectives(bwd, collective::all_reduce, 0) == 6);
static_assert(rd.steps[1].op == 3 && rd.steps[rd.count - 1].op == 0);
// Model parallel (d1 column-parallel, d2 row-parallel): the join slices d2's complete output to
// d1's column split for free forward, and gathers that input's gradient over "model" backward.
using residual_map = layout_map<mesh_2x4, rule<"d1/kernel", none, "model">,
                                rule<"d1/bias", "model">, rule<"d2/kernel", "model", none>>;
constexpr const model_plan& rm = model_plan_v<model_parallel<residual_map, "data">, residual, 64>;
static_assert(rm.ok && rm.activations[3].layout.dims[1].axes[0] == model);  // sum's output
static_assert(rm.collectives(fwd, collective::all_reduce, model) == 2);     // d2's and d3's outputs
constexpr bool join_gathers_its_input_gradient() {
  std::size_t n = 0;
  for (const auto& s : rm)
    n += s.op == 2 && s.when == bwd && s.role == step_role::operand_gradient &&
         s.step.kind == collective::all_gather && s.step.axis == model;
  return n == 1;
}
static_assert(join_gathers_its_input_gradient());
// A join of inputs of two shapes, and a layer reading one listed after it, are refused.
static_assert(!plan_model(batch_4::value, batch_4::mesh::value,
                          describe_model(shape_value{64}, std::array{dense_op<{.units = 32}>("a"),
                                                                     reads(add_op("s"), {0, 1})}),
                          64)
                   .ok);
static_assert(plan_model(batch_4::value, batch_4::mesh::value,
                         describe_model(shape_value{64}, std::array{dense_op<{.units = 32}>("a"),
                                                                    reads(add_op("s"), {2, 1})}),
                         64)
                  .error == "reads a later layer; list the layers in topological order");

// A batch that does not divide by the batch axis is reported, not planned.
static_assert(!plan_model(seed_distribution<2, 4>::value, seed_distribution<2, 4>::mesh::value,
                          seed_mlp, 15)
                   .ok);
}  // namespace

// An op_desc that names no planning rule is refused by the planner, not planned as an
// element-wise op.
namespace {
constexpr tessel::op_desc unruled{.name = tessel::name_string("mystery")};
constexpr tessel::model_plan unruled_plan =
    tessel::plan_model(tessel::data_parallel<tessel::device_mesh<tessel::axis<"batch", 2>>>::value,
                       tessel::device_mesh<tessel::axis<"batch", 2>>::value,
                       tessel::describe_model(tessel::shape_value{4}, std::array{unruled}), 8);
static_assert(!unruled_plan.ok && unruled_plan.error == "the layer has no planning rule");
}  // namespace

// Every op's variables fit in the plan: a model of TESSEL_MAX_OPS layers with four variables each
// (batch normalization's gamma, beta and moving statistics) plans all 128 of them; a layer that
// adds a fifth is refused, naming that variable, rather than written past its op's arrays.
namespace {
using batch_2 = tessel::data_parallel<tessel::device_mesh<tessel::axis<"batch", 2>>>;
constexpr tessel::model_desc all_batch_norms = [] {
  std::array<tessel::op_desc, tessel::max_ops> ops{};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const char name[] = {'b', 'n', static_cast<char>('A' + i % 26), static_cast<char>('a' + i / 26)};
    ops[i] = tessel::batch_normalization_op(std::string_view(name, 4));
  }
  return tessel::describe_model(tessel::shape_value{6}, ops);
}();
constexpr tessel::model_plan all_batch_norms_plan =
    tessel::plan_model(batch_2::value, batch_2::mesh::value, all_batch_norms, 8);
static_assert(all_batch_norms_plan.ok);
static_assert(all_batch_norms_plan.variable_count == 4 * tessel::max_ops);
static_assert(all_batch_norms_plan.variables[4 * tessel::max_ops - 1].path.view() ==
              "bnFb/moving_variance");

constexpr void plan_five_variables(tessel::layer_planner& p, const tessel::op_desc& op) noexcept {
  for (std::string_view leaf : {"a", "b", "c", "d", "e"})
    p.add_variable(op.name, leaf, tessel::shape_value{6});
}
constexpr tessel::plan_rule five_variables{&plan_five_variables, "five_variables"};
constexpr tessel::model_plan five_plan = tessel::plan_model(
    batch_2::value, batch_2::mesh::value,
    tessel::describe_model(tessel::shape_value{6},
                           std::array{tessel::op_desc{.rule = &five_variables,
                                                      .name = tessel::name_string("many")}}),
    8);
static_assert(!five_plan.ok && five_plan.variable_count == 4);
static_assert(five_plan.error == "a layer has more than 4 variables (max_op_variables)");
static_assert(five_plan.error_path.view() == "many/e");
}  // namespace
