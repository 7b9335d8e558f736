// data_parallel training is one device's training: run under `mpiexec -n N`, the seed models
// train 20 steps distributed over the N processes, and process 0 trains the same models on one
// device (one_device) on the same global batches. Losses, metrics, weights, evaluate and predict
// must agree within 1e-5 relative; every process must hold bit-identical weights; set_weights
// must broadcast process 0's values; batches that do not divide by the number of processes train
// as on one device, a fresh model's first step that leaves some processes no rows included.
// Exit code 0 when all checks pass.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

#include "mpi_checks.hpp"
#include <vector>

namespace {

using namespace tessel::layers;

template <class Dist>
using seed000 =
    tessel::sequential<Dist, input<28, 28, 1>, flatten<>,
                       dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                       dropout<0.4>, dense<10, {.activation = "softmax", .name = "d2"}>>;
template <class Dist>
using seed001 = tessel::sequential<Dist, input<784>, dense<256, {.activation = "relu"}>,
                                   dense<256, {.activation = "relu"}>, dense<10>>;

constexpr std::size_t steps = 20, global_batch = 32;
constexpr double tolerance = 1e-5;

using tessel::testing::check;
using tessel::testing::rel;

struct data {
  tessel::array<float> x_images, x_flat, x_test_images;
  tessel::array<float> y_onehot, y_test_onehot;
  tessel::array<std::int32_t> y_sparse, y_test_sparse;
};
data load() {
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  const std::size_t n = steps * global_batch, m = 160;
  auto xs = tessel::data::to_float(tessel::data::slice_rows(train.first, 0, n), 1.0f / 255.0f);
  auto ys = tessel::data::slice_rows(train.second, 0, n);
  auto xt = tessel::data::to_float(tessel::data::slice_rows(test.first, 0, m), 1.0f / 255.0f);
  auto yt = tessel::data::slice_rows(test.second, 0, m);
  return {tessel::data::reshape(xs, {n, 28, 28, 1}), tessel::data::reshape(xs, {n, 784}),
          tessel::data::reshape(xt, {m, 28, 28, 1}), tessel::data::to_categorical(ys, 10),
          tessel::data::to_categorical(yt, 10), tessel::data::to_int32(ys),
          tessel::data::to_int32(yt)};
}

// Trains `model` on the batches of (x, y): the per-step logs.
template <class Model, class X, class Y>
std::vector<tessel::logs> train(Model& model, const X& x, const Y& y) {
  auto ds = tessel::from_tensor_slices(x, y).shuffle(static_cast<std::int64_t>(x.rows()), 7)
                .batch(global_batch);
  std::vector<tessel::logs> out;
  for (const auto& [xb, yb] : ds) out.push_back(model.train_on_batch(xb, yb));
  return out;
}

// Every process holds process 0's weights, bit for bit.
void check_replicas_identical(const std::vector<tessel::array<float>>& w, const std::string& name) {
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::vector<float> root = w[i].values;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    check(root == w[i].values, name + ": variable " + std::to_string(i) +
                                   " differs from process 0's (replicas diverged)");
  }
}

