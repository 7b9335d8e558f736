// Data-parallel training of a compute-bound MLP over MPI processes (one process per device):
// input 4096 -> dense 4096 relu -> dense 4096 relu -> dense 4096 relu -> dense 10 (logits),
// sparse categorical crossentropy from logits, SGD (default; --optimizer adam for Adam), on a
// FIXED GLOBAL batch that data_parallel<> splits into one block per process. Synthetic data
// (fixed random floats, labels in [0, 10)). Run it under mpiexec; benchmarks/run_data_parallel.sh
// runs it on 1 and 2 processes and prints the speedup.
//
//   mpiexec -n P data_parallel_bench [--batch 256] [--steps 8] [--warmup 2] [--optimizer sgd|adam]
//                                    [--rounds 3] [--block 2] [--only throughput|overlap|progress]
//
// 1. throughput: after --warmup steps, --steps timed steps; each step starts after an
//    MPI_Barrier and its time is the slowest process's. Reports the median ms/step and
//    global-batch samples/s.
// 2. overlap (2+ processes): exposed communication with and without overlap. The same model
//    with set_gradient_options({cap, overlap}) for caps 25 MB and 5 MB, overlap on and off,
//    and 250 MB (one bucket), interleaved: --rounds rounds, each running every configuration
//    for one untimed step (after the change of options), reset_communication_stats, then
//    --block timed steps. From communication_stats: exposed ms/step (waiting for the
//    collectives after backward), backward ms/step (collectives started and tested inside
//    it), buckets and gradient MB per step; each the median over rounds of the mean over
//    processes; step ms is the median over rounds of the slowest process's step.
// 3. progress (2+ processes): the bare collectives. A blocking MPI_Allreduce of the whole
//    gradient and of one 4096x4096 kernel; then one kernel's MPI_Iallreduce started before
//    ~100 ms of arithmetic (a fixed amount of work) that calls MPI_Test 0, 1 (what the model
//    does: once per layer), 10 or 100 times, then MPI_Wait, with the time inside
//    MPI_Iallreduce, inside MPI_Test and inside MPI_Wait, and how much of "compute, then
//    blocking MPI_Allreduce" the overlap hid. Open MPI moves a collective only inside MPI
//    calls of the processes themselves; this shows what that means on this machine.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {

constexpr std::size_t width = 4096, classes = 10;
using namespace tessel::layers;
using model_t =
    tessel::sequential<tessel::data_parallel<>, input<width>, dense<width, {.activation = "relu"}>,
                       dense<width, {.activation = "relu"}>, dense<width, {.activation = "relu"}>,
                       dense<classes>>;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// CPU time of the whole process (every thread).
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool use_mpi() { return tessel::num_processes() > 1; }
void barrier() {
  if (use_mpi()) MPI_Barrier(MPI_COMM_WORLD);
}
double max_over_ranks(double v) {
  if (use_mpi()) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}
double mean_over_ranks(double v) {
  if (use_mpi()) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return v / tessel::num_processes();
}
bool chief() { return tessel::process_id() == 0; }

