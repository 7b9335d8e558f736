// Where a training step's time goes: seeds/001's MLP (784-256-256-10, Adam and batch 32 by default)
// on Fashion-MNIST's training images, stepped with the custom-loop pieces
// (compute_loss_and_gradients, then apply_gradients) after a warm-up, with every job of the
// host backend's thread pool timed (thread_pool::observer): each job's median time in the order
// the step runs them, and the time outside any job (the work too small to split: the last
// layer, the loss and metrics, the activation gradients below the split threshold, the batch's
// upload and the bookkeeping).
//   step_breakdown [--steps N] [--batch B] [--optimizer adam|rmsprop|sgd]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {
using namespace tessel::layers;
using model_t = tessel::sequential<input<784>, dense<256, {.activation = "relu"}>,
                                   dense<256, {.activation = "relu"}>, dense<10>>;
using clock_type = tessel::backend::thread_pool::clock;

std::vector<double> jobs;  // the current step's jobs, in microseconds
void observe(clock_type::time_point begin, clock_type::time_point end) {
  jobs.push_back(std::chrono::duration<double, std::micro>(end - begin).count());
}
using bench::median;
double since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t steps = 1000;
  std::int64_t batch = 32;
  const char* optimizer = "adam";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--batch") == 0) batch = std::strtol(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--optimizer") == 0) optimizer = argv[++i];
  }
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  const auto x_all = tessel::data::reshape(tessel::data::to_float(train.first, 1.0f / 255.0f),
                                           {train.first.shape[0], 784});
  const auto y_all = tessel::data::to_int32(train.second);
  std::vector<std::pair<tessel::array<float>, tessel::array<std::int32_t>>> batches;
  for (const auto& [x, y] : tessel::from_tensor_slices(x_all, y_all).shuffle(60000, 1).batch(batch))
    batches.emplace_back(x, y);

  model_t model;
  model.compile(optimizer,
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  const std::size_t warm_up = 300;
  std::vector<double> total, gradients, update, outside;
  std::vector<std::vector<double>> job_times;
  tessel::backend::thread_pool::observer() = observe;
  for (std::size_t s = 0; s < warm_up + steps; ++s) {
    const auto& [x, y] = batches[s % batches.size()];
    jobs.clear();
    const auto t0 = clock_type::now();
    model.compute_loss_and_gradients(x, y);
    const double g = since(t0);
    const auto t1 = clock_type::now();
    model.apply_gradients();
    const double u = since(t1), t = since(t0);
    if (s < warm_up) continue;
    total.push_back(t);
    gradients.push_back(g);
    update.push_back(u);
    double in_jobs = 0;
    for (double j : jobs) in_jobs += j;
    outside.push_back(t - in_jobs);
    if (job_times.size() < jobs.size()) job_times.resize(jobs.size());
    for (std::size_t j = 0; j < jobs.size(); ++j) job_times[j].push_back(jobs[j]);
  }
  tessel::backend::thread_pool::observer() = nullptr;

  std::printf("seeds/001 MLP, %s, batch %lld, %zu threads, medians of %zu steps (us)\n",
              optimizer, static_cast<long long>(batch), tessel::default_backend::threads(), steps);
  std::printf("step %.1f = compute_loss_and_gradients %.1f + apply_gradients %.1f\n",
              median(total), median(gradients), median(update));
  for (std::size_t j = 0; j < job_times.size(); ++j)
    std::printf("  pool job %zu: %.1f (in %zu of the steps)\n", j + 1, median(job_times[j]),
                job_times[j].size());
  std::printf("  outside the pool's jobs: %.1f\n", median(outside));
  std::printf("RESULT step_breakdown us_per_step=%.1f gradients_us=%.1f update_us=%.1f "
              "outside_jobs_us=%.1f jobs=%zu\n",
              median(total), median(gradients), median(update), median(outside),
              job_times.size());
}