template <template <class> class Model, class X, class Y, class XT, class YT>
void compare(const std::string& name, const X& x, const Y& y, const XT& xt, const YT& yt,
             auto compile) {
  Model<tessel::data_parallel<>> dist;
  compile(dist);
  const auto dist_logs = train(dist, x, y);
  const auto dist_weights = dist.get_weights();
  const auto dist_eval = dist.evaluate(xt, yt, 32, 0);
  const auto dist_pred = dist.predict(xt, 32);
  check_replicas_identical(dist_weights, name);
  check(dist.gradient_bucket_count() == (tessel::num_processes() > 1 ? 1u : 0u),
        name + ": one 25 MB gradient bucket when distributed");

  double worst_loss = 0, worst_weight = 0;
  if (tessel::process_id() == 0) {
    Model<tessel::one_device> ref;
    compile(ref);
    const auto ref_logs = train(ref, x, y);
    check(ref_logs.size() == steps && dist_logs.size() == steps, name + ": 20 steps");
    for (std::size_t s = 0; s < std::min(ref_logs.size(), dist_logs.size()); ++s)
      for (const auto& [key, value] : ref_logs[s]) {
        const double d = rel(*tessel::find_log(dist_logs[s], key), value);
        worst_loss = std::max(worst_loss, d);
        check(d <= tolerance, name + ": step " + std::to_string(s) + " " + key + " " +
                                  std::to_string(*tessel::find_log(dist_logs[s], key)) +
                                  " vs one device " + std::to_string(value));
      }
    check(*tessel::find_log(ref_logs.back(), "loss") < *tessel::find_log(ref_logs.front(), "loss"),
          name + ": the loss decreases");
    const auto ref_weights = ref.get_weights();
    for (std::size_t i = 0; i < ref_weights.size(); ++i) {
      const double d = rel(dist_weights[i].values, ref_weights[i].values);
      worst_weight = std::max(worst_weight, d);
      check(d <= tolerance, name + ": variable " + std::to_string(i) + " differs by " +
                                std::to_string(d) + " relative");
    }
    const auto ref_eval = ref.evaluate(xt, yt, 32, 0);
    for (const auto& [key, value] : ref_eval)
      check(rel(*tessel::find_log(dist_eval, key), value) <= tolerance,
            name + ": evaluate " + key);
    const auto ref_pred = ref.predict(xt, 32);
    check(dist_pred.shape == ref_pred.shape && rel(dist_pred.values, ref_pred.values) <= tolerance,
          name + ": predict");
    std::printf("%s on %d processes: worst relative difference from one device: losses and "
                "metrics %.3g, weights %.3g (tolerance %.0e)\n",
                name.c_str(), tessel::num_processes(), worst_loss, worst_weight, tolerance);
  }
  // predict gives every process the whole result.
  std::vector<float> root = dist_pred.values;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  check(root == dist_pred.values, name + ": predict returns the same whole result everywhere");
}

// Bucket size and overlap change when each gradient is reduced, not what it sums to: seed001
// with 0.1 MB buckets (5 buckets: a 784x256 or 256x256 kernel alone overflows one) and with
// overlap off trains to the default's weights.
void check_bucket_options(const data& d) {
  auto compile = [](auto& m) {
    m.compile(tessel::optimizers::adam{},
              tessel::losses::sparse_categorical_crossentropy{.from_logits = true}, {"accuracy"});
  };
  seed001<tessel::data_parallel<>> base, small, serial;
  compile(base);
  compile(small);
  compile(serial);
  small.set_gradient_options({.bucket_cap_mb = 0.1, .overlap = true});
  serial.set_gradient_options({.bucket_cap_mb = 0.1, .overlap = false});
  const bool distributed = tessel::num_processes() > 1;
  check(small.gradient_bucket_count() == (distributed ? 5u : 0u),
        "0.1 MB buckets: 5 buckets, got " + std::to_string(small.gradient_bucket_count()));
  train(base, d.x_flat, d.y_sparse);
  small.reset_communication_stats();
  train(small, d.x_flat, d.y_sparse);
  train(serial, d.x_flat, d.y_sparse);
  const auto w = base.get_weights(), ws = small.get_weights(), wn = serial.get_weights();
  for (std::size_t i = 0; i < w.size(); ++i) {
    check(rel(ws[i].values, w[i].values) <= tolerance,
          "0.1 MB buckets change variable " + std::to_string(i));
    check(rel(wn[i].values, w[i].values) <= tolerance,
          "overlap off changes variable " + std::to_string(i));
  }
  const auto& stats = small.communication_stats();
  check(stats.steps == steps &&
            stats.bytes == (distributed ? 4u * small.count_params() : 0u),
        "communication_stats counts the steps and the gradient bytes");
  // Every collective run: per step the buckets' all_reduces (at least one call per run of
  // buckets, at most one per bucket) and the loss's, over "batch", moving the gradient bytes
  // and the loss and accuracy sums (two doubles).
  const std::size_t reduces = stats.count(tessel::collective::all_reduce, "batch");
  check(!distributed ||
            (stats.collectives.size() == 1 && reduces >= 2 * steps && reduces <= 6 * steps &&
             stats.collectives[0].bytes == steps * (4u * small.count_params() + 16u)),
        "communication_stats counts the all_reduces over 'batch' and their bytes: " +
            std::to_string(reduces));
}

