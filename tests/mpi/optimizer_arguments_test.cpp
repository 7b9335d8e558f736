// Keras's optimizer arguments where the processes hold parts of the variables, on 2 and 4
// processes:
//   - under data_parallel, with the optimizer state split (shard_state::optimizer) and with the
//     weights split (shard_state::weights), under model_parallel (the Megatron pair over "model")
//     and model_parallel with its state split over "data": losses and weights equal one device
//     with the same clipping over 10 steps, and differ from the run without it (the clipping
//     acts);
//   - the squared norms are summed by one all_reduce of one float64 per variable along each axis
//     that splits the variables or the state, none where every process holds whole gradients,
//     as explain() lists;
//   - use_ema (with ema_overwrite_frequency) and gradient_accumulation_steps, their averages and
//     accumulators split as the slots are: 12 steps and fit's end (the weights taking their
//     averages) equal one device, and differ from the run without them;
//   - Nadam under the split state: its own scalar derived by the parts from the update count.
#include <algorithm>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"
#include "strategy_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::has;
using tessel::testing::rel;

template <class Dist>
using block = sequential<Dist, input<12>, dense<32, {.activation = "relu", .name = "col"}>,
                         dense<16, {.activation = "tanh", .name = "row"}>,
                         dense<4, {.activation = "softmax", .name = "head"}>>;
template <std::size_t Data, std::size_t Model>
using mesh_t = device_mesh<axis<"data", Data>, axis<"model", Model>>;
template <std::size_t Data, std::size_t Model>
using megatron_map = layout_map<mesh_t<Data, Model>, rule<"col/kernel", none, "model">,
                                rule<"col/bias", "model">, rule<"row/kernel", "model", none>>;

// SGD with momentum clipped per variable, Adam clipped by the global norm: small enough bounds
// that every step clips.
const optimizer_spec clipnorm =
    optimizers::sgd{.learning_rate = 0.1, .momentum = 0.9, .clipnorm = 0.05};
const optimizers::schedules::cosine_decay warmup_cosine{
    .initial_learning_rate = 0.001, .decay_steps = 8, .warmup_target = 0.02, .warmup_steps = 3};
const optimizer_spec global_clipnorm =
    optimizers::adam{.learning_rate = warmup_cosine, .global_clipnorm = 0.05};
const optimizer_spec unclipped_sgd = optimizers::sgd{.learning_rate = 0.1, .momentum = 0.9};
const optimizer_spec unclipped_adam = optimizers::adam{.learning_rate = warmup_cosine};

