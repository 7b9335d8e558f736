// tf.distribute's cross-device reductions side by side in one run, on seeds/001's MLP
// (Input(784) -> Dense(256, relu) -> Dense(256, relu) -> Dense(10); Adam; global batch 32 of
// Fashion-MNIST): mirrored_strategy<> (one all-reduce of the gradients), mirrored_strategy<...,
// reduction_to_one_device> (a reduce to process 0, then a broadcast of the sum) and
// central_storage_strategy<> (a reduce to process 0, the update there once, a broadcast of the
// variables). Each runs --steps train_on_batch steps, interleaved over --rounds rounds (the order
// rotated every round); the slowest process's milliseconds per step, and the bytes each process
// passes to the collectives per step (communication_stats).
//   mpiexec -n N central_storage_bench [--rounds R] [--steps S]
// Prints per round, then:
//   RESULT central_storage processes=N mirrored_ms=.. to_one_ms=.. central_ms=..
//          mirrored_bytes=.. to_one_bytes=.. central_bytes=..
#include <mpi.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {
using namespace tessel::layers;
template <class Dist>
using mlp = tessel::sequential<Dist, input<784>, dense<256, {.activation = "relu"}>,
                               dense<256, {.activation = "relu"}>, dense<10>>;
using to_one = tessel::mirrored_strategy<tessel::device_mesh<tessel::axis<"batch">>,
                                         tessel::reduction_to_one_device>;

struct timing {
  double ms_per_step = 0;
  std::size_t bytes_per_step = 0;
};

template <class Model>
timing steps(const bench::seed001_data& d, std::size_t count) {
  Model model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  const auto batch = [&](std::size_t s) {
    const std::size_t first = (s * 32) % (d.x_train.rows() - 32);
    return std::pair(tessel::data::slice_rows(d.x_train, first, first + 32),
                     tessel::data::slice_rows(d.y_train, first, first + 32));
  };
  for (std::size_t s = 0; s < 5; ++s) {  // warm up
    const auto [x, y] = batch(s);
    model.train_on_batch(x, y);
  }
  std::vector<std::pair<tessel::array<float>, tessel::array<std::int32_t>>> batches;
  for (std::size_t s = 0; s < count; ++s) batches.push_back(batch(s + 5));
  model.reset_communication_stats();
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = bench::now();
  for (const auto& [x, y] : batches) model.train_on_batch(x, y);
  double s = bench::now() - start;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  std::size_t bytes = 0;
  for (const auto& c : model.communication_stats().collectives) bytes += c.bytes;
  return {1e3 * s / static_cast<double>(count), bytes / count};
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t rounds = 5, count = 300;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--steps") == 0)
      count = std::strtoul(argv[++i], nullptr, 10);
  }
  const bench::seed001_data d = bench::load_seed001();
  std::array<std::vector<double>, 3> ms;
  std::array<std::size_t, 3> bytes{};
  const std::array<const char*, 3> names{"mirrored (all-reduce)", "mirrored (to one device)",
                                         "central storage"};
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < 3; ++k) {
      const std::size_t which = (k + r) % 3;  // rotated: none goes first every round
      const timing t = which == 0   ? steps<mlp<tessel::mirrored_strategy<>>>(d, count)
                       : which == 1 ? steps<mlp<to_one>>(d, count)
                                    : steps<mlp<tessel::central_storage_strategy<>>>(d, count);
      ms[which].push_back(t.ms_per_step);
      bytes[which] = t.bytes_per_step;
    }
    if (tessel::process_id() == 0)
      std::printf("round %zu: %s %.3f ms, %s %.3f ms, %s %.3f ms per step\n", r + 1, names[0],
                  ms[0].back(), names[1], ms[1].back(), names[2], ms[2].back());
  }
  if (tessel::process_id() == 0)
    std::printf(
        "RESULT central_storage processes=%d mirrored_ms=%.3f to_one_ms=%.3f "
        "central_ms=%.3f mirrored_bytes=%zu to_one_bytes=%zu central_bytes=%zu\n",
        tessel::num_processes(), bench::median(ms[0]), bench::median(ms[1]), bench::median(ms[2]),
        bytes[0], bytes[1], bytes[2]);
  return 0;
}
