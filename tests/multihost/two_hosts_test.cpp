// seeds/001's program across two hosts: scripts/two_hosts.sh runs this in two network namespaces
// (one process on each, Open MPI's TCP transport between them, each process given the TF_CONFIG
// of its rank). seeds/001's model (Input(784) -> Dense(256, relu) -> Dense(256, relu) ->
// Dense(10) logits; Adam, sparse categorical crossentropy from logits) under
// multi_worker_mirrored_strategy<> trains 20 global batches of 32 Fashion-MNIST images, and
// each process trains the same model on one device beside it: the losses, the weights and the
// predictions must be one device's (1e-5 relative to the largest value; Adam's weights 5e-5, as
// tests/mpi's), and the two processes must run on two hosts (their hostnames differ).
//
//   two_hosts_test [--kill-at S]   the process on the second host kills itself (SIGKILL) at
//                                  step S: the job must end, naming it (expect_host_lost.cmake).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "../mpi/mpi_checks.hpp"

namespace {
using namespace tessel::layers;
template <class Dist>
using seed_001 = tessel::sequential<Dist, input<784>, dense<256, {.activation = "relu"}>,
                                    dense<256, {.activation = "relu"}>, dense<10>>;

using tessel::testing::rel;

int run(int argc, char** argv) {
  int kill_at = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--kill-at") == 0) kill_at = std::atoi(argv[++i]);

  tessel::multi_worker_mirrored_strategy<> strategy;
  const int me = tessel::process_id(), n = tessel::num_processes();
  // Each process's hostname, gathered: two hosts, one process on each.
  std::array<std::uint8_t, 64> host{};
  ::gethostname(reinterpret_cast<char*>(host.data()), host.size() - 1);
  std::vector<std::uint8_t> hosts(host.size() * static_cast<std::size_t>(n));
  tessel::runtime::world().all_gather(std::span<const std::uint8_t>(host),
                                      std::span<std::uint8_t>(hosts));
  const std::string first(reinterpret_cast<const char*>(hosts.data())),
      second(n > 1 ? reinterpret_cast<const char*>(hosts.data() + host.size()) : "");
  if (n != 2 || first == second || !strategy.cluster) {
    std::fprintf(stderr,
                 "two_hosts_test: needs 2 processes on two hosts with TF_CONFIG (got %d "
                 "processes on '%s' and '%s'); run it through scripts/two_hosts.sh\n",
                 n, first.c_str(), second.c_str());
    return 1;
  }

  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  const auto x_all = tessel::data::reshape(tessel::data::to_float(train.first, 1.0f / 255.0f),
                                           {train.first.shape[0], 784});
  const auto y_all = tessel::data::to_int32(train.second);

  const auto scope = strategy.scope();
  seed_001<tessel::multi_worker_mirrored_strategy<>> model;
  seed_001<tessel::one_device> single;
  const auto compile = [](auto& m) {
    m.compile(tessel::optimizers::adam{},
              tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
              {tessel::metrics::sparse_categorical_accuracy{}});
  };
  compile(model);
  compile(single);
  single.set_weights(model.get_weights());
  double worst_loss = 0, last_loss = 0;
  for (std::size_t step = 0; step < 20; ++step) {
    if (static_cast<int>(step) == kill_at && me == 1) std::raise(SIGKILL);
    const auto x = tessel::data::slice_rows(x_all, step * 32, step * 32 + 32);
    const auto y = tessel::data::slice_rows(y_all, step * 32, step * 32 + 32);
    const double a = *tessel::find_log(model.train_on_batch(x, y), "loss");
    const double b = *tessel::find_log(single.train_on_batch(x, y), "loss");
    worst_loss = std::max(worst_loss, rel(a, b));
    last_loss = a;
  }
  double worst_weight = 0;
  const auto wa = model.get_weights(), wb = single.get_weights();
  for (std::size_t i = 0; i < wa.size(); ++i)
    worst_weight = std::max(worst_weight, rel(wa[i].values, wb[i].values));
  const auto xt = tessel::data::slice_rows(x_all, 50000, 50064);
  const double worst_prediction = rel(model.predict(xt, 32).values, single.predict(xt, 32).values);
  const bool ok = worst_loss <= 1e-5 && worst_weight <= 5e-5 && worst_prediction <= 1e-5;
  if (me == 0)
    std::printf(
        "two_hosts_test: 2 workers on %s and %s (TF_CONFIG task %d and 1); 20 steps of "
        "seeds/001 equal one device: worst relative difference loss %.2e, weights "
        "%.2e, predictions %.2e; last loss %.6f; %s\n",
        first.c_str(), second.c_str(), strategy.cluster->task_index, worst_loss, worst_weight,
        worst_prediction, last_loss, ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
