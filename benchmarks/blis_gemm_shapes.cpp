// The seeds/001 step's GEMMs at batch B and one 4096-wide GEMM through BLIS (cblas), on the threads
// OMP_NUM_THREADS gives (Debian's BLIS is the OpenMP build): the BLIS side of the GEMM choice in
// benchmarks/README.md. Not built by CMake (BLIS's cblas would clash with OpenBLAS's); with
// libblis-dev installed:
//   g++ -O2 -std=c++20 benchmarks/blis_gemm_shapes.cpp -o blis_gemm_shapes \
//       -I/usr/include/x86_64-linux-gnu/blis-openmp -L/usr/lib/x86_64-linux-gnu/blis-openmp \
//       -Wl,-rpath,/usr/lib/x86_64-linux-gnu/blis-openmp -lblis -fopenmp
//   OMP_NUM_THREADS=2 ./blis_gemm_shapes 32
#include <cblas.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
struct shape { int m, n, k; bool ta, tb; };
int main(int argc, char** argv) {
  int B = argc > 1 ? atoi(argv[1]) : 32;
  std::vector<shape> s = {{B, 256, 784, false, false}, {B, 256, 256, false, false}, {B, 10, 256, false, false},
    {256, 10, B, true, false}, {B, 256, 10, false, true}, {256, 256, B, true, false}, {B, 256, 256, false, true}, {784, 256, B, true, false}};
  std::vector<float> a(4096 * 4096, 0.01f), b(4096 * 4096, 0.02f), c(4096 * 4096);
  auto run = [&](const shape& x) { const int lda = x.ta ? x.m : x.k, ldb = x.tb ? x.k : x.n;
    cblas_sgemm(CblasRowMajor, x.ta ? CblasTrans : CblasNoTrans, x.tb ? CblasTrans : CblasNoTrans, x.m, x.n, x.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), x.n); };
  for (int r = 0; r < 50; ++r) for (auto& x : s) run(x);
  const int reps = 2000;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) for (auto& x : s) run(x);
    std::printf("BLIS batch %d step GEMMs: %.1f us\n", B, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e6);
  }
  shape big{512, 4096, 4096, false, false};
  run(big);
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 5; ++r) run(big);
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
  std::printf("BLIS 512 x 4096 x 4096: %.1f ms, %.1f GFLOP/s\n", t * 1e3, 2.0 * 512 * 4096 * 4096 / t / 1e9);
}