void check_set_weights_broadcasts() {
  seed001<tessel::data_parallel<>> model;
  auto w = model.get_weights();
  for (auto& v : w) std::fill(v.begin(), v.end(), static_cast<float>(tessel::process_id() + 1));
  model.set_weights(w);
  bool all_ones = true;
  for (const auto& v : model.get_weights())
    all_ones = all_ones && std::all_of(v.begin(), v.end(), [](float f) { return f == 1.0f; });
  check(all_ones, "set_weights: every process holds process 0's values");
}

// Batches that do not divide by the number of processes (the last partial batch of an epoch, a
// batch smaller than the number of processes) are split as evenly as possible, and the step is
// still one device's: seed000 (dropout keyed by global row) trained on batches of n + 1, n - 1
// (some process holds none) and 1 rows, then fit on arrays whose last batch is partial, then
// evaluate and predict with partial batches, against one device.
void check_uneven_batches(const data& d) {
  const std::size_t n = static_cast<std::size_t>(tessel::num_processes());
  auto compile = [](auto& m) { m.compile({.loss = "mse", .metrics = {"accuracy"}}); };
  auto run = [&](auto& model) {
    std::vector<tessel::logs> logs;
    std::size_t at = 0;
    for (const std::size_t rows : {n + 1, std::max<std::size_t>(n, 2) - 1, std::size_t{1}}) {
      logs.push_back(model.train_on_batch(tessel::data::slice_rows(d.x_images, at, at + rows),
                                          tessel::data::slice_rows(d.y_onehot, at, at + rows)));
      at += rows;
    }
    // 8 * n + 3 samples in batches of 2 * n: the last batch holds 3.
    const std::size_t samples = 8 * n + 3;
    const auto h = model.fit(tessel::data::slice_rows(d.x_images, 0, samples),
                             tessel::data::slice_rows(d.y_onehot, 0, samples),
                             {.batch_size = 2 * n, .epochs = 2, .verbose = 0, .shuffle = false});
    for (std::size_t e = 0; e < 2; ++e)
      logs.push_back({{"loss", h.history.at("loss")[e]}, {"accuracy", h.history.at("accuracy")[e]}});
    logs.push_back(model.evaluate(d.x_test_images, d.y_test_onehot, n + 1, 0));
    return logs;
  };
  seed000<tessel::data_parallel<>> dist;
  compile(dist);
  const auto dist_logs = run(dist);
  const auto dist_pred = dist.predict(d.x_test_images, n + 1);
  check_replicas_identical(dist.get_weights(), "uneven batches");
  if (tessel::process_id() != 0) return;
  seed000<tessel::one_device> ref;
  compile(ref);
  const auto ref_logs = run(ref);
  double worst = 0;
  for (std::size_t s = 0; s < ref_logs.size(); ++s)
    for (const auto& [key, value] : ref_logs[s]) {
      const double e = rel(*tessel::find_log(dist_logs[s], key), value);
      worst = std::max(worst, e);
      check(e <= tolerance, "uneven batches: log " + std::to_string(s) + " " + key + " " +
                                std::to_string(*tessel::find_log(dist_logs[s], key)) +
                                " vs one device " + std::to_string(value));
    }
  const auto w = dist.get_weights(), wr = ref.get_weights();
  for (std::size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, rel(w[i].values, wr[i].values));
    check(rel(w[i].values, wr[i].values) <= tolerance,
          "uneven batches: variable " + std::to_string(i));
  }
  const auto ref_pred = ref.predict(d.x_test_images, n + 1);
  check(dist_pred.shape == ref_pred.shape && rel(dist_pred.values, ref_pred.values) <= tolerance,
        "uneven batches: predict in batches of " + std::to_string(n + 1));
  std::printf("uneven batches on %zu processes: worst relative difference from one device %.3g\n",
              n, worst);
}

