// The memory plan when the program compiles: the 4096-wide MLP on 2 processes with Adam, its
// parts under each shard_state counted by hand; the Megatron pair's communication buffers, and
// its shards' state split over the batch axis (and refused for a variable split over that axis); a
// budget that fits and the largest part named.
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

namespace {
using namespace tessel;
using mesh2 = device_mesh<axis<"batch", 2>>;
constexpr model_desc wide =
    describe_model(shape_value{4096},
                   std::array{dense_op<{.units = 4096, .activation = activation_kind::relu}>("d1"),
                              dense_op<{.units = 4096, .activation = activation_kind::relu}>("d2"),
                              dense_op<{.units = 4096, .activation = activation_kind::relu}>("d3"),
                              dense_op<{.units = 10}>("d4")});
// Parameters: 3 x (4096 x 4096 + 4096) + 4096 x 10 + 10; each variable's count is even, so the
// padding to 2 processes adds nothing.
constexpr std::size_t params = 3 * (4096 * 4096 + 4096) + 4096 * 10 + 10;
constexpr std::size_t batch = 256, rows = batch / 2;

constexpr memory_plan plain = memory_plan_v<data_parallel<mesh2>, wide, batch, 2>;
static_assert(plain.weights == params * 4 && plain.gradients == params * 4);
static_assert(plain.optimizer_state == 2 * params * 4);
// Kept for backward: the input and each layer's output (rows of this process); backward: the
// loss's gradient and the input gradients of d2, d3 and d4.
static_assert(plain.activations == rows * (4096 + 3 * 4096 + 10) * 4);
static_assert(plain.activation_gradients == rows * (10 + 3 * 4096) * 4);
static_assert(plain.communication == 0);
static_assert(plain.peak() == plain.weights + plain.gradients + plain.optimizer_state +
                                  plain.activations + plain.activation_gradients);
static_assert(plain.largest() == "optimizer state");

// ZeRO-1: half the slots, the whole gradient buffer (the reduce-scattered parts lie in it).
constexpr memory_plan zero1 =
    memory_plan_v<data_parallel<mesh2, shard_state::optimizer>, wide, batch, 2>;
static_assert(zero1.optimizer_state == params * 4 && zero1.gradients == params * 4);
// ZeRO-2: half the slots. The window the buckets would take turns in holds two layers' gradients
// (d3's and d2's kernels, 134 MB): with the parts of the sums (half) more than the whole buffer,
// which is kept.
constexpr memory_plan zero2 =
    memory_plan_v<data_parallel<mesh2, shard_state::gradients>, wide, batch, 2>;
static_assert(zero2.optimizer_state == params * 4 && zero2.gradients == params * 4);
static_assert(zero2.peak() == zero1.peak() && zero1.peak() < plain.peak());

// Six such layers: the parts of the sums (half) and a window of two layers' gradients (each
// 4096 x 4096 kernel and each bias a bucket of its own), grown by the head's bucket at most where
// the buckets' places leave a gap, take less than the whole buffer.
constexpr model_desc deep = describe_model(
    shape_value{4096}, std::array{dense_op<{.units = 4096, .activation = activation_kind::relu}>("d1"),
                                  dense_op<{.units = 4096, .activation = activation_kind::relu}>("d2"),
                                  dense_op<{.units = 4096, .activation = activation_kind::relu}>("d3"),
                                  dense_op<{.units = 4096, .activation = activation_kind::relu}>("d4"),
                                  dense_op<{.units = 4096, .activation = activation_kind::relu}>("d5"),
                                  dense_op<{.units = 4096, .activation = activation_kind::relu}>("d6"),
                                  dense_op<{.units = 10}>("d7")});
constexpr std::size_t deep_params = 6 * (4096 * 4096 + 4096) + 4096 * 10 + 10;
constexpr std::size_t layer = 4096 * 4096 + 4096, head = 4096 * 10 + 10;
constexpr memory_plan deep1 =
    memory_plan_v<data_parallel<mesh2, shard_state::optimizer>, deep, batch, 2>;
constexpr memory_plan deep2 =
    memory_plan_v<data_parallel<mesh2, shard_state::gradients>, deep, batch, 2>;
static_assert(deep1.gradients == deep_params * 4);
static_assert(deep2.gradients >= (deep_params / 2 + 2 * layer) * 4 &&
              deep2.gradients <= (deep_params / 2 + 2 * layer + head) * 4);
static_assert(deep2.peak() < deep1.peak());
// ZeRO-3: the weights as the gradients, half of them and a window of two layers', and the
// same gradients; with buckets of 1 GB too, since a bucket of split weights holds one layer at
// most (they are gathered a bucket at a time).
constexpr memory_plan deep3 =
    memory_plan_v<data_parallel<mesh2, shard_state::weights>, deep, batch, 2>;
static_assert(deep3.weights == deep2.gradients && deep3.gradients == deep2.gradients);
static_assert(deep3.optimizer_state == deep2.optimizer_state && deep2.weights == deep_params * 4);
static_assert(deep3.peak() == deep2.peak() - deep2.weights + deep3.weights);
static_assert(plan_memory(model_plan_v<data_parallel<mesh2, shard_state::weights>, deep, batch>,
                          data_parallel<mesh2, shard_state::weights>::value, 2, 4,
                          {.bucket_cap_mb = 1000})
                  .weights <= (deep_params / 2 + 2 * layer + head) * 4);
// The 4096-wide MLP: two of its three large layers and half the weights would take more than its
// whole weights, so its window holds one layer (d2's kernel, the largest bucket): half the weights
// and one layer.
constexpr memory_plan zero3 =
    memory_plan_v<data_parallel<mesh2, shard_state::weights>, wide, batch, 2>;
static_assert(zero3.weights < zero2.weights && zero3.gradients == zero2.gradients);
static_assert(zero3.weights >= (params / 2 + 4096 * 4096) * 4 &&
              zero3.weights <= (params / 2 + 4096 * 4096 + 2 * 4096 + 4096 * 10) * 4);
// The plan lists the gathers: each trainable variable's before its layer's forward, and before
// its backward but for the last layer's (d7's kernel and bias) and the first's (d1's: its
// backward needs no input gradient, and dense reads its kernel only for that).
// (Under shard_state::gradients the same 14 all-gathers run after the update, in backward's list.)
constexpr model_plan deep2_steps =
    model_plan_v<data_parallel<mesh2, shard_state::gradients>, deep, batch>;
constexpr model_plan deep3_steps =
    model_plan_v<data_parallel<mesh2, shard_state::weights>, deep, batch>;
static_assert(deep3_steps.collectives(phase::forward) ==
                  deep2_steps.collectives(phase::forward) + 14 &&
              deep3_steps.collectives(phase::backward) ==
                  deep2_steps.collectives(phase::backward) - 4);
// With buckets of 1 GB the layers share one bucket: nothing to gain, the whole buffer is kept.
static_assert(plan_memory(model_plan_v<data_parallel<mesh2, shard_state::gradients>, deep, batch>,
                          data_parallel<mesh2, shard_state::gradients>::value, 2, 4,
                          {.bucket_cap_mb = 1000})
                  .gradients == deep_params * 4);

// Without overlap (gradient_options::overlap false) the windows hold one layer at a time: a
// layer's gradients are reduce-scattered, and its weights released, before the next layer's
// backward. The six layers keep half their gradients and weights and one layer's of each; the
// 4096-wide MLP too (half and one layer take less than the whole buffer, where two did not).
constexpr gradient_options serial{.overlap = false};
constexpr memory_plan deep2_serial =
    memory_plan_v<data_parallel<mesh2, shard_state::gradients>, deep, batch, 2, serial>;
constexpr memory_plan deep3_serial =
    memory_plan_v<data_parallel<mesh2, shard_state::weights>, deep, batch, 2, serial>;
static_assert(deep2_serial.gradients >= (deep_params / 2 + layer) * 4 &&
              deep2_serial.gradients <= (deep_params / 2 + layer + head) * 4);
static_assert(deep2_serial.gradients < deep2.gradients && deep2_serial.weights == deep2.weights);
static_assert(deep3_serial.weights == deep2_serial.gradients &&
              deep3_serial.gradients == deep2_serial.gradients);
static_assert(deep3_serial.peak() < deep3.peak());
constexpr memory_plan zero2_serial =
    memory_plan_v<data_parallel<mesh2, shard_state::gradients>, wide, batch, 2, serial>;
static_assert(zero2_serial.gradients >= (params / 2 + 4096 * 4096) * 4 &&
              zero2_serial.gradients <= (params / 2 + 4096 * 4096 + 2 * 4096 + 4096 * 10) * 4);
// (Without a split state the option changes nothing the plan counts.)
static_assert(memory_plan_v<data_parallel<mesh2, shard_state::optimizer>, wide, batch, 2, serial>
                  .peak() == zero1.peak());

// A budget: 1 GB fits each, 700 MB only the split states.
static_assert(fits_in_memory<data_parallel<mesh2>, wide, batch, 2, 1'000'000'000>);
static_assert(
    fits_in_memory<data_parallel<mesh2, shard_state::optimizer>, wide, batch, 2, 700'000'000>);
static_assert(plain.peak() > 700'000'000);

// Model parallelism: the Megatron pair's kernels split over "model" (4), the batch over "data"
// (2): a quarter of each kernel per device, and the buffers its resharding steps fill.
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
using megatron =
    model_parallel<layout_map<mesh_2x4, rule<"col/kernel", none, "model">,
                              rule<"col/bias", "model">, rule<"row/kernel", "model", none>>,
                   "data">;
constexpr model_desc pair =
    describe_model(shape_value{1024},
                   std::array{dense_op<{.units = 4096, .activation = activation_kind::relu}>("col"),
                              dense_op<{.units = 1024}>("row")});
constexpr memory_plan mp = memory_plan_v<megatron, pair, 64, 0>;
static_assert(mp.weights == (1024 * 4096 / 4 + 4096 / 4 + 4096 * 1024 / 4 + 1024) * 4);
static_assert(mp.optimizer_state == 0);
static_assert(mp.communication > 0);

// The same with Adam, and with each device's shards' state split over "data" (2): half the
// slots, the same weights, gradients and buffers (the parts all-gathered in place).
constexpr memory_plan mp_adam = memory_plan_v<megatron, pair, 64, 2>;
template <shard_state S>
using megatron_split = model_parallel<typename megatron::layout_map, "data", S>;
constexpr memory_plan mp_zero1 = memory_plan_v<megatron_split<shard_state::optimizer>, pair, 64, 2>;
constexpr memory_plan mp_zero2 = memory_plan_v<megatron_split<shard_state::gradients>, pair, 64, 2>;
static_assert(mp_adam.optimizer_state == 2 * mp.weights);
static_assert(mp_zero1.optimizer_state == mp.weights && mp_zero2.optimizer_state == mp.weights);
static_assert(mp_zero1.weights == mp.weights && mp_zero1.gradients == mp.weights &&
              mp_zero1.communication == mp.communication && mp_zero2.peak() == mp_zero1.peak());
static_assert(mp_zero1.peak() + mp.weights == mp_adam.peak());
}  // namespace

namespace {
// A distribution of one's own that splits the state and reduces to one process: refused.
struct split_to_one {
  using mesh = tessel::device_mesh<tessel::axis<"batch", 2>>;
  static constexpr tessel::name_string batch_dim_name{"batch"};
  static constexpr tessel::distribution_value value = [] {
    tessel::distribution_value v = tessel::data_parallel<mesh>::value;
    v.reduction = tessel::cross_device_ops::reduction_to_one_device;
    v.shard = tessel::shard_state::optimizer;
    return v;
  }();
};
constexpr tessel::model_plan refused =
    tessel::plan_model(split_to_one::value, split_to_one::mesh::value, wide, 256);
static_assert(!refused.ok && refused.error ==
                                 "state split over the batch axis needs the gradients all-reduced "
                                 "or reduce-scattered, not reduced to one process");
}  // namespace

namespace {
// model_parallel with its state split over "data", and a kernel itself split over "data": that
// kernel's gradient is not reduced over "data", so it has no part to update: refused, naming it.
using mesh_2x2 = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 2>>;
using over_data =
    tessel::model_parallel<tessel::layout_map<mesh_2x2, tessel::rule<"d1/kernel", "data", "model">,
                                              tessel::rule<"d1/output", "data", tessel::none>>,
                           "data", tessel::shard_state::optimizer>;
using tessel::dense_op;
constexpr tessel::model_desc two =
    tessel::describe_model(tessel::shape_value{8},
                           std::array{dense_op<{.units = 16}>("d1"), dense_op<{.units = 4}>("d2")});
constexpr tessel::model_plan split_kernel =
    tessel::plan_model(over_data::value, mesh_2x2::value, two, 16);
static_assert(!split_kernel.ok && split_kernel.error_path.view() == "d1/kernel" &&
              split_kernel.error ==
                  "state split over the batch axis (shard_state) needs every trainable variable's "
                  "gradient reduced over that axis, and this variable is split over it; lay it "
                  "out over other mesh axes, or use shard_state::none");
// Without the split state the same layouts plan.
static_assert(
    tessel::plan_model(tessel::model_parallel<typename over_data::layout_map, "data">::value,
                       mesh_2x2::value, two, 16)
        .ok);
}  // namespace
