// comm::cuda_communicator on host memory (run under `mpiexec -n 2`; no GPU needed): every
// collective, blocking and not, gives what comm::communicator gives, as the trainer's loss sums
// (host memory) go through it on the CUDA backend. Its GPU-memory path runs in
// gpu_data_parallel_test. Exit code 0 when all checks pass.
#include <mpi.h>

#include <numeric>
#include <string>
#include <tessel/comm/cuda_communicator.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "../mpi/mpi_checks.hpp"

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  using tessel::testing::check;
  MPI_Comm dup{};
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  const tessel::comm::cuda_communicator c(dup, true, "test");
  const int n = c.size(), r = c.rank();
  std::vector<double> sums{1.0 + r, 2.0 * r};
  c.all_reduce(std::span<double>(sums));
  check(sums[0] == n + n * (n - 1) / 2.0 && sums[1] == n * (n - 1.0), "all_reduce");
  std::vector<float> mx{static_cast<float>(r)};
  c.all_reduce(std::span<float>(mx), tessel::comm::reduce_op::max);
  check(mx[0] == n - 1, "all_reduce max");
  std::vector<float> mine(3, static_cast<float>(r)), all(3 * static_cast<std::size_t>(n));
  c.all_gather(std::span<const float>(mine), std::span<float>(all));
  for (int p = 0; p < n; ++p) check(all[3 * static_cast<std::size_t>(p)] == p, "all_gather");
  std::vector<float> in(3 * static_cast<std::size_t>(n), 1.0f), out(3);
  c.reduce_scatter(std::span<const float>(in), std::span<float>(out));
  check(out[0] == n && out[2] == n, "reduce_scatter");
  std::vector<std::uint64_t> seed{r == 0 ? 42u : 0u};
  c.broadcast(std::span<std::uint64_t>(seed), 0);
  check(seed[0] == 42u, "broadcast");
  std::vector<std::int32_t> to(static_cast<std::size_t>(n)), from(static_cast<std::size_t>(n));
  std::iota(to.begin(), to.end(), r * 100);
  c.all_to_all(std::span<const std::int32_t>(to), std::span<std::int32_t>(from));
  for (int p = 0; p < n; ++p) check(from[static_cast<std::size_t>(p)] == p * 100 + r, "all_to_all");
  std::vector<float> g(1000, 0.5f);
  auto req = c.iall_reduce(std::span<float>(g));
  while (!req.test()) {
  }
  req.wait();
  check(g[999] == 0.5f * n && !req.pending(), "iall_reduce");
  c.barrier();
  return tessel::testing::finish("cuda_communicator_host_test");
}