// `axes`: the mesh axes whose processes hold different parts (the norms' all_reduce along each).
template <class Dist>
void equals_one_device(const std::string& what, const testing::data_set& d,
                       const std::vector<std::string>& axes) {
  for (bool global : {false, true}) {
    const std::string name = what + (global ? ", global_clipnorm" : ", clipnorm");
    const optimizer_spec& spec = global ? global_clipnorm : clipnorm;
    block<Dist> a;
    block<one_device> b, unclipped;
    a.compile({.optimizer = spec, .loss = "categorical_crossentropy"});
    b.compile({.optimizer = spec, .loss = "categorical_crossentropy"});
    unclipped.compile(
        {.optimizer = global ? unclipped_adam : unclipped_sgd, .loss = "categorical_crossentropy"});
    double worst_loss = 0;
    for (std::size_t step = 0; step < 10; ++step) {
      const array<float> x = data::slice_rows(d.x, step * 16, step * 16 + 16);
      const array<float> y = data::slice_rows(d.y, step * 16, step * 16 + 16);
      worst_loss = std::max(worst_loss, rel(*find_log(a.train_on_batch(x, y), "loss"),
                                            *find_log(b.train_on_batch(x, y), "loss")));
      unclipped.train_on_batch(x, y);
    }
    const double worst = testing::worst_weights(a.get_weights(), b.get_weights());
    const double apart = testing::worst_weights(unclipped.get_weights(), b.get_weights());
    if (process_id() == 0)
      std::printf(
          "%s: worst relative difference from one device: loss %.2e, weights %.2e; "
          "from the unclipped run %.2e\n",
          name.c_str(), worst_loss, worst, apart);
    check(worst_loss <= testing::tolerance, name + ": losses " + std::to_string(worst_loss));
    check(worst <= testing::adam_weight_tolerance, name + ": weights " + std::to_string(worst));
    check(apart > 1e-2, name + ": the clipping acts (" + std::to_string(apart) + " apart)");

    // One step's norm all_reduces: one float64 per variable (6) along each listed axis.
    a.clear_collectives();
    a.train_on_batch(data::slice_rows(d.x, 0, 16), data::slice_rows(d.y, 0, 16));
    std::vector<std::size_t> per_axis(a.mesh().shape().rank, 0);
    for (const auto& r : a.collectives().records)
      if (r.kind == collective::all_reduce && r.bytes == 6 * sizeof(double)) ++per_axis[r.axis];
    std::string expected;
    for (std::size_t k = 0; k < per_axis.size(); ++k) {
      const std::string axis(a.mesh().shape().names[k].view());
      const bool listed =
          std::find(axes.begin(), axes.end(), axis) != axes.end() && a.mesh().shape().sizes[k] > 1;
      check(per_axis[k] == (listed ? 1U : 0U),
            name + ": " + std::to_string(per_axis[k]) + " norm all_reduces along '" + axis + "'");
      if (listed) expected += " '" + axis + "'";
    }
    const std::string plan = a.explain(16);
    check(expected.empty() ? !has(plan, "gradient clipping")
                           : has(plan, std::string("gradient clipping (") +
                                           (global ? "global_clipnorm" : "clipnorm") +
                                           "): the squared norms, 6 float64, summed by an "
                                           "all_reduce along" +
                                           expected + " each step"),
          name + ": explain() lists the norms' all_reduce:\n" + plan);
  }
}

// Adam with use_ema (overwriting every 3 updates) and gradient_accumulation_steps 3: 11 steps,
// then a fit of one batch, which updates (its 12th call) and ends with finalize_variable_values:
// the weights then differ from their averages until fit's end takes them.
const optimizer_spec ema_accumulation = optimizers::adam{.learning_rate = 0.01,
                                                         .use_ema = true,
                                                         .ema_momentum = 0.7,
                                                         .ema_overwrite_frequency = 3,
                                                         .gradient_accumulation_steps = 3};

template <class Dist>
void ema_and_accumulation(const std::string& what, const testing::data_set& d) {
  const std::string name = what + ", use_ema and gradient_accumulation_steps";
  block<Dist> a;
  block<one_device> b, plain;
  a.compile({.optimizer = ema_accumulation, .loss = "categorical_crossentropy"});
  b.compile({.optimizer = ema_accumulation, .loss = "categorical_crossentropy"});
  plain.compile(
      {.optimizer = optimizers::adam{.learning_rate = 0.01}, .loss = "categorical_crossentropy"});
  double worst_loss = 0;
  for (std::size_t step = 0; step < 11; ++step) {
    const array<float> x = data::slice_rows(d.x, step * 16, step * 16 + 16);
    const array<float> y = data::slice_rows(d.y, step * 16, step * 16 + 16);
    worst_loss = std::max(worst_loss, rel(*find_log(a.train_on_batch(x, y), "loss"),
                                          *find_log(b.train_on_batch(x, y), "loss")));
    plain.train_on_batch(x, y);
  }
  const array<float> x = data::slice_rows(d.x, 176, 192), y = data::slice_rows(d.y, 176, 192);
  a.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
  b.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
  const double worst = testing::worst_weights(a.get_weights(), b.get_weights());
  const double apart = testing::worst_weights(plain.get_weights(), b.get_weights());
  if (process_id() == 0)
    std::printf(
        "%s: worst relative difference from one device: loss %.2e, weights %.2e; "
        "from plain Adam %.2e\n",
        name.c_str(), worst_loss, worst, apart);
  check(worst_loss <= testing::tolerance, name + ": losses " + std::to_string(worst_loss));
  check(worst <= testing::adam_weight_tolerance, name + ": weights " + std::to_string(worst));
  check(apart > 1e-2, name + ": the arguments act (" + std::to_string(apart) + " apart)");
  // fit ended with the weights taking their moving averages (one device's, which the
  // distributed model's equal).
  const auto weights = b.get_weights();
  std::size_t i = 0;
  double off = 0;
  for (const auto& v : b.get_state_tree().optimizer_variables)
    if (v.path.ends_with("_average") && i < weights.size())
      off = std::max(off, rel(v.numpy(), weights[i++].values));
  check(i == weights.size() && off == 0.0,
        name + ": after fit the weights are their averages (" + std::to_string(off) + ")");
}

