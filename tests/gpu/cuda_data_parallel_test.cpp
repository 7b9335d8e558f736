// data_parallel on the CUDA backend equals one device: run under `mpiexec -n 2` on a
// machine with one GPU, both processes on it (the host-staged MPI path of
// comm::cuda_communicator: NCCL refuses two ranks on one GPU). An MLP with dropout trains
// 20 steps of global batch 32 distributed, and the same model on one device (each process trains
// its own copy on the whole batches). Losses and metrics per step, weights and predictions agree
// within 1e-5 relative; the replicas hold the same bits; the collectives counted are the plan's
// (all_reduces over "batch" moving the gradients and the two sums of each step), in 0.1 MB
// buckets overlapped with the backward pass. The same model with its state split over the two
// processes (shard_state::optimizer, gradients and weights: ZeRO-1, -2 and -3, the weights
// gathered per layer on GPU memory) trains alike. Exit code 0 when all checks pass.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tessel/backend/cuda.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "../mpi/mpi_checks.hpp"

namespace {

using namespace tessel::layers;
using D = tessel::backend::cuda;
template <class Dist>
using mlp = tessel::basic_sequential<D, Dist, input<64>, dense<128, {.activation = "relu"}>,
                                     dropout<0.3>, dense<64, {.activation = "relu"}>, dense<10>>;
constexpr std::size_t steps = 20, global_batch = 32;
constexpr double tolerance = 1e-5;
using tessel::testing::check;
using tessel::testing::rel;

template <class Model>
std::vector<tessel::logs> train(Model& m, const tessel::array<float>& x,
                                const tessel::array<std::int32_t>& y) {
  std::vector<tessel::logs> out;
  for (const auto& [xb, yb] :
       tessel::from_tensor_slices(x, y).shuffle(static_cast<std::int64_t>(x.rows()), 7)
           .batch(global_batch))
    out.push_back(m.train_on_batch(xb, yb));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const std::size_t n = steps * global_batch;
    tessel::array<float> x({n, 64});
    tessel::array<std::int32_t> y({n});
    const tessel::random::stream s(11, 3);
    for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = s.normal(i);
    for (std::size_t i = 0; i < n; ++i) y.values[i] = static_cast<std::int32_t>(s.bits(i) % 10);

    mlp<tessel::one_device> one;
    mlp<tessel::data_parallel<>> dist;
    const std::vector<tessel::array<float>> wo0 = one.get_weights();
    one.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
    dist.compile(tessel::optimizers::adam{},
                 tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                 {tessel::metrics::sparse_categorical_accuracy{}});
    dist.set_weights(one.get_weights());
    dist.set_gradient_options({.bucket_cap_mb = 0.1, .overlap = true});
    dist.reset_communication_stats();
    const auto lo = train(one, x, y), ld = train(dist, x, y);
    check(lo.size() == steps && ld.size() == steps, "20 steps each");
    for (std::size_t i = 0; i < lo.size() && i < ld.size(); ++i)
      for (std::size_t k = 0; k < lo[i].size(); ++k)
        check(rel(lo[i][k].second, ld[i][k].second) <= tolerance,
              "step " + std::to_string(i) + " " + lo[i][k].first + ": one device " +
                  std::to_string(lo[i][k].second) + ", data_parallel " +
                  std::to_string(ld[i][k].second));
    const auto wo = one.get_weights(), wd = dist.get_weights();
    for (std::size_t v = 0; v < wo.size(); ++v) {
      check(rel(wd[v].values, wo[v].values) <= tolerance,
            "variable " + std::to_string(v) + " differs by " +
                std::to_string(rel(wd[v].values, wo[v].values)));
      if (tessel::num_processes() > 1) {
        std::vector<float> root = wd[v].values;
        MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
        check(root == wd[v].values, "variable " + std::to_string(v) + " differs from process 0's");
      }
    }
    const auto po = one.predict(x), pd = dist.predict(x);
    check(rel(pd.values, po.values) <= tolerance, "predictions differ by " +
                                                      std::to_string(rel(pd.values, po.values)));
    const auto& stats = dist.communication_stats();
    const std::size_t reduces = stats.count(tessel::collective::all_reduce, "batch");
    const bool distributed = tessel::num_processes() > 1;
    check(!distributed ||
              (stats.collectives.size() == 1 && reduces >= 2 * steps &&
               stats.collectives[0].bytes == steps * (4u * dist.count_params() + 16u)),
          "the collectives are the plan's: all_reduces over 'batch' of the gradients and the two "
          "sums, counted " +
              std::to_string(reduces));
    // The split states, against the same one-device run.
    auto split = [&]<tessel::shard_state S>(const char* name) {
      mlp<tessel::data_parallel<tessel::device_mesh<tessel::axis<"batch">>, S>> m;
      m.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
      m.set_weights(wo0);
      m.set_gradient_options({.bucket_cap_mb = 0.01});
      const auto ls = train(m, x, y);
      double worst = 0;
      for (std::size_t i = 0; i < lo.size() && i < ls.size(); ++i)
        worst = std::max(worst, rel(lo[i][0].second, ls[i][0].second));
      const auto ws = m.get_weights();
      for (std::size_t v = 0; v < wo.size(); ++v)
        worst = std::max(worst, rel(ws[v].values, wo[v].values));
      worst = std::max(worst, rel(m.predict(x).values, po.values));
      check(ls.size() == steps && worst <= tolerance,
            std::string(name) + ": losses, weights and predictions equal one device's (" +
                std::to_string(worst) + ")");
    };
    split.template operator()<tessel::shard_state::optimizer>("shard_state::optimizer");
    split.template operator()<tessel::shard_state::gradients>("shard_state::gradients");
    split.template operator()<tessel::shard_state::weights>("shard_state::weights");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("cuda_data_parallel_test");
}
