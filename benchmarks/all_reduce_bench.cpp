// all_reduce of float buffers: tessel's `comm::all_reduce<"batch">` (blocking) and
// `comm::iall_reduce<"batch">(...).wait()` (non-blocking) on a process_mesh over a 1-D
// run-time-sized mesh, against raw `MPI_Allreduce(MPI_IN_PLACE, ..., MPI_FLOAT, MPI_SUM)` and raw
// `MPI_Iallreduce` + `MPI_Wait` on a duplicate of MPI_COMM_WORLD, all four interleaved in one
// loop (in an order balanced over iterations) so that a change in the machine's load touches
// them alike. Each call is timed after a barrier with MPI_Wtime; a call's time is the slowest
// rank's (MPI_Reduce MAX); the figure is the median over iterations. Bandwidths as nccl-tests
// defines them: algbw = bytes / time, busbw = algbw * 2(n-1)/n (reduce-scatter: (n-1)/n).
// Before the timings of each size, every form is checked once on buffers filled with rank + 1
// (each element must end as n(n+1)/2 on every rank); a wrong sum ends the run with exit code 1.
//
// Both non-blocking forms run in the same process, so under Open MPI both use the libnbc
// algorithm that OMPI_MCA_coll_libnbc_iallreduce_algorithm names (tessel::initialize sets 3,
// reduce-scatter + allgather, unless it is already set; the header prints it). Setting it to 0
// before the run shows Open MPI's own choice.
//
// `--reduce-scatter` times reduce-scatters (float, sum, in place: the part at the start of the
// buffer) the same way: tessel's `comm::reduce_scatter<"batch">` and `ireduce_scatter(...).wait()`
// against raw `MPI_Reduce_scatter_block` and `MPI_Ireduce_scatter_block` + `MPI_Wait`. tessel's
// sums of floats run in its own ring (comm/ring.hpp; all-reduces from 1 MiB), MPI's in Open MPI's
// algorithms; TESSEL_RING=0 gives tessel's side to MPI too.
//
//   mpiexec -n 2 all_reduce_bench [--max-mib M] [--iters N] [--warmup W] [--reduce-scatter]
//
// Sizes: 1, 2, 4, ... MiB up to --max-mib (default 256). --iters (default 20) is the number of
// timed iterations of each form at 64 MiB and above; smaller sizes run N * 64 / size of them,
// at most 10 N. --warmup (default 3) untimed iterations of each form come first.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <tessel/runtime/collectives.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/process_mesh.hpp>
#include <vector>

namespace {

using mesh_t = tessel::device_mesh<tessel::axis<"batch">>;
using pmesh_t = tessel::process_mesh<mesh_t>;

enum form : int {
  tessel_blocking = 0,      // comm::all_reduce<"batch">(pm, span)
  raw_mpi = 1,              // MPI_Allreduce
  tessel_nonblocking = 2,   // comm::iall_reduce<"batch">(pm, span).wait()
  raw_mpi_nonblocking = 3,  // MPI_Iallreduce + MPI_Wait: what tessel's non-blocking form calls
  forms = 4
};
// --reduce-scatter: the same four forms of a reduce-scatter.
bool scatter = false;
constexpr std::array<const char*, forms> all_reduce_name{
    "tessel all_reduce", "raw MPI_Allreduce", "tessel iall_reduce+wait",
    "raw MPI_Iallreduce+MPI_Wait"};
constexpr std::array<const char*, forms> reduce_scatter_name{
    "tessel reduce_scatter", "raw MPI_Reduce_scatter_block", "tessel ireduce_scatter+wait",
    "raw MPI_Ireduce_scatter_block+MPI_Wait"};
const char* form_name_of(int f) {
  return (scatter ? reduce_scatter_name : all_reduce_name)[static_cast<std::size_t>(f)];
}

// The order of the forms in successive iterations: a balanced Latin square (Williams design),
// in which every form precedes every other form equally often. A plain rotation (0123, 1230,
// ...) would always put the same form before a given one, and what a call leaves behind (the
// cache, libnbc's freed temporary buffer) would bias its successor.
constexpr std::array<std::array<int, forms>, forms> order{
    {{0, 1, 3, 2}, {1, 2, 0, 3}, {2, 3, 1, 0}, {3, 0, 2, 1}}};

// One size's figures (rank 0): per form, the median and the minimum over iterations of the
// slowest rank's time; per pair (tessel against raw, blocking and non-blocking), the median over
// iterations of the ratio of the two calls of the same iteration.
struct row {
  std::size_t mib = 0;
  int iters = 0;
  std::array<double, forms> seconds{};
  std::array<double, forms> best{};
  double paired = 0, nb_paired = 0;
};

struct range {
  double lo = 1e30, hi = 0;
  void add(double x) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

long parse_flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) {
      char* end = nullptr;
      const long v = std::strtol(argv[i + 1], &end, 10);
      if (end == argv[i + 1] || *end != '\0' || v < 0) {
        std::fprintf(stderr, "all_reduce_bench: %s needs a non-negative integer, got '%s'\n", name,
                     argv[i + 1]);
        std::exit(2);
      }
      return v;
    }
  return fallback;
}

