// Data parallelism with the optimizer state split over the processes, side by side in one run:
// data_parallel_bench's compute-bound MLP (input 4096 -> 3 x dense 4096 relu -> dense 10,
// sparse categorical crossentropy from logits, Adam) on a fixed global batch, trained under
// shard_state::none (every process updates the whole model), shard_state::optimizer (ZeRO-1),
// shard_state::gradients (ZeRO-2) and shard_state::weights (ZeRO-3), and the last two without
// overlap (gradient_options::overlap false: windows of one layer, no communication behind
// computation). Rounds interleave the six models; each round times --block steps of each (a
// step starts after an MPI_Barrier; its time is the slowest process's). Reports the median
// ms/step and samples/s of each, the optimizer state each process keeps and the gradients' and
// weights' memory (the memory plan's, which the tests hold to the measured peak).
// Each round also times the step's GEMMs alone (forward, kernel gradients and input gradients at
// this process's part of the batch) through raw OpenBLAS sgemm on one thread, timed the same
// way: what the processes gain on them is the most a GEMM-bound step can gain on this machine's
// cores (on one core each they share the chip's caches, memory and, on a virtual machine,
// perhaps a physical core).
// `--model deep`: input 2048 -> 6 x dense 2048 relu -> dense 10 instead, deep enough that under
// shard_state::gradients the buckets take turns in a window of two layers' gradients, and under
// shard_state::weights the weights in a window of two layers' weights.
// benchmarks/compare_sharded.sh runs it on 1 and 2 processes and prints the speedups.
//
//   mpiexec -n P sharded_state_bench [--model wide|deep] [--batch 256] [--rounds 3] [--block 2]
//                                    [--warmup 1] [--only none|optimizer|gradients|weights|
//                                                         gradients_no_overlap|weights_no_overlap|
//                                                         sgemm]
// (--only times one option, for a profiler; the others are still built.)
#include <mpi.h>
#include <sys/resource.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "raw_sgemm.hpp"

namespace {

constexpr std::size_t classes = 10;
using namespace tessel::layers;
template <tessel::shard_state S>
using dist = tessel::data_parallel<tessel::device_mesh<tessel::axis<"batch">>, S>;
struct wide {
  static constexpr std::size_t width = 4096;
  static constexpr std::array<int, 5> dims{4096, 4096, 4096, 4096, classes};  // input, layers
  template <tessel::shard_state S>
  using model = tessel::sequential<dist<S>, input<width>, dense<width, {.activation = "relu"}>,
                                   dense<width, {.activation = "relu"}>,
                                   dense<width, {.activation = "relu"}>, dense<classes>>;
};
struct deep {
  static constexpr std::size_t width = 2048;
  static constexpr std::array<int, 8> dims{2048, 2048, 2048, 2048, 2048, 2048, 2048, classes};
  using hidden = dense<width, {.activation = "relu"}>;
  template <tessel::shard_state S>
  using model = tessel::sequential<dist<S>, input<width>, hidden, hidden, hidden, hidden, hidden,
                                   hidden, dense<classes>>;
};

using bench::median;
using bench::now;
double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

// The process's minor page faults so far: memory touched for the first time (a step that
// allocates fresh buffers pays the kernel's zeroing of each page).
double minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt);
}

template <class M, tessel::shard_state S>
struct contender {
  const char* name;
  typename M::template model<S> model;
  std::vector<double> steps, faults;  // each step's time and minor page faults
  explicit contender(const char* n) : name(n) {
    model.compile(tessel::optimizer_spec(tessel::optimizers::adam{}),
                  tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  }
  template <class X, class Y>
  void run(const X& x, const Y& y, int block) {
    for (int i = 0; i < block; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double f0 = minor_faults(), t0 = now();
      model.train_on_batch(x, y);
      steps.push_back(max_over_ranks(now() - t0));
      faults.push_back(max_over_ranks(minor_faults() - f0));
    }
  }
};

// The GEMMs of one step of the model whose input and layer widths are `dims`, through raw
// OpenBLAS at `rows` rows (this process's part of the batch): per layer a forward (x W), a kernel
// gradient (x^T dy) and, but for the first layer, an input gradient (dy W^T).
struct raw_gemms {
  const char* name = "sgemm";
  int rows;
  std::vector<int> dims;
  std::vector<std::vector<float>> kernels, kernel_grads, outputs, input_grads;
  std::vector<double> steps;
  raw_gemms(std::vector<int> d, int r) : rows(r), dims(std::move(d)) {
    for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
      const auto n = static_cast<std::size_t>(dims[l]) * static_cast<std::size_t>(dims[l + 1]);
      kernels.emplace_back(n, 0.01f);
      kernel_grads.emplace_back(n);
    }
    for (const int w : dims) {
      outputs.emplace_back(static_cast<std::size_t>(rows) * static_cast<std::size_t>(w), 0.5f);
      input_grads.emplace_back(static_cast<std::size_t>(rows) * static_cast<std::size_t>(w), 0.5f);
    }
  }
  void step() {
    const std::size_t layers = kernels.size();
    for (std::size_t l = 0; l < layers; ++l)
      bench::row_major_sgemm(false, false, rows, dims[l + 1], dims[l], outputs[l].data(),
                             kernels[l].data(), outputs[l + 1].data());
    for (std::size_t l = layers; l-- > 0;) {
      bench::row_major_sgemm(true, false, dims[l], dims[l + 1], rows, outputs[l].data(),
                             input_grads[l + 1].data(), kernel_grads[l].data());
      if (l > 0)
        bench::row_major_sgemm(false, true, rows, dims[l], dims[l + 1], input_grads[l + 1].data(),
                               kernels[l].data(), input_grads[l].data());
    }
  }
  void run(int block) {
    for (int i = 0; i < block; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      step();
      steps.push_back(max_over_ranks(now() - t0));
    }
  }
};