// Arithmetic on a few cache lines (a stand-in for a compute-bound backward pass that leaves the
// memory system alone): `chunks` fixed chunks of work, calling MPI_Test on `r` `tests` times at
// even intervals. Adds the time spent inside MPI_Test to `in_tests`.
float spin(long chunks, int tests, MPI_Request* r, double& in_tests) {
  float acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = 1.0f + static_cast<float>(i) * 1e-3f;
  int done_tests = 0;
  for (long c = 0; c < chunks; ++c) {
    asm volatile("" : "+m"(acc));  // the compiler may not shortcut the chunks
    for (int rep = 0; rep < 1024; ++rep)
      for (int i = 0; i < 16; ++i) acc[i] = acc[i] * 0.9999999f + 1e-7f;
    while (done_tests < tests && (c + 1) * (tests + 1) >= chunks * (done_tests + 1)) {
      const double t0 = now();
      int flag = 0;
      MPI_Test(r, &flag, MPI_STATUS_IGNORE);
      in_tests += now() - t0;
      ++done_tests;
    }
  }
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    std::size_t batch = 256;
    int steps = 8, warmup = 2, rounds = 3, block = 2;
    bool adam = false;
    std::string only;  // empty: every section
    for (int i = 1; i < argc; ++i) {
      const bool has_value = i + 1 < argc;
      if (std::strcmp(argv[i], "--batch") == 0 && has_value)
        batch = std::strtoul(argv[++i], nullptr, 10);
      else if (std::strcmp(argv[i], "--steps") == 0 && has_value)
        steps = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--warmup") == 0 && has_value)
        warmup = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--rounds") == 0 && has_value)
        rounds = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--block") == 0 && has_value)
        block = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--optimizer") == 0 && has_value) {
        const std::string o = argv[++i];
        if (o != "sgd" && o != "adam")
          throw tessel::value_error("data_parallel_bench: --optimizer takes sgd or adam");
        adam = o == "adam";
      } else if (std::strcmp(argv[i], "--only") == 0 && has_value)
        only = argv[++i];
      else
        throw tessel::value_error(std::string("data_parallel_bench: unknown argument ") + argv[i]);
    }
    if (steps < 1 || rounds < 1 || block < 1 || batch == 0)
      throw tessel::value_error(
          "data_parallel_bench: --batch, --steps, --rounds and --block must be positive");
    if (!only.empty() && only != "throughput" && only != "overlap" && only != "progress")
      throw tessel::value_error(
          "data_parallel_bench: --only takes throughput, overlap or progress");
    const auto run_section = [&](const char* name) { return only.empty() || only == name; };
    const int procs = tessel::num_processes();
    const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");
    const char* nbc_algorithm = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");

    model_t model;
    model.compile(adam ? tessel::optimizer_spec(tessel::optimizers::adam{})
                       : tessel::optimizer_spec(tessel::optimizers::sgd{}),
                  tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    // Every process builds the same global batch; the model takes its block of rows.
    const auto [x, y] = bench::random_batch(batch, width, classes);

    // GEMM work of a step on the global batch: per big layer a forward (x W) and a kernel
    // gradient (x^T dy), and an input gradient (dy W^T) except for the first layer.
    const double gemm = 2.0 * static_cast<double>(batch) * width * width;
    const double step_flop = 3 * gemm + 3 * gemm + 2 * gemm;
    if (chief())
      std::printf(
          "data_parallel_bench: %d process(es), OPENBLAS_NUM_THREADS=%s, global batch "
          "%zu (%zu per process), %s, %.1f GFLOP of GEMM per step, %.1f MB of "
          "parameters, Open MPI libnbc iallreduce algorithm %s\n",
          procs, blas_threads ? blas_threads : "(unset)", batch,
          batch / static_cast<std::size_t>(procs), adam ? "Adam" : "SGD", step_flop / 1e9,
          static_cast<double>(model.count_params()) * 4 / 1e6,
          nbc_algorithm ? nbc_algorithm : "unset");

    // ---- 1. throughput ----------------------------------------------------------------------
    for (int i = 0; i < warmup; ++i) model.train_on_batch(x, y);
    if (run_section("throughput")) {
      std::vector<double> step_s;
      double loss = 0, wall = 0, cpu = 0;
      for (int i = 0; i < steps; ++i) {
        barrier();
        const double t0 = now(), c0 = cpu_now();
        const auto l = model.train_on_batch(x, y);
        const double dt = now() - t0;
        cpu += cpu_now() - c0;
        wall += dt;
        loss = l.front().second;
        step_s.push_back(max_over_ranks(dt));
      }
      // The cores each process had during its steps (CPU time of all its threads, MPI's
      // busy-polling included, over wall time): below 1 per BLAS thread, other jobs took part
      // of the cores.
      const double cores = mean_over_ranks(cpu / wall);
      const double t = median(step_s);
      const auto [lo, hi] = std::minmax_element(step_s.begin(), step_s.end());
      if (chief()) {
        std::printf(
            "throughput: %.1f ms/step (median of %d; min %.1f, max %.1f), %.1f samples/s, "
            "%.1f GFLOP/s of GEMM; %.2f cores busy per process; last loss %.4f\n",
            t * 1e3, steps, *lo * 1e3, *hi * 1e3, static_cast<double>(batch) / t,
            step_flop / t / 1e9, cores, loss);
        std::printf(
            "RESULT throughput procs=%d blas_threads=%s batch=%zu ms_per_step=%.2f "
            "samples_per_s=%.2f cores_per_process=%.2f\n",
            procs, blas_threads ? blas_threads : "unset", batch, t * 1e3,
            static_cast<double>(batch) / t, cores);
      }
      if (!std::isfinite(loss))
        throw tessel::runtime_error("data_parallel_bench: loss is not finite");
    }
    if (procs < 2) return 0;

    // ---- 2. exposed communication, overlap on and off ---------------------------------------
    if (run_section("overlap")) {
      struct config {
        const char* name;
        tessel::gradient_options options;
        std::vector<double> exposed, backward, step, mpi_in_backward;  // per round
        std::size_t buckets = 0, bytes = 0;
        double cpu = 0, wall = 0;  // this process's, over every timed step
      };
      std::vector<config> configs{
          {"25 MB, overlap", {.bucket_cap_mb = 25, .overlap = true}, {}, {}, {}, {}},
          {"25 MB, no overlap", {.bucket_cap_mb = 25, .overlap = false}, {}, {}, {}, {}},
          {"5 MB, overlap", {.bucket_cap_mb = 5, .overlap = true}, {}, {}, {}, {}},
          {"5 MB, no overlap", {.bucket_cap_mb = 5, .overlap = false}, {}, {}, {}, {}},
          {"250 MB, overlap", {.bucket_cap_mb = 250, .overlap = true}, {}, {}, {}, {}},
      };
      for (int r = 0; r < rounds; ++r) {
        for (auto& c : configs) {
          model.set_gradient_options(c.options);
          model.train_on_batch(x, y);  // touches the new bucket buffer
          model.reset_communication_stats();
          std::vector<double> block_s;
          for (int i = 0; i < block; ++i) {
            barrier();
            const double t0 = now(), c0 = cpu_now();
            model.train_on_batch(x, y);
            const double dt = now() - t0;
            c.cpu += cpu_now() - c0;
            c.wall += dt;
            block_s.push_back(max_over_ranks(dt));
          }
          const tessel::communication_stats& st = model.communication_stats();
          const double n = static_cast<double>(st.steps);
          c.exposed.push_back(mean_over_ranks(st.exposed_seconds / n));
          c.backward.push_back(mean_over_ranks(st.backward_seconds / n));
          c.mpi_in_backward.push_back(mean_over_ranks(st.backward_mpi_seconds / n));
          c.step.push_back(median(block_s));
          c.buckets = model.gradient_bucket_count();
          c.bytes = st.bytes;
        }
      }
      model.set_gradient_options({});
      std::vector<double> cores;
      for (const auto& c : configs) cores.push_back(mean_over_ranks(c.cpu / c.wall));
      if (chief()) {
        std::printf(
            "\nexposed communication, %d processes, %d rounds x %d steps per configuration "
            "(interleaved; medians over rounds of the mean over processes)\n",
            procs, rounds, block);
        std::printf(
            "| gradient options | buckets | gradient MB/step | backward ms/step | of which in MPI "
            "| exposed ms/step | backward + exposed | step ms | cores busy per process |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (std::size_t i = 0; i < configs.size(); ++i) {
          const config& c = configs[i];
          std::printf("| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f |\n", c.name,
                      c.buckets, static_cast<double>(c.bytes) / 1e6, median(c.backward) * 1e3,
                      median(c.mpi_in_backward) * 1e3, median(c.exposed) * 1e3, (median(c.backward) + median(c.exposed)) * 1e3,
                      median(c.step) * 1e3, cores[i]);
        }
        for (const auto& c : configs)
          std::printf(
              "RESULT overlap config=\"%s\" buckets=%zu exposed_ms=%.2f backward_ms=%.2f "
              "step_ms=%.2f\n",
              c.name, c.buckets, median(c.exposed) * 1e3, median(c.backward) * 1e3,
              median(c.step) * 1e3);
      }
    }

    // ---- 2b. the bare collective and Open MPI's progress --------------------------------------
    // One 4096x4096 kernel gradient reduced while the process computes ~100 ms (as long as a
    // layer's backward here), calling MPI_Test 0, 1 (what the model does per layer), 10 or 100
    // times: how much of the collective is hidden, and how much merely moves into MPI_Test.
    if (run_section("progress")) {
      const std::size_t grad_floats = model.communication_stats().bytes / sizeof(float);
      const std::size_t kernel_floats = width * width;
      std::vector<float> whole(grad_floats, 1.0f), one(kernel_floats, 1.0f);
      double unused = 0;
      long chunks = 0;  // the work of ~100 ms, the same on every process
      {
        double per_chunk = 1e9;
        for (int i = 0; i < 5; ++i) {
          const double t0 = now();
          spin(2048, 0, nullptr, unused);
          per_chunk = std::min(per_chunk, (now() - t0) / 2048);
        }
        per_chunk = max_over_ranks(per_chunk);
        chunks = static_cast<long>(0.1 / per_chunk);
      }
      const int test_counts[] = {0, 1, 10, 100};
      constexpr std::size_t kinds = std::size(test_counts);
      std::vector<double> blocking_whole, blocking_one, alone, serial;
      std::vector<std::vector<double>> total_s(kinds), start_s(kinds), test_s(kinds), wait_s(kinds);
      volatile float sink = 0;
      for (int r = 0; r < rounds; ++r) {
        barrier();
        double t0 = now();
        MPI_Allreduce(MPI_IN_PLACE, whole.data(), static_cast<int>(whole.size()), MPI_FLOAT,
                      MPI_SUM, MPI_COMM_WORLD);
        blocking_whole.push_back(max_over_ranks(now() - t0));
        barrier();
        t0 = now();
        MPI_Allreduce(MPI_IN_PLACE, one.data(), static_cast<int>(one.size()), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        blocking_one.push_back(max_over_ranks(now() - t0));
        barrier();
        t0 = now();
        sink = sink + spin(chunks, 0, nullptr, unused);
        alone.push_back(max_over_ranks(now() - t0));
        barrier();
        t0 = now();
        sink = sink + spin(chunks, 0, nullptr, unused);
        MPI_Allreduce(MPI_IN_PLACE, one.data(), static_cast<int>(one.size()), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        serial.push_back(max_over_ranks(now() - t0));
        for (std::size_t k = 0; k < kinds; ++k) {
          barrier();
          t0 = now();
          MPI_Request req{};
          MPI_Iallreduce(MPI_IN_PLACE, one.data(), static_cast<int>(one.size()), MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD, &req);
          const double started = now() - t0;  // reduced over ranks after the wait, not during
          double in_tests = 0;
          sink = sink + spin(chunks, test_counts[k], &req, in_tests);
          const double w0 = now();
          MPI_Wait(&req, MPI_STATUS_IGNORE);
          const double t1 = now();
          start_s[k].push_back(max_over_ranks(started));
          total_s[k].push_back(max_over_ranks(t1 - t0));
          test_s[k].push_back(max_over_ranks(in_tests));
          wait_s[k].push_back(max_over_ranks(t1 - w0));
        }
        // Keep the values small (each all-reduce multiplies them by the process count).
        std::fill(whole.begin(), whole.end(), 1.0f);
        std::fill(one.begin(), one.end(), 1.0f);
      }
      if (chief()) {
        const double a = median(alone), b = median(blocking_one);
        std::printf("\nbare collectives, %d processes (median of %d rounds; slowest process)\n",
                    procs, rounds);
        std::printf("| collective | ms |\n| --- | --- |\n");
        std::printf("| MPI_Allreduce, whole gradient (%.1f MB) | %.1f |\n",
                    static_cast<double>(grad_floats) * 4 / 1e6, median(blocking_whole) * 1e3);
        std::printf("| MPI_Allreduce, one 4096x4096 kernel (%.1f MB) | %.1f |\n",
                    static_cast<double>(kernel_floats) * 4 / 1e6, b * 1e3);
        std::printf(
            "\none kernel's MPI_Iallreduce during %.0f ms of computation (compute then "
            "blocking MPI_Allreduce: %.1f ms)\n",
            a * 1e3, median(serial) * 1e3);
        std::printf(
            "| MPI_Test calls during the computation | total ms | inside MPI_Iallreduce ms | "
            "inside MPI_Test ms | MPI_Wait ms | hidden ms (compute + blocking - total) |\n"
            "| --- | --- | --- | --- | --- | --- |\n");
        for (std::size_t k = 0; k < kinds; ++k)
          std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f |\n", test_counts[k],
                      median(total_s[k]) * 1e3, median(start_s[k]) * 1e3, median(test_s[k]) * 1e3,
                      median(wait_s[k]) * 1e3, (a + b - median(total_s[k])) * 1e3);
        std::printf("RESULT bare allreduce_whole_ms=%.2f allreduce_kernel_ms=%.2f compute_ms=%.2f",
                    median(blocking_whole) * 1e3, b * 1e3, a * 1e3);
        for (std::size_t k = 0; k < kinds; ++k)
          std::printf(" tests%d_total_ms=%.2f tests%d_wait_ms=%.2f", test_counts[k],
                      median(total_s[k]) * 1e3, test_counts[k], median(wait_s[k]) * 1e3);
        std::printf("\n");
      }
    }
    return 0;
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
