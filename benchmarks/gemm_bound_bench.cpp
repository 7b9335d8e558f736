// A GEMM-bound training step: three dense layers 4096 wide, batch 512, Adam. Its achieved
// GFLOP/s (the GEMM work a step must do, over the step's whole time: GEMMs, activations, bias,
// loss and optimizer) against raw sgemm (OpenBLAS, through the Fortran BLAS interface) on the
// same GEMM shapes, in the same run, with OpenBLAS on as many threads as the process's pool
// (tessel runs the BLAS single-threaded inside its pool and lets OpenBLAS thread the big GEMMs
// only). Also the GEMMs of one seeds/001 MLP step (batch 32) through raw OpenBLAS and through
// tessel's GEMM (its pool and libxsmm's kernels): the floor any sgemm-based framework has there.
//
//   gemm_bound_bench [--steps N] [--width W] [--batch B]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"
#include "raw_sgemm.hpp"

namespace {

constexpr std::size_t width = 4096;
using namespace tessel::layers;
using model_t = tessel::sequential<input<width>, dense<width, {.activation = "relu"}>,
                                   dense<width, {.activation = "relu"}>, dense<width>>;

using bench::median;
using bench::now;
using bench::row_major_sgemm;

// The same through tessel's GEMM (backend::host_detail::gemm: the pool, libxsmm's kernels).
void tessel_sgemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b,
                  float* c) {
  const std::size_t lda = ta ? m : k, ldb = tb ? k : n;
  tessel::backend::host_detail::gemm(ta, tb, 1.0f, a, lda, b, ldb, 0.0f, c, n, m, n, k);
}
// Raw OpenBLAS on the pool's number of threads while `raw` lives.
struct raw_blas_threads {
  raw_blas_threads() { openblas_set_num_threads(static_cast<int>(tessel::default_backend::threads())); }
  ~raw_blas_threads() { openblas_set_num_threads(1); }
};

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  int steps = 10;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[++i]);
  constexpr int batch = 512, w = static_cast<int>(width);

  // The GEMMs of one step: per layer a forward (x W), a kernel gradient (x^T dy) and, except for
  // the first layer, an input gradient (dy W^T).
  const double flop_fwd = 2.0 * batch * w * w;
  const double step_flop = 3 * flop_fwd + 3 * flop_fwd + 2 * flop_fwd;

  model_t model;
  model.compile(tessel::optimizers::adam{}, tessel::losses::mean_squared_error{});
  tessel::array<float> x({batch, width}), y({batch, width});
  tessel::random::stream s(7, 7);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x.values[i] = s.normal(i);
    y.values[i] = s.normal(i + x.size());
  }
  std::vector<float> a(static_cast<std::size_t>(batch) * w, 0.5f),
      b(static_cast<std::size_t>(w) * w, 0.25f), c(static_cast<std::size_t>(w) * w),
      d(static_cast<std::size_t>(batch) * w);
  auto raw_step = [&] {
    const raw_blas_threads raw;
    for (int layer = 0; layer < 3; ++layer)
      row_major_sgemm(false, false, batch, w, w, a.data(), b.data(), d.data());
    for (int layer = 0; layer < 3; ++layer)
      row_major_sgemm(true, false, w, w, batch, a.data(), d.data(), c.data());
    for (int layer = 0; layer < 2; ++layer)
      row_major_sgemm(false, true, batch, w, w, d.data(), b.data(), a.data());
  };
  model.train_on_batch(x, y);  // warm up: buffers, optimizer slots
  raw_step();
  // Interleaved, so that a change in the machine's load touches both sides alike.
  std::vector<double> tessel_s, raw_s;
  for (int i = 0; i < steps; ++i) {
    double t0 = now();
    model.train_on_batch(x, y);
    tessel_s.push_back(now() - t0);
    t0 = now();
    raw_step();
    raw_s.push_back(now() - t0);
  }
  // The same comparison's floor for the small model: the GEMMs of a seeds/001 MLP epoch
  // (784-256-256-10, batch 32: 1563 training steps, then the validation pass's forward GEMMs over
  // 10000 samples, as the epochs timed by compare_frameworks.sh include it) through raw sgemm,
  // which bounds how fast any framework using sgemm can train it.
  {
    const int dims[4] = {784, 256, 256, 10};
    const int mb = 32;
    std::vector<std::vector<float>> wts, acts, grads;
    for (int l = 0; l < 3; ++l) {
      wts.emplace_back(static_cast<std::size_t>(dims[l]) * dims[l + 1], 0.01f);
      grads.emplace_back(static_cast<std::size_t>(dims[l]) * dims[l + 1]);
    }
    for (int l = 0; l < 4; ++l) acts.emplace_back(static_cast<std::size_t>(mb) * dims[l], 0.5f);
    std::vector<float> dact(static_cast<std::size_t>(mb) * 784);
    auto small_step = [&](auto gemm) {
      for (int l = 0; l < 3; ++l)
        gemm(false, false, mb, dims[l + 1], dims[l], acts[l].data(), wts[l].data(),
             acts[l + 1].data());
      for (int l = 2; l >= 0; --l) {
        gemm(true, false, dims[l], dims[l + 1], mb, acts[l].data(), acts[l + 1].data(),
             grads[l].data());
        if (l > 0)
          gemm(false, true, mb, dims[l], dims[l + 1], acts[l + 1].data(), wts[l].data(),
               dact.data());
      }
    };
    // The validation pass: the forward GEMMs of 312 batches of 32 and one of 16.
    auto validation = [&](auto gemm) {
      for (int i = 0; i <= 312; ++i) {
        const int rows = i < 312 ? mb : 16;
        for (int l = 0; l < 3; ++l)
          gemm(false, false, rows, dims[l + 1], dims[l], acts[l].data(), wts[l].data(),
               acts[l + 1].data());
      }
    };
    const int n = 1563;
    struct timing {
      double train, epoch;
    };
    auto epoch = [&](auto gemm) {
      for (int i = 0; i < 100; ++i) small_step(gemm);
      const double t0 = now();
      for (int i = 0; i < n; ++i) small_step(gemm);
      const double t1 = now();
      validation(gemm);
      return timing{t1 - t0, now() - t0};
    };
    // Interleaved, three rounds; the medians.
    std::vector<double> raw_t, ours_t, raw_train, ours_train;
    for (int round = 0; round < 3; ++round) {
      {
        const raw_blas_threads raw;
        const timing r = epoch(row_major_sgemm);
        raw_t.push_back(r.epoch);
        raw_train.push_back(r.train);
      }
      const timing o = epoch(tessel_sgemm);
      ours_t.push_back(o.epoch);
      ours_train.push_back(o.train);
    }
    const double t = median(raw_t), t_ours = median(ours_t);
    const double step = median(raw_train) / n, step_ours = median(ours_train) / n;
    double flop = 0;
    for (int l = 0; l < 3; ++l) flop += 2.0 * mb * dims[l] * dims[l + 1] * (l > 0 ? 3 : 2);
    std::printf("seeds/001 MLP step GEMMs alone (batch 32), raw sgemm: %.1f us/step, %.1f "
                "GFLOP/s; %.3f s per epoch (1563 steps and the validation pass's forward GEMMs)\n",
                step * 1e6, flop / step / 1e9, t);
    std::printf("the same through tessel's GEMM (%zu threads%s): %.1f us/step, %.1f GFLOP/s, "
                "%.3f s per epoch, %.2fx raw sgemm\n",
                tessel::default_backend::threads(),
#if defined(TESSEL_HAVE_LIBXSMM)
                ", libxsmm kernels",
#else
                "",
#endif
                step_ours * 1e6, flop / step_ours / 1e9, t_ours, t / t_ours);
    std::printf("RESULT mlp_gemm_floor us_per_step=%.1f seconds_per_epoch=%.3f "
                "tessel_us_per_step=%.1f tessel_seconds_per_epoch=%.3f\n",
                step * 1e6, t, step_ours * 1e6, t_ours);
  }

  const double t_tessel = median(tessel_s), t_raw = median(raw_s);
  std::printf("GEMM-bound step: 3 x dense(%d), batch %d, %.1f GFLOP of GEMM per step\n", w,
              batch, step_flop / 1e9);
  std::printf("tessel training step : %8.2f ms  %7.1f GFLOP/s\n", t_tessel * 1e3,
              step_flop / t_tessel / 1e9);
  std::printf("raw sgemm, same GEMMs: %8.2f ms  %7.1f GFLOP/s\n", t_raw * 1e3,
              step_flop / t_raw / 1e9);
  std::printf("RESULT gemm_bound tessel_gflops=%.1f sgemm_gflops=%.1f ratio=%.3f\n",
              step_flop / t_tessel / 1e9, step_flop / t_raw / 1e9, t_raw / t_tessel);
}