// Whether --only (empty: every option) names the option.
bool runs(const std::string& only, const char* option) { return only.empty() || only == option; }

template <class M>
void run_all(std::size_t batch, int rounds, int block, int warmup, const std::string& only) {
  constexpr std::size_t width = M::width;
  const int procs = tessel::num_processes();
  const auto [x, y] = bench::random_batch(batch, width, classes);

  contender<M, tessel::shard_state::none> plain("none");
  contender<M, tessel::shard_state::optimizer> zero1("optimizer");
  contender<M, tessel::shard_state::gradients> zero2("gradients");
  contender<M, tessel::shard_state::weights> zero3("weights");
  // The last two without overlap (gradient_options::overlap): windows of one layer.
  contender<M, tessel::shard_state::gradients> zero2s("gradients_no_overlap");
  contender<M, tessel::shard_state::weights> zero3s("weights_no_overlap");
  zero2s.model.set_gradient_options({.overlap = false});
  zero3s.model.set_gradient_options({.overlap = false});
  // `f` on each contender, in this order.
  const auto each = [&](auto&& f) {
    f(plain);
    f(zero1);
    f(zero2);
    f(zero3);
    f(zero2s);
    f(zero3s);
  };
  openblas_set_num_threads(1);
  raw_gemms gemms(std::vector<int>(M::dims.begin(), M::dims.end()),
                  static_cast<int>(batch) / procs);
  const auto initial = plain.model.get_weights();
  each([&](auto& c) { c.model.set_weights(initial); });
  for (int i = 0; i < warmup; ++i) {
    each([&](auto& c) { c.run(x, y, 1); });
    gemms.run(1);
  }
  each([](auto& c) {
    c.steps.clear();
    c.faults.clear();
  });
  gemms.steps.clear();
  for (int r = 0; r < rounds; ++r) {
    each([&](auto& c) {
      if (runs(only, c.name)) c.run(x, y, block);
    });
    if (runs(only, gemms.name)) gemms.run(block);
  }
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  if (tessel::process_id() == 0) {
    std::printf(
        "sharded_state_bench: %d process(es), OPENBLAS_NUM_THREADS=%s, global batch %zu, "
        "Adam, %.1f MB of parameters, %d rounds x %d steps\n",
        procs, blas ? blas : "unset", batch,
        static_cast<double>(plain.model.count_params()) * 4 / 1e6, rounds, block);
    auto report = [&](const auto& c) {
      const double t = median(c.steps);
      const double state = static_cast<double>(c.model.optimizer_state_values()) * 4 / 1e6;
      const tessel::memory_plan m = c.model.memory(batch);
      const double grads = static_cast<double>(m.gradients) / 1e6;
      const double weights = static_cast<double>(m.weights) / 1e6;
      std::printf(
          "  shard_state::%-20s %8.1f ms/step %8.1f samples/s, optimizer state %.1f MB, "
          "gradients %.1f MB, weights %.1f MB per process, %.0f page faults per step\n",
          c.name, t * 1e3, static_cast<double>(batch) / t, state, grads, weights,
          median(c.faults));
      std::printf(
          "RESULT sharded procs=%d shard=%s ms_per_step=%.2f samples_per_s=%.2f "
          "optimizer_mb=%.1f gradients_mb=%.1f weights_mb=%.1f\n",
          procs, c.name, t * 1e3, static_cast<double>(batch) / t, state, grads, weights);
    };
    each([&](const auto& c) {
      if (runs(only, c.name)) report(c);
    });
    if (runs(only, gemms.name)) {
      const double t = median(gemms.steps);
      std::printf("  the step's GEMMs alone (OpenBLAS, %d rows a process) %8.1f ms/step %8.1f "
                  "samples/s\n",
                  gemms.rows, t * 1e3, static_cast<double>(batch) / t);
      std::printf("RESULT sharded procs=%d shard=sgemm ms_per_step=%.2f samples_per_s=%.2f\n",
                  procs, t * 1e3, static_cast<double>(batch) / t);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    std::size_t batch = 256;
    int rounds = 3, block = 2, warmup = 1;
    std::string model = "wide", only;
    for (int i = 1; i < argc; ++i) {
      const bool has_value = i + 1 < argc;
      if (std::strcmp(argv[i], "--batch") == 0 && has_value)
        batch = std::strtoul(argv[++i], nullptr, 10);
      else if (std::strcmp(argv[i], "--rounds") == 0 && has_value)
        rounds = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--block") == 0 && has_value)
        block = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--warmup") == 0 && has_value)
        warmup = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--model") == 0 && has_value)
        model = argv[++i];
      else if (std::strcmp(argv[i], "--only") == 0 && has_value)
        only = argv[++i];
      else
        throw tessel::value_error(std::string("sharded_state_bench: unknown argument ") + argv[i]);
    }
    if (rounds < 1 || block < 1 || batch == 0 || warmup < 0)
      throw tessel::value_error(
          "sharded_state_bench: --batch, --rounds and --block must be "
          "positive");
    if (model == "wide")
      run_all<wide>(batch, rounds, block, warmup, only);
    else if (model == "deep")
      run_all<deep>(batch, rounds, block, warmup, only);
    else
      throw tessel::value_error("sharded_state_bench: --model is wide or deep, not " + model);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return 0;
}