// Nadam, whose own scalar (the product of momentum factors) the split state's parts derive from
// the update count: 10 steps equal one device, and its state tree holds the scalar.
template <class Dist>
void nadam_equals_one_device(const std::string& what, const testing::data_set& d) {
  const std::string name = what + ", Nadam";
  block<Dist> a;
  block<one_device> b;
  a.compile(
      {.optimizer = optimizers::nadam{.learning_rate = 0.01}, .loss = "categorical_crossentropy"});
  b.compile(
      {.optimizer = optimizers::nadam{.learning_rate = 0.01}, .loss = "categorical_crossentropy"});
  double worst_loss = 0;
  for (std::size_t step = 0; step < 10; ++step) {
    const array<float> x = data::slice_rows(d.x, step * 16, step * 16 + 16);
    const array<float> y = data::slice_rows(d.y, step * 16, step * 16 + 16);
    worst_loss = std::max(worst_loss, rel(*find_log(a.train_on_batch(x, y), "loss"),
                                          *find_log(b.train_on_batch(x, y), "loss")));
  }
  const double worst = testing::worst_weights(a.get_weights(), b.get_weights());
  const auto sa = a.get_state_tree().optimizer_variables,
             sb = b.get_state_tree().optimizer_variables;
  if (process_id() == 0)
    std::printf("%s: worst relative difference from one device: loss %.2e, weights %.2e\n",
                name.c_str(), worst_loss, worst);
  check(worst_loss <= testing::tolerance, name + ": losses " + std::to_string(worst_loss));
  check(worst <= testing::adam_weight_tolerance, name + ": weights " + std::to_string(worst));
  check(sa.back().path == "variable" && sa.back().real() == sb.back().real(),
        name + ": the product of momentum factors is one device's");
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const testing::data_set d = testing::make_data(512, 12, 4);
    using batch_mesh = device_mesh<axis<"batch">>;
    equals_one_device<data_parallel<batch_mesh>>("data_parallel", d, {});
    equals_one_device<data_parallel<batch_mesh, shard_state::optimizer>>(
        "data_parallel, shard_state::optimizer", d, {"batch"});
    equals_one_device<data_parallel<batch_mesh, shard_state::weights>>(
        "data_parallel, shard_state::weights", d, {"batch"});
    ema_and_accumulation<data_parallel<batch_mesh>>("data_parallel", d);
    ema_and_accumulation<data_parallel<batch_mesh, shard_state::optimizer>>(
        "data_parallel, shard_state::optimizer", d);
    ema_and_accumulation<data_parallel<batch_mesh, shard_state::weights>>(
        "data_parallel, shard_state::weights", d);
    nadam_equals_one_device<data_parallel<batch_mesh, shard_state::optimizer>>(
        "data_parallel, shard_state::optimizer", d);
    if (num_processes() == 4) {
      equals_one_device<model_parallel<megatron_map<2, 2>, "data">>("model_parallel 2x2", d,
                                                                    {"model"});
      equals_one_device<model_parallel<megatron_map<2, 2>, "data", shard_state::optimizer>>(
          "model_parallel 2x2, shard_state::optimizer", d, {"data", "model"});
      ema_and_accumulation<model_parallel<megatron_map<2, 2>, "data", shard_state::optimizer>>(
          "model_parallel 2x2, shard_state::optimizer", d);
    } else {
      equals_one_device<model_parallel<megatron_map<1, 2>, "data">>("model_parallel 1x2", d,
                                                                    {"model"});
    }
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return testing::finish("optimizer_arguments_test");
}
