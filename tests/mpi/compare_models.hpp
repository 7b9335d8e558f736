// What the model-parallel and functional tests share: a fixed synthetic data set, and the
// comparison of a distributed model with the same model on one device (20 training steps:
// losses, accuracy, every weight, predictions and evaluate; then one more step whose collectives
// must be the plan's, with their bytes, and counted by communication_stats).
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <tuple>
#include <vector>

#include "mpi_checks.hpp"

namespace tessel::testing {

inline constexpr double tolerance = 1e-5;
// Adam's weights: where a gradient cancels to the size of epsilon (1e-7), Adam's update
// g / (|g| + eps) turns the gradient's rounding (a different summation order: each device sums
// its rows, then the devices' sums are added) into up to 1 / (4 eps) times as much change. The
// seeds/000 model on 2x4 measures about 1e-5 (1.03e-5 after 20 steps, 1.15e-5 after 10);
// RMSprop stays within 1e-6 here.
inline constexpr double adam_weight_tolerance = 5e-5;
inline constexpr std::size_t batch = 16, steps = 20;

// A fixed synthetic data set: inputs in [0, 1), one-hot targets.
struct data_set {
  array<float> x;
  array<float> y;
};
inline data_set make_data(std::size_t n, std::size_t features, std::size_t classes) {
  data_set d{array<float>({n, features}), array<float>({n, classes})};
  random::stream s(5, 9);
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x.values[i] = s.uniform(i);
  for (std::size_t r = 0; r < n; ++r)
    d.y.values[r * classes +
               static_cast<std::size_t>(s.uniform(d.x.size() + r) * classes) % classes] = 1.0f;
  return d;
}

// The class index of each one-hot row.
inline array<std::int32_t> argmax_labels(const array<float>& y) {
  array<std::int32_t> labels({y.rows()});
  const std::size_t classes = y.size() / y.rows();
  for (std::size_t r = 0; r < y.rows(); ++r)
    for (std::size_t j = 0; j < classes; ++j)
      if (y.values[r * classes + j] == 1.0f) labels.values[r] = static_cast<std::int32_t>(j);
  return labels;
}

// `loss`: a Keras name, one of the library's losses, or a user's loss type. `options`: the
// sharded model's gradient buckets.
template <class Sharded, class Single, class Y, class Loss = loss_spec>
void compare(const char* what, const array<float>& x_all, const array<Y>& y_all,
             const char* optimizer = "rmsprop", Loss given = "mse",
             gradient_options options = {}) {
  const loss_function<typename Single::backend> loss(given);
  Sharded sharded;
  Single single;
  sharded.compile({.optimizer = optimizer, .loss = loss, .metrics = {"accuracy"}});
  single.compile({.optimizer = optimizer, .loss = loss, .metrics = {"accuracy"}});
  sharded.set_gradient_options(options);
  std::string name(what);
  check(sharded.get_weights() == single.get_weights(), name + ": the same initial weights");
  double worst_loss = 0, worst_metric = 0;
  for (std::size_t step = 0; step < steps; ++step) {
    const std::size_t first = (step * batch) % (x_all.rows() - batch + 1);
    const array<float> x = data::slice_rows(x_all, first, first + batch);
    const array<Y> y = data::slice_rows(y_all, first, first + batch);
    const logs a = sharded.train_on_batch(x, y), b = single.train_on_batch(x, y);
    worst_loss = std::max(worst_loss, rel(*find_log(a, "loss"), *find_log(b, "loss")));
    worst_metric = std::max(worst_metric, rel(*find_log(a, "accuracy"), *find_log(b, "accuracy")));
  }
  const auto wa = sharded.get_weights(), wb = single.get_weights();
  double worst_weight = 0;
  check(wa.size() == wb.size(), name + ": as many variables");
  for (std::size_t i = 0; i < wa.size() && i < wb.size(); ++i)
    worst_weight = std::max(worst_weight, rel(wa[i].values, wb[i].values));
  const array<float> xt = data::slice_rows(x_all, 0, 32);
  const array<Y> yt = data::slice_rows(y_all, 0, 32);
  const double worst_prediction =
      rel(sharded.predict(xt, 16).values, single.predict(xt, 16).values);
  const logs ea = sharded.evaluate(xt, yt, 16, 0), eb = single.evaluate(xt, yt, 16, 0);
  const double worst_evaluate = rel(*find_log(ea, "loss"), *find_log(eb, "loss"));
  check(worst_loss <= tolerance, name + ": losses " + std::to_string(worst_loss));
  check(worst_metric <= tolerance, name + ": accuracy " + std::to_string(worst_metric));
  const double weight_tolerance =
      std::string(optimizer) == "adam" ? adam_weight_tolerance : tolerance;
  check(worst_weight <= weight_tolerance, name + ": weights " + std::to_string(worst_weight));
  check(worst_prediction <= tolerance, name + ": predictions " + std::to_string(worst_prediction));
  check(worst_evaluate <= tolerance, name + ": evaluate " + std::to_string(worst_evaluate));

  // One more step, its collectives against the plan's with their bytes (in buckets of one
  // gradient each, so that each gradient's all_reduce is one collective as planned; the buckets
  // start as the backward pass reaches them, so the order differs), and counted by kind and axis.
  sharded.set_gradient_options({.bucket_cap_mb = 1e-6, .overlap = options.overlap});
  sharded.clear_collectives();
  sharded.reset_communication_stats();
  sharded.train_on_batch(data::slice_rows(x_all, 0, batch), data::slice_rows(y_all, 0, batch));
  model_desc d = Sharded::describe(loss.plan_rule(), 4);
  d.argmax_metrics = true;
  const model_plan p = plan_model(Sharded::distribution::value, sharded.mesh().shape(), d, batch);
  std::vector<collective_record> planned;
  for (const auto& s : p)
    if (s.step.kind != collective::slice) planned.push_back(record_of(s.step));
  std::vector<collective_record> ran = sharded.collectives().records;
  const auto order = [](const collective_record& a, const collective_record& b) {
    return std::tuple(a.kind, a.axis, a.dim, a.to_dim, a.bytes) <
           std::tuple(b.kind, b.axis, b.dim, b.to_dim, b.bytes);
  };
  std::sort(ran.begin(), ran.end(), order);
  std::sort(planned.begin(), planned.end(), order);
  const communication_stats stats = sharded.communication_stats();
  bool counts_match = true;
  for (const auto& c : stats.collectives) {
    std::size_t n = 0, bytes = 0;
    for (const auto& s : p)
      if (s.step.kind == c.kind && p.mesh.names[s.step.axis].view() == c.axis)
        n += 1, bytes += s.step.bytes;
    counts_match = counts_match && n == c.count && bytes == c.bytes;
  }
  check(counts_match && stats.total_collectives() == planned.size(),
        name + ": communication_stats counts the plan's collectives by kind and axis");
  check(ran == planned, name + ": the collectives run (" + std::to_string(ran.size()) +
                            ") are the plan's (" + std::to_string(planned.size()) + ")");
  if (process_id() == 0 && ran != planned) {
    for (const auto& r : ran)
      std::printf("  ran %s axis %d dim %d bytes %zu\n", std::string(name_of(r.kind)).c_str(),
                  r.axis, r.dim, r.bytes);
    for (const auto& s : p)
      std::printf("  planned %s %s bytes %zu\n", step_name(p, s).c_str(),
                  to_string(s.step, p.mesh).c_str(), s.step.bytes);
  }
  if (process_id() == 0)
    std::printf(
        "%s: worst relative difference from one device: loss %.2e, accuracy %.2e, "
        "weights %.2e, predictions %.2e, evaluate %.2e; %zu collectives per step as "
        "planned, %zu gradients reduced in buckets\n",
        what, worst_loss, worst_metric, worst_weight, worst_prediction, worst_evaluate,
        planned.size(), stats.buckets);
}

}  // namespace tessel::testing