// A first call in which some processes hold no rows (a global batch smaller than the processes,
// or one that leaves the last ones none) trains as one device, as TensorFlow trains a partial
// batch: their gradients are zero, the loss is the mean over the rows that exist. Each case is a
// fresh model, nothing built before it: train_on_batch of 1 row then 3; of 3 rows then 1; and a
// predict and an evaluate in batches of 1, then fit over 7 samples in batches of 3 (3, 3, 1).
// Then predict in batches of 3. Losses, metrics, weights and predictions against one device.
void check_empty_replicas(const data& d) {
  auto compile = [](auto& m) { m.compile({.loss = "mse", .metrics = {"accuracy"}}); };
  struct outcome {
    std::vector<tessel::logs> logs;
    std::vector<tessel::array<float>> predictions, weights;
  };
  const auto x = [&](std::size_t a, std::size_t b) {
    return tessel::data::slice_rows(d.x_images, a, b);
  };
  const auto y = [&](std::size_t a, std::size_t b) {
    return tessel::data::slice_rows(d.y_onehot, a, b);
  };
  const auto xt = tessel::data::slice_rows(d.x_test_images, 0, 5);
  const auto yt = tessel::data::slice_rows(d.y_test_onehot, 0, 5);
  auto run = [&](auto& model, int which) {
    outcome o;
    if (which == 0 || which == 1) {
      const std::size_t first = which == 0 ? 1 : 3, second = which == 0 ? 3 : 1;
      o.logs.push_back(model.train_on_batch(x(0, first), y(0, first)));
      o.logs.push_back(model.train_on_batch(x(first, first + second), y(first, first + second)));
    } else {
      o.predictions.push_back(model.predict(xt, 1));
      o.logs.push_back(model.evaluate(xt, yt, 1, 0));
      const auto h = model.fit(x(0, 7), y(0, 7),
                               {.batch_size = 3, .epochs = 2, .verbose = 0, .shuffle = false});
      for (std::size_t e = 0; e < 2; ++e)
        o.logs.push_back(
            {{"loss", h.history.at("loss")[e]}, {"accuracy", h.history.at("accuracy")[e]}});
    }
    o.predictions.push_back(model.predict(xt, 3));
    o.weights = model.get_weights();
    return o;
  };
  const char* names[] = {"a first step of 1 row, then 3", "a first step of 3 rows, then 1",
                         "predict and evaluate in batches of 1, then fit in batches of 3"};
  double worst = 0;
  for (int which = 0; which < 3; ++which) {
    const std::string name = std::string("empty replicas: ") + names[which];
    seed000<tessel::data_parallel<>> dist;
    compile(dist);
    const outcome a = run(dist, which);
    check_replicas_identical(a.weights, name);
    if (tessel::process_id() != 0) continue;
    seed000<tessel::one_device> ref;
    compile(ref);
    const outcome b = run(ref, which);
    for (std::size_t s = 0; s < b.logs.size(); ++s)
      for (const auto& [key, value] : b.logs[s]) {
        const double e = rel(*tessel::find_log(a.logs[s], key), value);
        worst = std::max(worst, e);
        check(e <= tolerance, name + ": log " + std::to_string(s) + " " + key + " " +
                                  std::to_string(*tessel::find_log(a.logs[s], key)) +
                                  " vs one device " + std::to_string(value));
      }
    for (std::size_t i = 0; i < b.weights.size(); ++i) {
      const double e = rel(a.weights[i].values, b.weights[i].values);
      worst = std::max(worst, e);
      check(e <= tolerance, name + ": variable " + std::to_string(i) + " differs by " +
                                std::to_string(e) + " relative");
    }
    for (std::size_t i = 0; i < b.predictions.size(); ++i) {
      const double e = rel(a.predictions[i].values, b.predictions[i].values);
      worst = std::max(worst, e);
      check(a.predictions[i].shape == b.predictions[i].shape && e <= tolerance,
            name + ": predict " + std::to_string(i));
    }
  }
  if (tessel::process_id() == 0)
    std::printf("empty replicas on %d processes: worst relative difference from one device %.3g\n",
                tessel::num_processes(), worst);
}

