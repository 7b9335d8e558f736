// conv2d's forward and backward through the layer's run time against raw sgemm on the same im2col
// shapes: the seeds/002 CNN's three convolutions, at batch 32 (a process's half of the seed's 64
// on 2 processes) and 64. Per shape, M = batch oh ow (the im2col matrix's rows), K = kh kw C (its
// columns) and N = filters; the layer does three GEMMs of 2 M N K flops each (the forward
// cols @ kernel, the kernel's gradient cols^T @ dy, the input's dy @ kernel^T) and around them
// the im2col gather, the activation's and bias's gradient and the col2im scatter. Timed,
// interleaved round by round, the median of the rounds:
// - layer: call_forward + call_backward (the input's gradient included) on the default backend;
// - tessel GEMMs: the same three GEMMs alone through the backend's GEMM (B::gemm: the pool,
//   libxsmm's kernels);
// - OpenBLAS: the same three through cblas_sgemm, on as many threads as the process's pool.
// The ratio is the layer's GFLOP/s over the faster sgemm's. It also checks that the host's
// im2col and col2im launches give the bits of the per-index bodies (the GPU's and the
// reference) on these shapes.
//
//   conv2d_gemm_bench [--rounds N]
// One line per shape and batch:
//   RESULT conv2d_gemm layer=<name> batch=<b> m=<M> n=<N> k=<K> layer_gflops=<..>
//     tessel_gemm_gflops=<..> openblas_gflops=<..> ratio=<layer / faster sgemm>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tessel/layers/convolution.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

extern "C" void openblas_set_num_threads(int);

