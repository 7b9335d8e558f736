// seeds/001's MLP under multi_worker_mirrored_strategy<> across two hosts (run it through
// scripts/two_hosts.sh: two network namespaces joined by a veth pair, Open MPI over TCP), and
// raw MPI_Allreduce of the same gradient buffers over the same link, side by side: the step
// time, the bytes each process passes to the collectives per step, and the time of the gradient
// reduction (the buckets reduced after the backward pass, overlap off, so that all of it is
// exposed) against MPI_Allreduce of a buffer of the same size: alone in a loop, and after each
// step of a one-device model on the process's half of the batch (so that its wait holds the
// processes' skew, as the trainer's does), interleaved over --rounds rounds.
//   scripts/two_hosts.sh two_hosts_bench [--rounds R] [--steps S]
// Prints per round, then:
//   RESULT two_hosts step_ms=.. bytes=.. tessel_reduce_ms=.. mpi_allreduce_ms=..
//          mpi_allreduce_after_compute_ms=.. ratio=<tessel / after compute>
#include <mpi.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {
using namespace tessel::layers;
using strategy_t = tessel::multi_worker_mirrored_strategy<>;
using mlp = tessel::sequential<strategy_t, input<784>, dense<256, {.activation = "relu"}>,
                               dense<256, {.activation = "relu"}>, dense<10>>;
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t rounds = 5, count = 100;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--steps") == 0)
      count = std::strtoul(argv[++i], nullptr, 10);
  }
  strategy_t strategy;
  const bench::seed001_data d = bench::load_seed001();
  mlp model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  model.set_gradient_options({.overlap = false});
  std::vector<std::pair<tessel::array<float>, tessel::array<std::int32_t>>> batches;
  for (std::size_t s = 0; s < count; ++s)
    batches.emplace_back(tessel::data::slice_rows(d.x_train, s * 32, s * 32 + 32),
                         tessel::data::slice_rows(d.y_train, s * 32, s * 32 + 32));
  for (std::size_t s = 0; s < 5; ++s) model.train_on_batch(batches[s].first, batches[s].second);
  std::vector<double> step_ms, reduce_ms, raw_ms, stepped_ms;
  const int me = tessel::process_id();
  tessel::sequential<tessel::one_device, input<784>, dense<256, {.activation = "relu"}>,
                     dense<256, {.activation = "relu"}>, dense<10>>
      local;
  local.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  std::size_t bytes = 0, floats = 0;
  for (std::size_t r = 0; r < rounds; ++r) {
    model.reset_communication_stats();
    MPI_Barrier(MPI_COMM_WORLD);
    double start = bench::now();
    for (const auto& [x, y] : batches) model.train_on_batch(x, y);
    double s = bench::now() - start;
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const tessel::communication_stats st = model.communication_stats();
    double exposed = st.exposed_seconds;
    MPI_Allreduce(MPI_IN_PLACE, &exposed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    bytes = 0;
    for (const auto& c : st.collectives) bytes += c.bytes;
    bytes /= count;
    floats = st.bytes / sizeof(float);
    step_ms.push_back(1e3 * s / static_cast<double>(count));
    reduce_ms.push_back(1e3 * exposed / static_cast<double>(count));
    // The same gradient buffer, all-reduced by MPI directly.
    std::vector<float> buffer(floats, 1.0f);
    MPI_Barrier(MPI_COMM_WORLD);
    start = bench::now();
    for (std::size_t k = 0; k < count; ++k)
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    s = bench::now() - start;
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    raw_ms.push_back(1e3 * s / static_cast<double>(count));
    // The same all-reduce after each step of a one-device model on this process's 16 rows: the
    // wait then includes the processes' skew, as the trainer's does.
    double after_compute = 0;
    for (const auto& [x, y] : batches) {
      const std::size_t half = x.rows() / 2, first = half * static_cast<std::size_t>(me);
      local.train_on_batch(tessel::data::slice_rows(x, first, first + half),
                           tessel::data::slice_rows(y, first, first + half));
      const double t0 = bench::now();
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      after_compute += bench::now() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &after_compute, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    stepped_ms.push_back(1e3 * after_compute / static_cast<double>(count));
    if (tessel::process_id() == 0)
      std::printf(
          "round %zu: step %.3f ms, %zu bytes per step; gradient reduction %.3f ms "
          "against MPI_Allreduce of %zu floats %.3f ms alone, %.3f ms after each "
          "step's compute\n",
          r + 1, step_ms.back(), bytes, reduce_ms.back(), floats, raw_ms.back(), stepped_ms.back());
  }
  if (tessel::process_id() == 0)
    std::printf(
        "RESULT two_hosts step_ms=%.3f bytes=%zu tessel_reduce_ms=%.3f "
        "mpi_allreduce_ms=%.3f mpi_allreduce_after_compute_ms=%.3f ratio=%.3f\n",
        bench::median(step_ms), bytes, bench::median(reduce_ms), bench::median(raw_ms),
        bench::median(stepped_ms), bench::median(reduce_ms) / bench::median(stepped_ms));
  return 0;
}