// One reduce-scatter of `data` in the given form, its part at the start.
void run_scatter_form(int f, const pmesh_t& pm, MPI_Comm raw, std::span<float> data) {
  int n = 1;
  MPI_Comm_size(raw, &n);
  const std::size_t part = data.size() / static_cast<std::size_t>(n);
  const std::span<const float> in(data);
  switch (f) {
    case tessel_blocking:
      tessel::comm::reduce_scatter<"batch">(pm, in, data.first(part));
      break;
    case raw_mpi:
      MPI_Reduce_scatter_block(MPI_IN_PLACE, data.data(), static_cast<int>(part), MPI_FLOAT,
                               MPI_SUM, raw);
      break;
    case tessel_nonblocking:
      tessel::comm::ireduce_scatter<"batch">(pm, in, data.first(part)).wait();
      break;
    case raw_mpi_nonblocking: {
      MPI_Request r{};
      MPI_Ireduce_scatter_block(MPI_IN_PLACE, data.data(), static_cast<int>(part), MPI_FLOAT,
                                MPI_SUM, raw, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      break;
    }
    default:
      break;
  }
}

// One all_reduce of `data` in the given form.
void run_form(int f, const pmesh_t& pm, MPI_Comm raw, std::span<float> data) {
  if (scatter) return run_scatter_form(f, pm, raw, data);
  switch (f) {
    case tessel_blocking:
      tessel::comm::all_reduce<"batch">(pm, data);
      break;
    case raw_mpi:
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                    raw);
      break;
    case tessel_nonblocking:
      tessel::comm::iall_reduce<"batch">(pm, data).wait();
      break;
    case raw_mpi_nonblocking: {
      MPI_Request r{};
      MPI_Iallreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM,
                     raw, &r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
      break;
    }
    default:
      break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  const long max_mib = parse_flag(argc, argv, "--max-mib", 256);
  const int iters = static_cast<int>(parse_flag(argc, argv, "--iters", 20));
  const int warmup = static_cast<int>(parse_flag(argc, argv, "--warmup", 3));
  for (int i = 1; i < argc; ++i) scatter = scatter || std::strcmp(argv[i], "--reduce-scatter") == 0;
  const int n = tessel::num_processes();
  const int rank = tessel::process_id();
  if (n < 2) {
    std::fprintf(stderr,
                 "all_reduce_bench compares collectives between processes: start it with "
                 "`mpiexec -n 2 (or more) all_reduce_bench`\n");
    return 2;
  }
  if (iters < 1 || max_mib < 1 ||
      static_cast<unsigned long>(max_mib) * (1ul << 20) / sizeof(float) > INT_MAX) {
    if (rank == 0)
      std::fprintf(stderr, "all_reduce_bench: needs --iters >= 1 and 1 <= --max-mib <= 8191\n");
    return 2;
  }

  const pmesh_t pm = pmesh_t::bind();
  MPI_Comm raw{};
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  // tessel's "batch" communicator (MPI_Comm_split of the world) holds the same processes in the
  // same order as the raw one: MPI_CONGRUENT, so both sides run the same algorithms.
  int same = MPI_UNEQUAL;
  MPI_Comm_compare(pm.axis<"batch">().native(), raw, &same);

  std::vector<std::size_t> sizes_mib;
  for (std::size_t m = 1; m <= static_cast<std::size_t>(max_mib); m *= 2) sizes_mib.push_back(m);
  // One buffer of the largest size; each size uses its beginning.
  std::vector<float> buffer(sizes_mib.back() * (1u << 20) / sizeof(float), 1.0f);
  // nccl-tests' bus bandwidth: an all-reduce moves 2(n-1)/n of the buffer, a reduce-scatter
  // (n-1)/n.
  const double bus_factor = (scatter ? 1.0 : 2.0) * (n - 1) / n;

  if (rank == 0) {
    const char* nbc_algorithm = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    char version[MPI_MAX_LIBRARY_VERSION_STRING]{};
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<std::size_t>(len));
    if (const auto nl = v.find('\n'); nl != std::string::npos) v.resize(nl);
    while (!v.empty() && (v.back() == ',' || v.back() == ' ')) v.pop_back();
    std::printf(
        "%s (float, sum, in place) over %d processes along mesh axis \"batch\"\n"
        "%s\ntessel's axis communicator against raw MPI's: %s\n"
        "OMPI_MCA_coll_libnbc_iallreduce_algorithm (Open MPI's non-blocking all-reduce, for "
        "both sides; tessel::initialize sets 3 unless it is set): %s\n"
        "median of %d iterations (more below 64 MiB: the iters column) after %d "
        "warm-up; each call's time is the slowest rank's; the four forms "
        "interleaved\n\n",
        scatter ? "reduce_scatter" : "all_reduce", n, v.c_str(),
        same == MPI_CONGRUENT ? "congruent (same processes, same order)"
                              : "NOT congruent (the comparison is not like for like)",
        nbc_algorithm != nullptr ? nbc_algorithm : "unset", iters, warmup);
    std::fflush(stdout);
  }

  std::vector<row> rows;
  for (const std::size_t mib : sizes_mib) {
    const std::size_t count = mib * (1u << 20) / sizeof(float);
    const std::span<float> data(buffer.data(), count);

    // ---- correctness: each form once on rank-filled buffers ------------------------------
    int wrong = 0;
    const float expected = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
    for (int f = 0; f < forms; ++f) {
      std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
      run_form(f, pm, raw, data);
      // A reduce-scatter's result is its part, at the start.
      const auto end = scatter ? data.begin() + static_cast<std::ptrdiff_t>(count / n) : data.end();
      const auto bad = std::find_if(data.begin(), end, [&](float x) { return x != expected; });
      if (bad != end) {
        std::fprintf(stderr,
                     "all_reduce_bench: %s of %zu MiB on process %d: element %td is %g, "
                     "expected %g\n",
                     form_name_of(f), mib, rank, bad - data.begin(),
                     static_cast<double>(*bad), static_cast<double>(expected));
        wrong = 1;
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT, MPI_MAX, raw);
    if (wrong != 0) {
      if (rank == 0) std::fprintf(stderr, "all_reduce_bench: wrong sums; stopping\n");
      MPI_Comm_free(&raw);
      return 1;
    }

    // ---- timings ---------------------------------------------------------------------------
    // The buffer holds 1.0f, multiplied by n at each call (powers of two for n = 2: exact, and
    // never denormal); it is refilled, outside the timed region, before it could overflow.
    std::fill(data.begin(), data.end(), 1.0f);
    double value = 1.0;
    // Sizes below 64 MiB are cheap and the most exposed to noise: they run more iterations
    // (iters * 64 / size, at most 10 * iters).
    const int size_iters = static_cast<int>(std::clamp<std::size_t>(
        static_cast<std::size_t>(iters) * 64 / mib, static_cast<std::size_t>(iters),
        static_cast<std::size_t>(iters) * 10));
    std::array<std::vector<double>, forms> times;
    for (auto& t : times) t.reserve(static_cast<std::size_t>(size_iters));
    for (int it = -warmup; it < size_iters; ++it) {
      for (int k = 0; k < forms; ++k) {
        const int f =
            order[static_cast<std::size_t>((it + warmup) % forms)][static_cast<std::size_t>(k)];
        // A reduce-scatter leaves the rest of the buffer undefined: it is refilled every call.
        if (value * n > 1e30 || scatter) {
          std::fill(data.begin(), data.end(), 1.0f);
          value = 1.0;
        }
        MPI_Barrier(raw);
        const double t0 = MPI_Wtime();
        run_form(f, pm, raw, data);
        const double t = MPI_Wtime() - t0;
        value *= n;
        if (it >= 0) times[static_cast<std::size_t>(f)].push_back(t);
      }
    }
    // Each call's time is the slowest rank's.
    std::array<std::vector<double>, forms> slowest;
    for (std::size_t f = 0; f < forms; ++f) {
      slowest[f].resize(times[f].size());
      MPI_Reduce(times[f].data(), slowest[f].data(), static_cast<int>(times[f].size()), MPI_DOUBLE,
                 MPI_MAX, 0, raw);
    }
    if (rank == 0) {
      row r{.mib = mib, .iters = size_iters};
      for (std::size_t f = 0; f < forms; ++f) {
        r.seconds[f] = median(slowest[f]);
        r.best[f] = *std::min_element(slowest[f].begin(), slowest[f].end());
      }
      std::vector<double> paired, nb_paired;
      for (std::size_t i = 0; i < static_cast<std::size_t>(size_iters); ++i) {
        paired.push_back(slowest[tessel_blocking][i] / slowest[raw_mpi][i]);
        nb_paired.push_back(slowest[tessel_nonblocking][i] / slowest[raw_mpi_nonblocking][i]);
      }
      r.paired = median(paired);
      r.nb_paired = median(nb_paired);
      rows.push_back(r);
    }
  }

  if (rank == 0) {
    const auto ms = [](double t) { return t * 1e3; };
    std::printf(
        "Times (ms, medians) and tessel/raw ratios, three ways: of the medians; paired (the "
        "median over iterations of the ratio of the two calls of one iteration, which a load "
        "change lasting longer than an iteration touches alike); of the best (fastest) "
        "calls. i+wait = the non-blocking form started and waited for at once.\n\n"
        "| size MiB | iters | tessel | raw %s | **tessel/raw** | paired | best | "
        "tessel i+wait | raw %s+Wait | i+wait tessel/raw | paired | tessel "
        "i+wait/raw %s |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        scatter ? "MPI_Reduce_scatter_block" : "MPI_Allreduce",
        scatter ? "MPI_Ireduce_scatter_block" : "MPI_Iallreduce",
        scatter ? "MPI_Reduce_scatter_block" : "MPI_Allreduce");
    range med_r, paired_r, best_r, nb_med_r, nb_paired_r, nb_vs_blocking_r;
    for (const row& r : rows) {
      const auto& t = r.seconds;
      const double ratio = t[tessel_blocking] / t[raw_mpi];
      const double best = r.best[tessel_blocking] / r.best[raw_mpi];
      const double nb_ratio = t[tessel_nonblocking] / t[raw_mpi_nonblocking];
      const double nb_vs_blocking = t[tessel_nonblocking] / t[raw_mpi];
      med_r.add(ratio);
      paired_r.add(r.paired);
      best_r.add(best);
      nb_med_r.add(nb_ratio);
      nb_paired_r.add(r.nb_paired);
      nb_vs_blocking_r.add(nb_vs_blocking);
      std::printf(
          "| %zu | %d | %.3f | %.3f | **%.3f** | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | "
          "%.3f |\n",
          r.mib, r.iters, ms(t[tessel_blocking]), ms(t[raw_mpi]), ratio, r.paired, best,
          ms(t[tessel_nonblocking]), ms(t[raw_mpi_nonblocking]), nb_ratio, r.nb_paired,
          nb_vs_blocking);
    }
    std::printf(
        "\nBandwidths (GB/s, 1e9 B/s, from the medians), as nccl-tests: algbw = bytes / time, "
        "busbw = algbw * 2(n-1)/n (reduce-scatter: (n-1)/n) = algbw * %.3f:\n\n"
        "| size MiB | algbw tessel | algbw raw | algbw tessel i+wait | algbw raw i+wait | "
        "busbw tessel | busbw raw | busbw tessel i+wait | busbw raw i+wait |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        bus_factor);
    for (const row& r : rows) {
      const double bytes = static_cast<double>(r.mib) * (1u << 20);
      std::array<double, forms> alg{};
      for (std::size_t f = 0; f < forms; ++f) alg[f] = bytes / r.seconds[f] / 1e9;
      std::printf("| %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.mib,
                  alg[tessel_blocking], alg[raw_mpi], alg[tessel_nonblocking],
                  alg[raw_mpi_nonblocking], alg[tessel_blocking] * bus_factor,
                  alg[raw_mpi] * bus_factor, alg[tessel_nonblocking] * bus_factor,
                  alg[raw_mpi_nonblocking] * bus_factor);
    }
    std::printf(
        "\n%s / raw %s over the sizes: medians %.3f .. %.3f, paired %.3f .. %.3f, best %.3f .. "
        "%.3f\n"
        "%s / raw %s: medians %.3f .. %.3f, paired %.3f .. %.3f\n"
        "%s / raw %s (the non-blocking collective's own cost): %.3f .. %.3f\n",
        form_name_of(tessel_blocking), form_name_of(raw_mpi) + 4, med_r.lo, med_r.hi,
        paired_r.lo, paired_r.hi, best_r.lo, best_r.hi, form_name_of(tessel_nonblocking),
        form_name_of(raw_mpi_nonblocking) + 4, nb_med_r.lo, nb_med_r.hi, nb_paired_r.lo,
        nb_paired_r.hi, form_name_of(tessel_nonblocking), form_name_of(raw_mpi) + 4,
        nb_vs_blocking_r.lo, nb_vs_blocking_r.hi);
    std::printf(
        "RESULT %s processes=%d ratio_min=%.3f ratio_max=%.3f paired_min=%.3f "
        "paired_max=%.3f nb_paired_min=%.3f nb_paired_max=%.3f\n",
        scatter ? "reduce_scatter" : "all_reduce", n, med_r.lo, med_r.hi, paired_r.lo,
        paired_r.hi, nb_paired_r.lo, nb_paired_r.hi);
  }
  MPI_Comm_free(&raw);
  return 0;
}