namespace {

using B = tessel::default_backend;
using matrix = B::matrix;
using namespace tessel::layers;
namespace cv = tessel::backend::convolution;
using bench::median;
using bench::now;

// seeds/002's convolutions, as its model has them.
using conv_1 = conv2d<12, 3, {.padding = "same", .use_bias = false}>;
using conv_2 = conv2d<24, 6, {.strides = 2, .use_bias = false}>;
using conv_3 = conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>;

matrix random_matrix(std::size_t rows, std::size_t cols, unsigned seed) {
  matrix m = B::make_matrix("bench", rows, cols);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (std::size_t i = 0; i < m.size(); ++i) m.data()[i] = d(gen);
  return m;
}

bool same_bits(const matrix& a, const std::vector<float>& b) {
  return std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}

// The host's im2col and col2im launches against their bodies run index by index.
bool launches_match_bodies(const cv::geometry& g, const matrix& x, const matrix& dcols) {
  matrix cols = B::make_matrix("cols", g.out_rows(), g.patch());
  B::for_each("im2col", g.out_rows(), g.patch(), cv::im2col_rows{g, x.data(), cols.data()});
  std::vector<float> reference(g.out_rows() * g.patch());
  const cv::im2col_rows body{g, x.data(), reference.data()};
  for (std::size_t r = 0; r < g.out_rows(); ++r) body(r);
  const bool im2col_equal = same_bits(cols, reference);
  matrix dx = B::make_matrix("dx", 1, g.in_size());
  B::for_each("col2im", g.in_size(), 1, cv::col2im_elements{g, dcols.data(), dx.data()});
  reference.assign(g.in_size(), 0.0f);
  const cv::col2im_elements gather{g, dcols.data(), reference.data()};
  for (std::size_t i = 0; i < g.in_size(); ++i) gather(i);
  return im2col_equal && same_bits(dx, reference);
}

template <class L>
void run(const char* name, std::size_t h, std::size_t w, std::size_t c, std::size_t batch,
         int rounds) {
  const tessel::shape_value in{h, w, c};
  const tessel::shape_value out = L::output_shape(in);
  tessel::variable_store<B> vars;
  typename L::template runtime<B> layer(
      tessel::layer_info{tessel::name_string(std::string_view(name)), in, out}, vars, 1);
  const cv::geometry g = cv::make_geometry(batch, h, w, c, L::window.kh, L::window.kw,
                                           L::window.sh, L::window.sw, L::window.same);
  const std::size_t m = g.out_rows(), k = g.patch(), n = out[2];
  const matrix x = random_matrix(batch, h * w * c, 1);
  const matrix dy = random_matrix(batch, out.elements(), 2);
  const tessel::pass_context ctx{.training = true};
  const auto xb = tessel::batch_block<B>(x);

  // The same GEMMs on matrices of the same shapes: cols (m x k), kernel (k x n), dy (m x n).
  const matrix cols = random_matrix(m, k, 3), kernel = random_matrix(k, n, 4);
  const matrix dz = random_matrix(m, n, 5);
  matrix y = B::make_matrix("y", m, n), dkernel = B::make_matrix("dk", k, n);
  matrix dcols = B::make_matrix("dcols", m, k);
  auto tessel_gemms = [&] {
    B::gemm(false, false, 1.0f, cols, kernel, 0.0f, y);
    B::gemm(true, false, 1.0f, cols, dz, 0.0f, dkernel);
    B::gemm(false, true, 1.0f, dz, kernel, 0.0f, dcols);
  };
  const int threads = static_cast<int>(B::threads());
  const auto mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  auto openblas_gemms = [&] {
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0f, cols.data(), ki,
                kernel.data(), ni, 0.0f, y.data(), ni);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ki, ni, mi, 1.0f, cols.data(), ki,
                dz.data(), ni, 0.0f, dkernel.data(), ni);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mi, ki, ni, 1.0f, dz.data(), ni,
                kernel.data(), ni, 0.0f, dcols.data(), ki);
    openblas_set_num_threads(1);
  };
  auto layer_step = [&] {
    tessel::call_forward(layer, xb, ctx);
    tessel::call_backward(layer, xb, dy, true, ctx);
  };
  const bool equal = launches_match_bodies(g, x, random_matrix(m, k, 6));
  layer_step();  // warm-up: the layer's buffers, libxsmm's kernels, OpenBLAS's threads
  tessel_gemms();
  openblas_gemms();
  std::vector<double> t_layer, t_tessel, t_blas;
  for (int r = 0; r < rounds; ++r) {
    double t0 = now();
    layer_step();
    t_layer.push_back(now() - t0);
    t0 = now();
    tessel_gemms();
    t_tessel.push_back(now() - t0);
    t0 = now();
    openblas_gemms();
    t_blas.push_back(now() - t0);
  }
  const double flops = 6.0 * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k);
  const double layer_gf = flops / median(t_layer) * 1e-9;
  const double tessel_gf = flops / median(t_tessel) * 1e-9;
  const double blas_gf = flops / median(t_blas) * 1e-9;
  std::printf("%-8s batch %2zu  %zux%zux%zu -> %zu, M %5zu K %3zu N %2zu: layer %7.1f us "
              "(%5.1f GFLOP/s), tessel GEMMs %7.1f us (%5.1f), OpenBLAS %7.1f us (%5.1f); "
              "layer / faster sgemm %.2f; launches %s\n",
              name, batch, h, w, c, n, m, k, n, median(t_layer) * 1e6, layer_gf,
              median(t_tessel) * 1e6, tessel_gf, median(t_blas) * 1e6, blas_gf,
              layer_gf / std::max(tessel_gf, blas_gf),
              equal ? "equal the bodies" : "DIFFER from the bodies");
  std::printf("RESULT conv2d_gemm layer=%s batch=%zu m=%zu n=%zu k=%zu layer_gflops=%.1f "
              "tessel_gemm_gflops=%.1f openblas_gflops=%.1f ratio=%.3f launches_equal=%d\n",
              name, batch, m, n, k, layer_gf, tessel_gf, blas_gf,
              layer_gf / std::max(tessel_gf, blas_gf), equal ? 1 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  int rounds = 30;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[++i]);
  std::printf("conv2d forward + backward (3 GEMMs of 2 M N K flops) on %zu threads, median of "
              "%d interleaved rounds\n",
              B::threads(), rounds);
  for (std::size_t batch : {32, 64}) {
    run<conv_1>("conv2d", 28, 28, 1, batch, rounds);
    run<conv_2>("conv2d_1", 28, 28, 12, batch, rounds);
    run<conv_3>("large_k", 12, 12, 24, batch, rounds);
  }
  return 0;
}
