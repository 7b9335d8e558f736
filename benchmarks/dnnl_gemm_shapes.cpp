// oneDNN (what PyTorch uses on CPU) against tessel's GEMM and OpenBLAS on the GEMM classes of
// benchmarks/README.md, interleaved in one process: the GEMMs of one seeds/001 MLP step at batch
// B (784-256-256-10: forward, kernel gradients, input gradients) and one 512 x 4096 x 4096 GEMM.
// oneDNN's dnnl_sgemm (row-major, its JIT AVX-512/AVX2 kernels) on the threads OMP_NUM_THREADS
// gives (Debian's libdnnl is the OpenMP build); tessel's on its pool; OpenBLAS on the pool's
// number of threads. Built by CMake only where libdnnl-dev is installed (not a dependency):
//   dnnl_gemm_shapes [batch]
#include <dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <tessel/tessel.hpp>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {
struct shape {
  int m, n, k;
  bool ta, tb;
};
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
std::vector<float> a(4096 * 4096, 0.01f), b(4096 * 4096, 0.02f), c(4096 * 4096);

void dnnl(const shape& x) {
  const int lda = x.ta ? x.m : x.k, ldb = x.tb ? x.k : x.n;
  if (dnnl_sgemm(x.ta ? 'T' : 'N', x.tb ? 'T' : 'N', x.m, x.n, x.k, 1.0f, a.data(), lda, b.data(),
                 ldb, 0.0f, c.data(), x.n) != dnnl_success) {
    std::fprintf(stderr, "dnnl_sgemm failed\n");
    std::exit(1);
  }
}
void tessel_gemm(const shape& x) {
  const std::size_t lda = x.ta ? x.m : x.k, ldb = x.tb ? x.k : x.n;
  tessel::backend::host_detail::gemm(x.ta, x.tb, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                     c.data(), x.n, x.m, x.n, x.k);
}
void openblas(const shape& x) {
  const int lda = x.ta ? x.m : x.k, ldb = x.tb ? x.k : x.n;
  openblas_set_num_threads(static_cast<int>(tessel::default_backend::threads()));
  tessel::backend::host_detail::blas_gemm(x.ta, x.tb, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
                                          c.data(), x.n, x.m, x.n, x.k);
  openblas_set_num_threads(1);
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  const int bt = argc > 1 ? std::atoi(argv[1]) : 32;
  const std::vector<shape> step = {
      {bt, 256, 784, false, false}, {bt, 256, 256, false, false}, {bt, 10, 256, false, false},
      {256, 10, bt, true, false},   {bt, 256, 10, false, true},   {256, 256, bt, true, false},
      {bt, 256, 256, false, true},  {784, 256, bt, true, false}};
  const shape big{512, 4096, 4096, false, false};
  struct lib {
    const char* name;
    void (*gemm)(const shape&);
    std::vector<double> step_us, big_ms;
  };
  std::vector<lib> libs = {{"tessel (pool + libxsmm/OpenBLAS)", tessel_gemm, {}, {}},
                           {"oneDNN dnnl_sgemm", dnnl, {}, {}},
                           {"OpenBLAS cblas_sgemm", openblas, {}, {}}};
  for (auto& l : libs)
    for (int r = 0; r < 50; ++r)
      for (const auto& x : step) l.gemm(x);
  const int reps = 1000;
  for (int round = 0; round < 3; ++round)
    for (auto& l : libs) {
      const double t0 = now();
      for (int r = 0; r < reps; ++r)
        for (const auto& x : step) l.gemm(x);
      l.step_us.push_back((now() - t0) / reps * 1e6);
      l.gemm(big);
      const double t1 = now();
      for (int r = 0; r < 3; ++r) l.gemm(big);
      l.big_ms.push_back((now() - t1) / 3 * 1e3);
    }
  std::printf("threads: tessel's pool %zu, OMP_NUM_THREADS %s\n", tessel::default_backend::threads(),
              std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "(unset)");
  for (auto& l : libs) {
    std::sort(l.step_us.begin(), l.step_us.end());
    std::sort(l.big_ms.begin(), l.big_ms.end());
    std::printf("%-34s seeds/001 step GEMMs (batch %d): %7.1f us   512 x 4096 x 4096: %7.1f ms, "
                "%6.1f GFLOP/s\n",
                l.name, bt, l.step_us[1], l.big_ms[1], 2.0 * 512 * 4096 * 4096 / l.big_ms[1] / 1e6);
  }
}
