// What tessel adds to a small collective: the axis dispatch and the collective watchdog's marks
// (a count in shared memory, a wait begun and ended: a few atomic stores and two clock reads).
// Blocking all_reduce of 1 to 16384 floats, tessel's `comm::all_reduce<"batch">` against raw
// `MPI_Allreduce` on a congruent duplicate of MPI_COMM_WORLD, interleaved in rounds of 200 calls
// each (ABBA order), every round timed on each rank and the slowest rank's taken; the figure is
// the median per-call time over the rounds, and tessel/raw their ratio.
//
//   mpiexec -n 2 collective_latency_bench [--rounds R]
//   TESSEL_COLLECTIVE_TIMEOUT=0 mpiexec -n 2 collective_latency_bench   (the watchdog off)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <tessel/runtime/collectives.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/process_mesh.hpp>
#include <vector>

namespace {
using pmesh_t = tessel::process_mesh<tessel::device_mesh<tessel::axis<"batch">>>;
constexpr int calls = 200;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  int rounds = 30;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  if (tessel::num_processes() < 2) {
    std::fprintf(stderr, "collective_latency_bench: start it with `mpiexec -n 2 ...`\n");
    return 2;
  }
  const pmesh_t pm = pmesh_t::bind();
  MPI_Comm raw{};
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  const int rank = tessel::process_id();
  if (rank == 0)
    std::printf("blocking all_reduce, %d processes, collective timeout %g s; median per call "
                "over %d rounds of %d calls, slowest rank\n\n"
                "| floats | tessel us | raw MPI_Allreduce us | tessel/raw |\n"
                "| ---: | ---: | ---: | ---: |\n",
                tessel::num_processes(), tessel::collective_timeout().count(), rounds, calls);
  std::vector<float> data(16384, 1.0f);
  for (std::size_t n = 1; n <= data.size(); n *= 4) {
    const std::span<float> buf(data.data(), n);
    auto time = [&](bool ours) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int c = 0; c < calls; ++c) {
        if (ours) tessel::comm::all_reduce<"batch">(pm, buf);
        else MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, raw);
      }
      double t = (MPI_Wtime() - t0) / calls;
      MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      std::fill(buf.begin(), buf.end(), 1.0f);  // keep the values finite
      return t;
    };
    time(true), time(false);  // warm-up
    std::vector<double> ours, theirs;
    for (int r = 0; r < rounds; ++r) {
      const bool abba = r % 2 == 0;
      const double a = time(abba), b = time(!abba);
      ours.push_back(abba ? a : b);
      theirs.push_back(abba ? b : a);
    }
    if (rank == 0)
      std::printf("| %zu | %.2f | %.2f | %.3f |\n", n, median(ours) * 1e6, median(theirs) * 1e6,
                  median(ours) / median(theirs));
  }
  MPI_Comm_free(&raw);
  return 0;
}