// What must agree between processes does, even when the program makes it differ or fails on one
// process only.
void check_processes_agree(const data& d) {
  const int rank = tessel::process_id();
  {  // a per-process seed (a DDP habit): the model takes device 0's
    tessel::utils::set_random_seed(1000 + static_cast<std::uint64_t>(rank));
    seed001<tessel::data_parallel<>> model;
    tessel::utils::set_random_seed(1337);
    check_replicas_identical(model.get_weights(), "per-process seeds");
  }
  {  // an unseeded shuffle gives every process the same order
    auto ds = tessel::from_tensor_slices(d.x_flat, d.y_sparse).shuffle(64).batch(64);
    std::vector<std::int32_t> first = (*ds.begin()).second.values;
    std::vector<std::int32_t> root = first;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_INT32_T, 0, MPI_COMM_WORLD);
    check(root == first, "an unseeded shuffle gives every process process 0's order");
  }
  {  // a callback that fails on process 0 only fails fit() everywhere (no process left waiting)
    seed001<tessel::data_parallel<>> model;
    model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    tessel::callbacks::csv_logger log("/nonexistent-dir/tessel/log.csv");
    std::string message;
    try {
      model.fit(d.x_flat, d.y_sparse, {.batch_size = 32, .epochs = 1, .verbose = 0,
                                       .callbacks = {log}});
    } catch (const std::exception& e) {
      message = e.what();
    }
    const std::string expected = "a callback's on_train_begin failed on process 0 of " +
                                 std::to_string(tessel::num_processes()) +
                                 ": CSVLogger: cannot open";
    check(message.find(tessel::num_processes() > 1 ? expected : "CSVLogger: cannot open") !=
              std::string::npos,
          "a csv_logger that cannot open its file fails fit() on every process, naming process 0 "
          "and its error; got: " +
              message);
  }
  {  // new bucket options between computing and applying gradients keep the gradients
    seed001<tessel::data_parallel<>> model;
    model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    model.compute_loss_and_gradients(tessel::data::slice_rows(d.x_flat, 0, global_batch),
                                     tessel::data::slice_rows(d.y_sparse, 0, global_batch));
    std::vector<float> before(model.trainable_variables()[0]->size());
    tessel::backend::host::download(model.trainable_variables()[0]->gradient, before);
    model.set_gradient_options({.bucket_cap_mb = 0.1});
    std::vector<float> after(before.size());
    tessel::backend::host::download(model.trainable_variables()[0]->gradient, after);
    check(before == after && std::any_of(before.begin(), before.end(), [](float g) { return g != 0; }),
          "set_gradient_options keeps the computed gradients");
    bool threw = false;
    try {
      model.set_gradient_options({.bucket_cap_mb = -1});
    } catch (const tessel::value_error&) {
      threw = true;
    }
    check(threw, "a negative bucket_cap_mb is refused");
  }
}

void check_list_devices() {
  const auto devices = tessel::list_devices();
  check(devices.size() == static_cast<std::size_t>(tessel::num_processes()) &&
            devices.front() == "cpu:0" &&
            devices.back() == "cpu:" + std::to_string(tessel::num_processes() - 1),
        "list_devices lists one cpu device per process");
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    check_list_devices();
    const data d = load();
    check_empty_replicas(d);
    compare<seed000>("seed000 (mse, rmsprop, dropout)", d.x_images, d.y_onehot, d.x_test_images,
                     d.y_test_onehot,
                     [](auto& m) { m.compile({.loss = "mse", .metrics = {"accuracy"}}); });
    compare<seed001>(
        "seed001 (logits crossentropy, adam)", d.x_flat, d.y_sparse,
        tessel::data::reshape(d.x_test_images, {d.x_test_images.rows(), 784}), d.y_test_sparse,
        [](auto& m) {
          m.compile(tessel::optimizers::adam{},
                    tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                    {"accuracy"});
        });
    check_bucket_options(d);
    check_processes_agree(d);
    check_set_weights_broadcasts();
    check_uneven_batches(d);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("data_parallel_test");
}
