// The training state as one value and Keras's stateless pieces (seeds/002's custom loop):
// get_state_tree, value_and_grad, optimizer.stateless_apply, stateless_call and set_state_tree.
// A loop built from them equals train_on_batch bit for bit (losses, weights, optimizer slots,
// the random stream's counter) on one device and under data_parallel; the model's own state does
// not move while the loop runs; a state written into another model resumes exactly (metrics
// included); a state of the wrong order, shape or layout is refused with the path named.
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::error_of;

array<float> features(std::size_t rows, std::size_t cols, std::size_t salt) {
  array<float> x({rows, cols});
  for (std::size_t i = 0; i < x.size(); ++i)
    x.values[i] = static_cast<float>(((i * 7 + salt * 13) % 23)) / 11.0f - 1.0f;
  return x;
}
array<std::int32_t> labels(std::size_t rows, std::size_t classes, std::size_t salt) {
  array<std::int32_t> y({rows});
  for (std::size_t i = 0; i < rows; ++i) y.values[i] = static_cast<std::int32_t>((i * 5 + salt) % classes);
  return y;
}
// Bit-for-bit equality of two float arrays.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_weights(const std::vector<array<float>>& a, const std::vector<array<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].shape != b[i].shape || !same_bits(a[i].values, b[i].values)) return false;
  return true;
}
template <class B>
bool same_list(const state_list<B>& a, const state_list<B>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].path != b[i].path || a[i].dtype() != b[i].dtype()) return false;
    if (!same_bits(a[i].numpy(), b[i].numpy())) return false;
    if (a[i].dtype() == "int64" && a[i].integer() != b[i].integer()) return false;
    if (a[i].dtype() == "float64" && a[i].real() != b[i].real()) return false;
  }
  return true;
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <class Model>
void run(const std::string& name) {
  constexpr std::size_t batch = 8, steps = 4;
  auto compile = [](Model& m) {
    m.compile(optimizers::adam{.learning_rate = 0.005}, losses::sparse_categorical_crossentropy{},
              {"accuracy"});
  };
  Model reference, stateless, resumed;
  compile(reference);
  compile(stateless);
  compile(resumed);
  const std::vector<array<float>> initial = stateless.get_weights();

  // The state: its groups and paths, as Keras's get_state_tree gives them.
  state_tree<typename Model::backend> state = stateless.get_state_tree();
  check(state.trainable_variables.size() == 4 && state.trainable_variables[0].path == "dense/kernel" &&
            state.trainable_variables[3].path == "dense_1/bias",
        name + ": trainable_variables are dense/kernel ... dense_1/bias");
  check(state.non_trainable_variables.size() == 1 &&
            state.non_trainable_variables[0].path == "seed_generator/seed_generator_state" &&
            state.non_trainable_variables[0].integer() == 0,
        name + ": non_trainable_variables hold the seed generator's state, 0");
  check(state.optimizer_variables.size() == 2 + 8 &&
            state.optimizer_variables[0].path == "adam/iteration" &&
            state.optimizer_variables[1].path == "adam/learning_rate" &&
            state.optimizer_variables[1].real() == 0.005 &&
            state.optimizer_variables[2].path == "adam/dense_kernel_momentum" &&
            state.optimizer_variables[3].path == "adam/dense_kernel_velocity",
        name + ": optimizer_variables are Keras's (iteration, learning_rate, slots)");
  check(state.metrics_variables.size() == 4 && state.metrics_variables[0].path == "loss/total" &&
            state.metrics_variables[3].path == "accuracy/count",
        name + ": metrics_variables are loss/total, loss/count, accuracy/total, accuracy/count");

  // The custom loop (seeds/002) against train_on_batch.
  for (std::size_t step = 0; step < steps; ++step) {
    const auto x = features(batch, 12, step);
    const auto y = labels(batch, 4, step);
    const double expected = *find_log(reference.train_on_batch(x, y), "loss");
    auto [loss, grads, non_trainable] =
        stateless.value_and_grad(state.trainable_variables, state.non_trainable_variables, x, y);
    auto [trainable, optimizer_variables] = stateless.get_optimizer().stateless_apply(
        state.optimizer_variables, grads, state.trainable_variables);
    state.trainable_variables = std::move(trainable);
    state.optimizer_variables = std::move(optimizer_variables);
    state.non_trainable_variables = std::move(non_trainable);
    check(loss == expected, name + ": step " + std::to_string(step) + " loss " +
                                std::to_string(loss) + " equals train_on_batch's " +
                                std::to_string(expected) + " bit for bit");
  }
  check(same_weights(stateless.get_weights(), initial),
        name + ": the model's own weights did not move during the stateless loop");
  check(stateless.get_optimizer().iterations() == 0,
        name + ": the model's own optimizer did not step");
  check(state.optimizer_variables[0].integer() == static_cast<std::int64_t>(steps),
        name + ": the state's iteration is the number of steps");
  check(state.non_trainable_variables[0].integer() == static_cast<std::int64_t>(steps),
        name + ": the state's seed generator advanced once a step");

  // stateless_call: the output of the state's weights; a training call advances the counter.
  const auto xs = features(batch, 12, 9);
  auto [y_pred, after] = stateless.stateless_call(state.trainable_variables,
                                                  state.non_trainable_variables, xs);
  check(after[0].integer() == static_cast<std::int64_t>(steps),
        name + ": an inference call leaves the counter");
  check(stateless.stateless_call(state.trainable_variables, state.non_trainable_variables, xs, true)
                .non_trainable_variables[0]
                .integer() == static_cast<std::int64_t>(steps + 1),
        name + ": a training call advances the counter");

  // Written back, the model is train_on_batch's: weights, optimizer state, counter.
  stateless.set_state_tree(state);
  check(same_weights(stateless.get_weights(), reference.get_weights()),
        name + ": after set_state_tree the weights equal train_on_batch's bit for bit");
  const auto ref_state = reference.get_state_tree();
  const auto got_state = stateless.get_state_tree();
  check(same_list(got_state.optimizer_variables, ref_state.optimizer_variables),
        name + ": the optimizer's variables equal train_on_batch's bit for bit");
  check(same_list(got_state.non_trainable_variables, ref_state.non_trainable_variables),
        name + ": the seed generator's state equals train_on_batch's");
  const array<float> predicted = stateless.predict(xs, 32);
  const std::vector<float> block = [&] {
    std::vector<float> v(y_pred.size());
    Model::backend::download(y_pred.local(), std::span<float>(v));
    return v;
  }();
  const std::size_t first = y_pred.shard().offset[0], rows = y_pred.shard().extent[0];
  check(y_pred.shard().extent[1] == 4, name + ": stateless_call's output has whole rows");
  check(same_bits(block, std::vector<float>(predicted.values.begin() + first * 4,
                                            predicted.values.begin() + (first + rows) * 4)),
        name + ": stateless_call's block equals predict's rows of it");

  // Exact resume: another model given the reference's whole state (metrics included, their
  // running means not reset) continues as the reference does.
  resumed.set_state_tree(reference.get_state_tree());
  const auto x = features(batch, 12, 5);
  const auto y = labels(batch, 4, 5);
  const logs a = reference.train_on_batch(x, y, false);
  const logs b = resumed.train_on_batch(x, y, false);
  check(a == b, name + ": a resumed model's logs (running loss and accuracy) equal the reference's");
  check(same_weights(resumed.get_weights(), reference.get_weights()),
        name + ": a resumed model's weights equal the reference's bit for bit");
  stateless.train_on_batch(x, y);
  check(same_weights(stateless.get_weights(), reference.get_weights()),
        name + ": the written-back model trains on as train_on_batch's, bit for bit");

  // Refused, naming what is wrong and what to pass.
  {
    auto swapped = state.trainable_variables;
    std::swap(swapped[0], swapped[1]);
    const std::string e = error_of([&] {
      stateless.value_and_grad(swapped, state.non_trainable_variables, x, y);
    });
    check(has(e, "value_and_grad: trainable_variables[0] is 'dense/bias', where the model's is "
                 "'dense/kernel'") && has(e, "get_state_tree()"),
          name + ": a state out of order is refused naming both paths: " + e);
    auto shorter = state.trainable_variables;
    shorter.pop_back();
    const std::string f = error_of([&] {
      stateless.stateless_call(shorter, state.non_trainable_variables, x);
    });
    check(has(f, "stateless_call: trainable_variables has 3 values, the model has 4"),
          name + ": a short list is refused with both counts: " + f);
    const std::string g = error_of([&] {
      stateless.get_optimizer().stateless_apply(state.optimizer_variables,
                                                state_list<typename Model::backend>{},
                                                state.trainable_variables);
    });
    check(has(g, "stateless_apply: 0 gradients for 4 trainable variables"),
          name + ": stateless_apply without gradients is refused: " + g);
    // An optimizer state of another model (the same paths, other shapes: here the kernel's and
    // the bias's first slots trade values), and gradients out of place: refused naming the entry,
    // never read past a block's end.
    const auto grads =
        stateless.value_and_grad(state.trainable_variables, state.non_trainable_variables, x, y)
            .grads;
    auto other = state.optimizer_variables;
    std::swap(other[2].value, other[4].value);
    const std::string m = error_of([&] {
      stateless.get_optimizer().stateless_apply(other, grads, state.trainable_variables);
    });
    check(has(m, "stateless_apply: optimizer_variables' 'adam/dense_kernel_momentum' is (16,), "
                 "but trainable variable 'dense/kernel' is (12, 16)") &&
              has(m, "get_state_tree()"),
          name + ": another model's optimizer state is refused naming the slot: " + m);
    auto swapped_grads = grads;
    std::swap(swapped_grads[0].value, swapped_grads[1].value);
    const std::string n = error_of([&] {
      stateless.get_optimizer().stateless_apply(state.optimizer_variables, swapped_grads,
                                                state.trainable_variables);
    });
    check(has(n, "stateless_apply: grads[0] ('dense/kernel', (16,)) does not match "
                 "trainable_variables[0] ('dense/kernel', (12, 16))"),
          name + ": gradients of other shapes are refused naming both: " + n);
    auto bad_counter = state;
    bad_counter.non_trainable_variables[0].value = 1.5;
    const std::string h = error_of([&] { stateless.set_state_tree(bad_counter); });
    check(has(h, "seed_generator/seed_generator_state") && has(h, "float64, expected int64"),
          name + ": a counter of the wrong dtype is refused: " + h);
    Model uncompiled;
    const std::string k = error_of([&] { uncompiled.set_state_tree(state); });
    check(has(k, "not compiled") && has(k, "compile()"),
          name + ": set_state_tree of optimizer state on an uncompiled model: " + k);
  }
}

