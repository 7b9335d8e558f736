// Collectives along any dimension of a row-major tensor (comm/dimension.hpp), on 1 to 4
// processes and through the communicator concept: a 3-D tensor of shape (4, 6, 8·n) — n the
// number of processes — whose element (i, j, k) is 10000·i + 100·j + k, split along each of its
// dimensions in turn. all_gather_dim must rebuild the whole tensor from the blocks,
// reduce_scatter_dim must give each process its block of the sum (every process contributes the
// tensor times rank + 1), and all_to_all_dim must turn a split along one dimension into a split
// along another. The same calls on comm::local_communicator (one process, copies) show the code
// compiles against the concept, not against MPI. Exit code 0 when every check passes.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <tessel/comm/communicator.hpp>
#include <tessel/comm/dimension.hpp>
#include <tessel/comm/local.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/world.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
namespace comm = tessel::comm;
static_assert(comm::communicator_like<comm::communicator>);
static_assert(comm::communicator_like<comm::local_communicator>);

using tessel::testing::check;

using shape = std::vector<std::size_t>;
float value(std::size_t i, std::size_t j, std::size_t k) {
  return static_cast<float>(10000 * i + 100 * j + k);
}
// The block of the tensor of values value(i, j, k) that starts at `off` and spans `ext`.
std::vector<float> block(const shape& off, const shape& ext) {
  std::vector<float> out;
  for (std::size_t i = 0; i < ext[0]; ++i)
    for (std::size_t j = 0; j < ext[1]; ++j)
      for (std::size_t k = 0; k < ext[2]; ++k)
        out.push_back(value(off[0] + i, off[1] + j, off[2] + k));
  return out;
}

template <class C>
void run(const C& c, const std::string& name) {
  const auto n = static_cast<std::size_t>(c.size()), r = static_cast<std::size_t>(c.rank());
  const shape whole{4, 6, 8 * n};
  std::vector<float> scratch;
  for (std::size_t dim = 0; dim < 3; ++dim) {
    shape local = whole, off{0, 0, 0};
    if (whole[dim] % n != 0) continue;  // (4, 6, ...) on 3 processes: dimensions 0 and 1
    local[dim] /= n;
    off[dim] = r * local[dim];
    const auto mine = block(off, local);
    const auto all = block({0, 0, 0}, whole);
    const std::string at = name + ", dimension " + std::to_string(dim);

    std::vector<float> gathered(all.size());
    comm::all_gather_dim(c, std::span<const std::size_t>(local), dim, std::span<const float>(mine),
                         std::span<float>(gathered), scratch);
    check(gathered == all, at + ": all_gather_dim rebuilds the whole tensor");

    std::vector<float> contribution(all.size()), reduced(mine.size());
    for (std::size_t e = 0; e < all.size(); ++e)
      contribution[e] = all[e] * static_cast<float>(r + 1);
    comm::reduce_scatter_dim(c, std::span<const std::size_t>(local), dim,
                             std::span<const float>(contribution), std::span<float>(reduced),
                             scratch);
    const float factor = static_cast<float>(n * (n + 1) / 2);  // the sum of rank + 1
    bool same = true;
    for (std::size_t e = 0; e < mine.size(); ++e) same = same && reduced[e] == mine[e] * factor;
    check(same, at + ": reduce_scatter_dim gives this process's block of the sum");

    for (std::size_t to = 0; to < 3; ++to) {
      if (to == dim || local[to] % n != 0) continue;
      shape result = local, result_off{0, 0, 0};
      result[dim] *= n;
      result[to] /= n;
      result_off[to] = r * result[to];
      std::vector<float> moved(mine.size());
      comm::all_to_all_dim(c, std::span<const std::size_t>(local), dim, to,
                           std::span<const float>(mine), std::span<float>(moved), scratch);
      check(moved == block(result_off, result),
            at + ": all_to_all_dim to dimension " + std::to_string(to));
    }
  }
  // A dimension the tensor lacks, and a buffer of the wrong size, are errors that say so.
  std::string message;
  try {
    std::vector<float> in(4), out(4 * n);
    const shape local{4};
    comm::all_gather_dim(c, std::span<const std::size_t>(local), 1, std::span<const float>(in),
                         std::span<float>(out), scratch);
  } catch (const tessel::value_error& e) {
    message = e.what();
  }
  check(message.find("dimension 1 of a tensor of shape (4,), which has 1 dimensions") !=
            std::string::npos,
        name + ": an absent dimension is named; got: " + message);
  message.clear();
  try {
    std::vector<float> in(5), out(8 * n);
    const shape local{2, 4};
    comm::all_gather_dim(c, std::span<const std::size_t>(local), 1, std::span<const float>(in),
                         std::span<float>(out), scratch);
  } catch (const tessel::value_error& e) {
    message = e.what();
  }
  check(message.find("the input holds 5 elements, but a tensor of shape (2, 4) has 8") !=
            std::string::npos,
        name + ": a wrongly sized buffer is named; got: " + message);
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    if (tessel::num_processes() > 1) {
      const comm::communicator world(MPI_COMM_WORLD, false);
      run(world, "MPI, " + std::to_string(world.size()) + " processes");
    }
    run(comm::local_communicator{}, "local_communicator");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("dimension_collectives_test");
}
