// memory_plan_test's measurement (memory_plan_test.cpp says what it checks), shared by its two
// translation units, each building its own group of model types: the data-parallel models, and
// the Megatron pairs under model_parallel (memory_plan_megatron.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace tessel::testing::memory_plan_cases {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;

inline constexpr const char* name_of(shard_state s) {
  return s == shard_state::none        ? "none"
         : s == shard_state::optimizer ? "optimizer"
         : s == shard_state::gradients ? "gradients"
                                       : "weights";
}

template <template <shard_state> class M, shard_state S>
memory_plan measure(const char* model, std::vector<std::size_t> shape, double tolerance,
                    gradient_options options = {}) {
  const std::size_t batch = shape[0];
  array<float> x(shape);
  array<std::int32_t> y({batch});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 17) / 17.0f;
  for (std::size_t i = 0; i < batch; ++i) y.values[i] = static_cast<std::int32_t>(i % 10);
  const memory_info before = get_memory_info();
  reset_memory_stats();
  double measured = 0, planned = 0, built = 0;
  std::size_t weights = 0, slots = 0;
  memory_plan plan{};
  {
    M<S> m;
    // (Before compile: a change of buckets after it gathers a split state whole once.)
    m.set_gradient_options(options);
    m.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    built = static_cast<double>(get_memory_info().peak - before.current);
    reset_memory_stats();
    for (int step = 0; step < 2; ++step) m.train_on_batch(x, y);
    plan = m.memory(batch);
    // The peak from before the model is built: under split weights too, where each process
    // draws its parts of the initial weights alone (the whole weights are never held).
    measured = std::max(built, static_cast<double>(get_memory_info().peak - before.current));
    // (Under split weights this read gathers them whole: after the measurement.)
    planned = static_cast<double>(plan.peak());
    for (const auto& w : m.trainable_state()) weights += w.is_tensor() ? w.tensor().size() : 0;
    slots = m.optimizer_state_values();
  }
  const double diff = (planned - measured) / measured;
  const std::string what = std::string(model) + ", shard_state::" + name_of(S);
  check(std::abs(diff) <= tolerance,
        what + ": the plan's peak (" + std::to_string(plan.peak()) + " B) is within " +
            std::to_string(tolerance * 100) + "% of the measured peak (" +
            std::to_string(static_cast<std::size_t>(measured)) + " B)");
  // The plan's optimizer state is what the process keeps: the parts under a split state.
  check(plan.optimizer_state == slots * sizeof(float),
        what + ": the plan's optimizer state (" + std::to_string(plan.optimizer_state) +
            " B) is the slots the process keeps (" + std::to_string(slots * sizeof(float)) + " B)");
  const bool split_weights = S == shard_state::weights && num_processes() > 1;
  check(split_weights ||
            (plan.weights >= weights * sizeof(float) &&
             plan.weights < (weights + 4 * 8 * static_cast<std::size_t>(num_processes())) * 4),
        what + ": the plan's weights are the model's, padded at most to the processes");
  if (process_id() == 0)
    std::printf(
        "%s, batch %zu: plan %.2f MB (weights %.2f, gradients %.2f, optimizer state "
        "%.2f, activations %.2f, activation gradients %.2f, communication %.2f); "
        "measured peak %.2f MB (building and compiling it %.2f MB); %+.3f%%\n",
        what.c_str(), batch, planned / 1e6, plan.weights / 1e6, plan.gradients / 1e6,
        plan.optimizer_state / 1e6, plan.activations / 1e6, plan.activation_gradients / 1e6,
        plan.communication / 1e6, measured / 1e6, built / 1e6, diff * 100);
  return plan;
}

template <template <shard_state> class M>
void each(const char* model, const std::vector<std::size_t>& shape, double tolerance,
          double bucket_cap_mb = 25.0) {
  const gradient_options o{.bucket_cap_mb = bucket_cap_mb};
  measure<M, shard_state::none>(model, shape, tolerance, o);
  const memory_plan one = measure<M, shard_state::optimizer>(model, shape, tolerance, o);
  const memory_plan two = measure<M, shard_state::gradients>(model, shape, tolerance, o);
  const memory_plan three = measure<M, shard_state::weights>(model, shape, tolerance, o);
  // Split weights in a window of two layers take less than the whole weights where the parts and
  // the window are less: in the deeper models.
  if (num_processes() > 1 && bucket_cap_mb < 1)
    check(three.weights < two.weights && three.peak() < two.peak(),
          std::string(model) + ": shard_state::weights holds less weight memory (" +
              std::to_string(three.weights) + " B) than shard_state::gradients (" +
              std::to_string(two.weights) + " B), and a lower peak");
  // Reduce-scattered gradients in transient buckets take less than the whole buffer where the
  // parts and two buckets are less (on 1 process nothing is split).
  if (num_processes() > 1 && bucket_cap_mb < 1)
    check(two.gradients < one.gradients,
          std::string(model) + ": shard_state::gradients holds less gradient memory (" +
              std::to_string(two.gradients) + " B) than shard_state::optimizer (" +
              std::to_string(one.gradients) + " B)");
  if (bucket_cap_mb >= 1) return;
  // Without overlap the windows hold one layer at a time, not two: less again.
  const std::string serial = std::string(model) + ", no overlap";
  const gradient_options none{.bucket_cap_mb = bucket_cap_mb, .overlap = false};
  const memory_plan two_serial =
      measure<M, shard_state::gradients>(serial.c_str(), shape, tolerance, none);
  const memory_plan three_serial =
      measure<M, shard_state::weights>(serial.c_str(), shape, tolerance, none);
  if (num_processes() > 1)
    check(two_serial.gradients < two.gradients && three_serial.weights < three.weights &&
              three_serial.peak() < three.peak(),
          serial + ": the windows of one layer hold less (gradients " +
              std::to_string(two_serial.gradients) + " B against " +
              std::to_string(two.gradients) + ", weights " +
              std::to_string(three_serial.weights) + " B against " +
              std::to_string(three.weights) + ")");
}

// The Megatron pair and its deeper variant on 2x1 (2 processes) and 2x2 (4), each shard_state.
void megatron_cases();

}  // namespace tessel::testing::memory_plan_cases