// The stateless pieces are pure, as JAX's and Keras's: a call reads its arguments and returns new
// values. Batch normalization in training wrote its moving statistics into the non-trainable
// values the caller passed (so a second value_and_grad on the same state applied the moving
// average twice), and value_and_grad overwrote the gradients compute_loss_and_gradients had left
// for apply_gradients. Now two calls on one state give the same results bit for bit, the
// arguments and the model's own state do not change, and pending gradients survive.
template <class Model>
void pure(const std::string& name) {
  using B = typename Model::backend;
  Model m;
  m.compile(optimizers::adam{.learning_rate = 0.005}, losses::sparse_categorical_crossentropy{});
  const auto x = features(8, 12, 3);
  const auto y = labels(8, 4, 3);
  m.train_on_batch(x, y);  // moving statistics and a counter away from their initial values
  const state_tree<B> own = m.get_state_tree();
  const state_tree<B> state = m.get_state_tree();
  const state_list<B> given = [&] {  // a copy of the argument, to compare it with after the calls
    state_list<B> c;
    for (const auto& v : state.non_trainable_variables) c.push_back(copy_of(v));
    return c;
  }();
  check(state.non_trainable_variables.size() == 3 &&
            state.non_trainable_variables[0].path == "batch_normalization/moving_mean",
        name + ": the state holds batch normalization's moving statistics and the counter");
  const auto a = m.value_and_grad(state.trainable_variables, state.non_trainable_variables, x, y,
                                  true);
  const auto b = m.value_and_grad(state.trainable_variables, state.non_trainable_variables, x, y,
                                  true);
  check(a.loss == b.loss && same_list(a.grads, b.grads) &&
            same_list(a.non_trainable_variables, b.non_trainable_variables),
        name + ": value_and_grad twice on one state gives the same loss, gradients and "
               "non-trainable values bit for bit");
  check(same_list(state.non_trainable_variables, given),
        name + ": value_and_grad leaves the non-trainable values it was given as they were");
  check(!same_list(a.non_trainable_variables, given),
        name + ": and returns the moving statistics after the step");
  const auto c = m.stateless_call(state.trainable_variables, state.non_trainable_variables, x, true);
  const auto d = m.stateless_call(state.trainable_variables, state.non_trainable_variables, x, true);
  std::vector<float> cy(c.y_pred.size()), dy(d.y_pred.size());
  B::download(c.y_pred.local(), std::span<float>(cy));
  B::download(d.y_pred.local(), std::span<float>(dy));
  check(same_bits(cy, dy) && same_list(c.non_trainable_variables, d.non_trainable_variables) &&
            same_list(state.non_trainable_variables, given),
        name + ": stateless_call in training twice: the same output and state, the arguments "
               "unchanged");
  const state_tree<B> after = m.get_state_tree();
  check(same_list(after.trainable_variables, own.trainable_variables) &&
            same_list(after.non_trainable_variables, own.non_trainable_variables) &&
            same_list(after.optimizer_variables, own.optimizer_variables),
        name + ": the model's own state did not change");

  // Gradients left by compute_loss_and_gradients are those apply_gradients applies, whatever
  // value_and_grad ran between them.
  Model plain, mixed;
  plain.compile(optimizers::adam{.learning_rate = 0.005}, losses::sparse_categorical_crossentropy{});
  mixed.compile(optimizers::adam{.learning_rate = 0.005}, losses::sparse_categorical_crossentropy{});
  plain.compute_loss_and_gradients(x, y);
  plain.apply_gradients();
  mixed.compute_loss_and_gradients(x, y);
  const state_tree<B> s = mixed.get_state_tree();
  mixed.value_and_grad(s.trainable_variables, s.non_trainable_variables, features(8, 12, 4),
                       labels(8, 4, 4), true);
  mixed.apply_gradients();
  check(same_weights(mixed.get_weights(), plain.get_weights()),
        name + ": apply_gradients after a value_and_grad applies compute_loss_and_gradients' "
               "gradients");
}

}  // namespace

