// seeds/001's MLP on Fashion-MNIST under tessel::mirrored_strategy<> against the same model under
// tessel::data_parallel<>, in one run: one epoch of each (the first 50,000 training images,
// batch 32, Adam, validation on the last 10,000), interleaved A B B A over --rounds rounds, the
// slowest process's wall seconds per epoch. The two should be the same within noise: a strategy
// is data_parallel's runtime under TensorFlow's names.
//   mpiexec -n 2 strategy_bench [--rounds R] [--samples N]
// Prints per epoch, then:
//   RESULT strategies mirrored_s=<median> data_parallel_s=<median> ratio=<mirrored/dp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {
using namespace tessel::layers;
template <class Dist>
using mlp = tessel::sequential<Dist, input<784>, dense<256, {.activation = "relu"}>,
                               dense<256, {.activation = "relu"}>, dense<10>>;

template <class Model, class Train, class Val>
double one_epoch(const Train& train, const Val& val) {
  Model model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  model.fit(train, {.epochs = 1, .verbose = 0, .validation_data = val});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t rounds = 3, samples = 50000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--samples") == 0) samples = std::strtoul(argv[++i], nullptr, 10);
  }
  const bench::seed001_data d = bench::load_seed001();
  samples = std::min(samples, d.x_train.rows());
  const auto train = tessel::from_tensor_slices(tessel::data::slice_rows(d.x_train, 0, samples),
                                                tessel::data::slice_rows(d.y_train, 0, samples))
                         .shuffle(static_cast<std::int64_t>(samples), 1)
                         .batch(32)
                         .prefetch(2);
  const auto val = tessel::from_tensor_slices(d.x_val, d.y_val).batch(32);
  tessel::mirrored_strategy<> strategy;
  std::vector<double> mirrored, dp;
  for (std::size_t r = 0; r < rounds; ++r) {
    // A B B A: neither goes first every time.
    if (r % 2 == 0) {
      mirrored.push_back(one_epoch<mlp<tessel::mirrored_strategy<>>>(train, val));
      dp.push_back(one_epoch<mlp<tessel::data_parallel<>>>(train, val));
    } else {
      dp.push_back(one_epoch<mlp<tessel::data_parallel<>>>(train, val));
      mirrored.push_back(one_epoch<mlp<tessel::mirrored_strategy<>>>(train, val));
    }
    if (tessel::process_id() == 0)
      std::printf("round %zu: mirrored_strategy %.3f s, data_parallel %.3f s\n", r + 1,
                  mirrored.back(), dp.back());
  }
  if (tessel::process_id() == 0)
    std::printf("RESULT strategies processes=%d mirrored_s=%.3f data_parallel_s=%.3f ratio=%.3f\n",
                tessel::num_processes(), median(mirrored), median(dp),
                median(mirrored) / median(dp));
  return 0;
}