using model_one = sequential<input<12>, dense<16, {.activation = "relu"}>, dropout<0.25>, dense<4>>;
using model_dp = sequential<data_parallel<>, input<12>, dense<16, {.activation = "relu"}>,
                            dropout<0.25>, dense<4>>;
template <class Dist>
using model_bn = sequential<Dist, input<12>, dense<16, {.activation = "relu"}>,
                            batch_normalization<>, dropout<0.25>, dense<4>>;

// Megatron's pair on 2x2: the hidden layer's columns split over "model", the output's rows.
using mesh_2x2 = device_mesh<axis<"data", 2>, axis<"model", 2>>;
using megatron = layout_map<mesh_2x2, rule<"dense/kernel", none, "model">, rule<"dense/bias", "model">,
                            rule<"dense_1/kernel", "model", none>>;
using model_mp = sequential<model_parallel<megatron, "data">, input<12>,
                            dense<16, {.activation = "relu"}>, dropout<0.25>, dense<4>>;

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    run<model_one>("one device");
    pure<model_bn<one_device>>("one device, batch normalization");
    if (num_processes() > 1) pure<model_bn<data_parallel<>>>("data_parallel, batch normalization");
    if (num_processes() > 1) run<model_dp>("data_parallel");
    if (num_processes() == 4) run<model_mp>("model_parallel 2x2");
  } catch (const std::exception& e) {
    check(false, std::string("threw: ") + e.what());
  }
  return tessel::testing::finish("stateless_test");
}
