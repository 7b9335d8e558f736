// host: the CPU backend. Data lives in strided_matrix blocks of host memory (row-major, 64-byte
// aligned). GEMM goes through libxsmm's kernels or OpenBLAS on the process's thread pool (by
// size, see host_detail::gemm); the optimizer updates and the element-wise kernels run on the same
// pool; the losses, metrics and row statistics are Kokkos reductions and loops over unmanaged
// views of the same memory. This header's declarations need only the standard library: Kokkos,
// the BLAS and libxsmm are seen by its definitions alone (compiled once in tessel::tessel), so a
// program linked with it never includes their headers.
// Layers never name this type: they are written against backend_interface (interface.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "../core/activations.hpp"
#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../random/philox.hpp"
#include "batch_normalization_bodies.hpp"
#include "convolution_bodies.hpp"
#include "interface.hpp"
#include "kernel_bodies.hpp"
#include "memory_counters.hpp"
#include "strided_matrix.hpp"
#include "thread_pool.hpp"

namespace tessel::backend {

namespace host_detail {

// ---- GEMM -------------------------------------------------------------------------------------
// Row-major c (m x n) = alpha * op(a) * op(b) + beta * c, by size, as measured on the 2-core
// AMD EPYC (benchmarks/gemm_bound_bench, dnnl_gemm_shapes, blis_gemm_shapes; benchmarks/README.md):
// - up to big_gemm_flops (every GEMM of seeds/001's MLP up to batch 256): split over the
//   process's thread pool, each part a libxsmm JIT kernel (single-threaded, no packing; 1.1-1.4x
//   OpenBLAS's one-thread sgemm on these shapes): by rows of c, or for a * b^T (which libxsmm
//   1.17 has no kernel for) by columns of c, each part transposing its rows of b first. Without
//   libxsmm, and for a^T * b^T, OpenBLAS's sgemm on one thread per part. At batch 32 this takes
//   the step's GEMMs from 0.37-0.42 ms (OpenBLAS on 2 threads) to about 0.2.
// - above it (the 4096-wide layers): OpenBLAS's sgemm on the pool's number of threads, whose
//   threads share the packed panels.
// oneDNN's sgemm (what PyTorch uses) and BLIS were measured on both classes and win neither here.
inline constexpr double big_gemm_flops = 2.0 * 256 * 1024 * 1024;  // 2 x m n k
// Each part of a split GEMM does at least this much (below it one thread does it all).
inline constexpr double split_min_flops = 2.0 * 64 * 1024;

// Part `part` of `parts` of [0, n): [part n / parts, (part + 1) n / parts), both ends cut down to
// a multiple of `align`, the last part taking the rest.
struct range {
  std::size_t begin, end;
};
inline range share(std::size_t n, std::size_t part, std::size_t parts, std::size_t align = 1) {
  return {part * n / parts / align * align,
          part + 1 == parts ? n : (part + 1) * n / parts / align * align};
}

// OpenBLAS's thread count, if the BLAS is OpenBLAS (else nothing happens).
TESSEL_INLINE void set_blas_threads(int n);

// The process's thread pool, made on first use (after the runtime has told how many processes
// share the machine); the BLAS then runs on one thread inside the pool's parts, and on the pool's
// number only for the big GEMMs.
TESSEL_INLINE std::unique_ptr<thread_pool>& pool_slot();
TESSEL_INLINE thread_pool& pool();

TESSEL_INLINE void blas_gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                             const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                             std::size_t m, std::size_t n, std::size_t k);

// One part (rows of c) on the calling thread: a libxsmm kernel where there is one.
TESSEL_INLINE void small_gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                              const float* b, std::size_t ldb, float beta, float* c,
                              std::size_t ldc, std::size_t m, std::size_t n, std::size_t k);

// dz = dy * f'(z) through y = f(z) on rows [i0, i1) and columns [j0, j1) (softmax: whole rows),
// and, with db, db[j] = the sum of those rows of dz (row order). A plain function of pointers, so
// that each case is one vectorised loop.
TESSEL_INLINE void activation_backward_block(activation_kind a, const float* y, std::size_t ldy,
                                             const float* dy, std::size_t lddy, float* dz,
                                             std::size_t lddz, std::size_t i0, std::size_t i1,
                                             std::size_t j0, std::size_t j1, float* db);

// What a dense layer applies to the product as it is written (a fused epilogue): the bias (one
// row, or none) and the activation, on `rows` rows of c.
struct epilogue {
  const float* bias = nullptr;
  activation_kind activation = activation_kind::linear;
};
TESSEL_INLINE void apply_epilogue(const epilogue& e, float* c, std::size_t ldc, std::size_t rows,
                                  std::size_t n);

// `e`, if given, is applied to each block of rows by the thread that wrote it, while the rows are
// in its cache.
TESSEL_INLINE void gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                        const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                        std::size_t m, std::size_t n, std::size_t k, const epilogue* e = nullptr);

// Adam and RMSprop go over their variables in blocks of `update_block` elements, in two passes
// per block: first the moments (multiply-adds only, so the loop streams its operands in from
// L2/L3 as fast as the memory gives them), then the square roots and divisions on the block just
// written, now in L1. In one pass the slow square roots and divisions hold back the loads behind
// them: in training, with the state coming from L3, Adam over seeds/001's 269k parameters took
// 102-112 us a step in one pass and 62-77 us in two (benchmarks/step_breakdown, interleaved). The
// same operations on the same values: the same bits.
inline constexpr std::size_t update_block = 512;

// The optimizers' update loops are bound by square roots and divisions: compiled for the
// baseline x86-64 (SSE2) they take 4x longer than with AVX-512, so they are built for several
// instruction sets and the loader picks the best one the CPU has (GCC's function
// multi-versioning; elsewhere, one portable version). The attribute is on their definitions
// only: on a declaration GCC emits a resolver that names clones only the definition's
// translation unit has.
TESSEL_INLINE void adam_chunk(float* __restrict w, const float* __restrict g, float* __restrict m,
                              float* __restrict v, std::size_t n, float alpha, float beta_1,
                              float beta_2, float epsilon);
TESSEL_INLINE void sgd_chunk(float* __restrict w, const float* __restrict g, float* __restrict m,
                             std::size_t n, float lr, float momentum, bool nesterov);
TESSEL_INLINE void rmsprop_chunk(float* __restrict w, const float* __restrict g,
                                 float* __restrict vel, float* __restrict avg,
                                 float* __restrict mom, std::size_t n, float lr, float rho,
                                 float momentum, float epsilon);

// ---- the convolutional and batch normalization layers' launches ------------------------------
// host::for_each runs these functors here instead of index by index (overload resolution finds
// them; every other functor runs through its per-index body). The bodies stay what the GPU runs
// and the reference: each launch below computes the same values by the same operations, every
// sum in the same order, so the same bits, but over contiguous runs that vectorise and without
// the index arithmetic per element:
// - im2col: each kernel row's taps are one contiguous run of kw C values in the input (the kx
//   inside the input, channels last), copied at once, the padding filled with zeros;
// - col2im and the pooling gradients: a scatter-add over the windows (each output row's values
//   added to the input elements under it, rows ascending) instead of the gather over covering
//   windows; every input element still sums its terms in row order, from 0;
// - pooling: each window's channels at once;
// - batch normalization: its column sums in row passes (one accumulator per channel, rows in
//   order), and its element-wise maps per row, the per-channel constants read once.
// Split over the pool by samples (convolution, pooling), rows (the maps) or blocks of channels
// (the sums), so the bits do not depend on the threads either. Each takes for_each's n.
TESSEL_INLINE void launch(const convolution::im2col_rows& f, std::size_t n);
TESSEL_INLINE void launch(const convolution::col2im_elements& f, std::size_t n);
TESSEL_INLINE void launch(const convolution::max_pool_elements& f, std::size_t n);
TESSEL_INLINE void launch(const convolution::average_pool_elements& f, std::size_t n);
TESSEL_INLINE void launch(const convolution::max_pool_gradient_elements& f, std::size_t n);
TESSEL_INLINE void launch(const convolution::average_pool_gradient_elements& f, std::size_t n);
TESSEL_INLINE void launch(const batch_normalization::channel_sums& f, std::size_t n);
TESSEL_INLINE void launch(const batch_normalization::channel_deviations& f, std::size_t n);
TESSEL_INLINE void launch(const batch_normalization::normalize_elements& f, std::size_t n);
TESSEL_INLINE void launch(const batch_normalization::channel_gradient_sums& f, std::size_t n);
TESSEL_INLINE void launch(const batch_normalization::input_gradient_elements& f, std::size_t n);

}  // namespace host_detail

struct host {
  static constexpr std::string_view device_kind = "cpu";
  // Element access m(i, j) and v(i), as a Kokkos view's; data(), extent(d), stride(0), size().
  using matrix = strided_matrix<float, true>;
  using index_vector = strided_matrix<std::int32_t, true>;  // one column
  // The step's loss and metric sums, in the device's memory until the step ends (a GPU backend
  // reads them back once per step, not once per loss and metric).
  using sums = strided_matrix<double, true>;  // one column

  // Kokkos, which the losses' and metrics' kernels run on.
  static bool is_initialized();
  static void initialize(int& argc, char** argv);
  static void finalize();
  // This process is number local_rank of the local_size processes (devices) on its machine, as
  // tessel::initialize finds from MPI. Each computes with its share of the cores (as torchrun
  // sets OMP_NUM_THREADS): its thread pool (GEMMs, optimizer updates) has cores / local_size
  // threads, or TESSEL_NUM_THREADS; the BLAS runs inside it.
  static void place_on_node(int /*local_rank*/, int local_size) {
    host_detail::processes_on_node() = static_cast<std::size_t>(std::max(local_size, 1));
    host_detail::pool_slot().reset();
    host_detail::pool();
  }
  // The threads this process computes with.
  static std::size_t threads() { return host_detail::pool().size(); }

  // Denormal floats flushed to zero (FTZ: results) and read as zero (DAZ: inputs) in this thread
  // and in the BLAS's threads, as XLA runs by default and torch.set_flush_denormal(True) sets:
  // an operation on a denormal takes some CPUs (Intel's) a hundred times longer, and training
  // makes them (Adam's second moments, small gradients). OpenBLAS's threads start before main
  // with the default mode and copy the mode of the thread that creates them, so they are shut
  // down here and started again, from this thread, by the next BLAS call. Threads started later
  // (the data prefetch) copy it from this one. Returns whether the CPU has the switch (x86).
  static bool set_flush_denormal(bool on);
  // Whether denormals are flushed in this thread.
  static bool flushes_denormals() {
#if defined(__SSE2__)
    return (_mm_getcsr() & 0x8040u) == 0x8040u;
#else
    return false;
#endif
  }

  // ---- memory -------------------------------------------------------------------------------
  // (Allocations are 64-byte aligned and not initialised, but make_zeros'.)
  static matrix make_matrix(const std::string& label, std::size_t rows, std::size_t cols);
  static matrix make_zeros(const std::string& label, std::size_t rows, std::size_t cols);
  static index_vector make_indices(const std::string& label, std::size_t n);
  static sums make_sums(const std::string& label, std::size_t n);
  // The one read-back of a step: every sum at once.
  static void download(const sums& src, std::span<double> dst) {
    std::copy(src.data(), src.data() + src.size(), dst.begin());
  }
  // A rows x cols matrix over the elements of `storage` from `offset` on, sharing its memory:
  // the gradients of one bucket are views of the bucket's buffer.
  static matrix alias(const matrix& storage, std::size_t offset, std::size_t rows,
                      std::size_t cols) {
    return matrix(storage.owner(), storage.data() + offset, rows, cols, cols);
  }
  // The memory the collectives read and write (host memory, for MPI).
  static std::span<float> comm_span(const matrix& m) { return {m.data(), m.size()}; }
  static std::size_t rows(const matrix& m) { return m.extent(0); }
  static std::size_t cols(const matrix& m) { return m.extent(1); }
  // Rows [begin, end) of m, sharing its memory.
  static matrix row_range(const matrix& m, std::size_t begin, std::size_t end) {
    return matrix(m.owner(), m.data() + begin * m.stride(0), end - begin, m.extent(1),
                  m.stride(0));
  }
  static void upload(std::span<const float> src, const matrix& dst) {
    std::copy(src.begin(), src.end(), dst.data());
  }
  static void upload(std::span<const std::int32_t> src, const index_vector& dst) {
    std::copy(src.begin(), src.end(), dst.data());
  }
  static void download(const matrix& src, std::span<float> dst) {
    std::copy(src.data(), src.data() + src.size(), dst.begin());
  }
  static void fill(const matrix& m, float v);
  static void copy(const matrix& src, const matrix& dst);

  // f(i) for every i in [0, n): a layer's functor over its kernel bodies (the same functor
  // backend::cuda runs one GPU thread per i), each i about `cost` elements of work; on the
  // pool's threads, contiguous blocks of i, once the work is worth a job.
  // How large a block of a layer's intermediate matrix to make at a time, so that it is still in
  // the core's cache (2 MB of L2 here) when the next step reads it: conv2d's im2col and dcols
  // blocks (layers/convolution.hpp).
  static constexpr std::size_t cache_block_bytes = 512 * 1024;
  // The convolutional and batch normalization layers' functors run through host_detail::launch
  // (the same values, over contiguous runs).
  template <class F>
  static void for_each(const char* label, std::size_t n, std::size_t cost, const F& f) {
    if constexpr (requires { host_detail::launch(f, n); })
      host_detail::launch(f, n);
    else
      for_rows(label, n, cost, [&f](std::size_t i) { f(i); });
  }

  // ---- dense algebra ------------------------------------------------------------------------
  // c = alpha * op(a) * op(b) + beta * c.
  // An empty contraction (a process holding no rows of a batch, whose kernel gradient is
  // x^T * dy over zero rows) still gives beta * c: Kokkos Kernels returns early on such
  // "degenerate" matrices and would leave c as it was.
  static void gemm(bool trans_a, bool trans_b, float alpha, const matrix& a, const matrix& b,
                   float beta, const matrix& c);
  // Dense's forward in one pass over y: y = activation(x w + bias) (bias: one row, or empty),
  // the bias and the activation applied to each block of rows by the thread whose GEMM wrote it.
  static void gemm_bias_activation(const matrix& x, const matrix& w, const matrix& bias,
                                   activation_kind a, const matrix& y);
  // out[i, j] = row[0, j] for every i (the bias before the GEMM accumulates onto it).
  static void broadcast_rows(const matrix& row, const matrix& out);
  // out[0, j] = sum_i in[i, j] (a bias gradient). Blocks of columns, rows inside: unit-stride
  // inner loops on row-major data, each column summed in row order whatever the threads.
  static void column_sums(const matrix& in, const matrix& out);

  // Dense's backward epilogue in one pass over dy: dz = dy * f'(z), written through y = f(z) (dz
  // may be dy), and db = the column sums of dz (db empty: none). Large ones are split over the
  // pool by blocks of columns (softmax, which needs whole rows, by rows when there is no bias):
  // every column is still summed in row order, so the bits do not depend on the threads.
  static void activation_backward_bias(activation_kind a, const matrix& y, const matrix& dy,
                                       const matrix& dz, const matrix& db);

  // ---- element-wise ---------------------------------------------------------------------------
  // m = f(m), in place; softmax along each row.
  static void activation_forward(activation_kind a, const matrix& m);
  // dz = dy * f'(z), written through y = f(z); dz may be dy itself.
  static void activation_backward(activation_kind a, const matrix& y, const matrix& dy,
                                  const matrix& dz) {
    activation_backward_bias(a, y, dy, dz, matrix());
  }
  // out = in * scale + offset (Rescaling), out may be in.
  static void scale_shift(const matrix& in, const matrix& out, float scale, float offset);
  // out = a + b, element-wise (out may be a or b): gradients that fan in to one tensor summed.
  static void add(const matrix& a, const matrix& b, const matrix& out);
  // Layer normalization of each run of `features` consecutive values (a sample's last axis), as
  // Keras computes it: inv = 1 / sqrt(var + epsilon), y = x * (inv * gamma) + (beta - mean *
  // inv * gamma). Keeps xhat = (x - mean) * inv and inv (one per run) for the backward pass.
  static void layer_normalization(const matrix& x, std::size_t features, const matrix& gamma,
                                  bool has_gamma, const matrix& beta, bool has_beta, float epsilon,
                                  const matrix& xhat, const matrix& inv, const matrix& y);
  // Its gradients from dy: gamma's (the column sums of dy * xhat), beta's (of dy), and x's,
  // inv * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma; each where asked.
  static void layer_normalization_backward(const matrix& dy, const matrix& xhat, const matrix& inv,
                                           std::size_t features, const matrix& gamma,
                                           bool has_gamma, const matrix& dx, bool want_dx,
                                           const matrix& dgamma, bool want_dgamma,
                                           const matrix& dbeta, bool want_dbeta);
  // Columns [src_first, src_first + count) of src into columns [dst_first, ...) of dst, every
  // row (a concatenation and its gradient).
  static void copy_columns(const matrix& src, std::size_t src_first, const matrix& dst,
                           std::size_t dst_first, std::size_t count);
  // Inverted dropout: keep with probability 1 - rate and scale by 1 / (1 - rate). `in` is the
  // block of the whole batch's activation (global_cols columns wide) that starts at row
  // first_row and column first_col; the mask of its element (r, j) is drawn at that element's
  // global row-major index, (first_row + r) * global_cols + first_col + j, so a shard draws the
  // mask one device would, whether the rows (the batch) or the columns are split. Forward and
  // backward call this with the same stream.
  static void dropout(const matrix& in, const matrix& out, const random::stream& s, float rate,
                      std::uint64_t first_row, std::uint64_t first_col, std::uint64_t global_cols);

  // ---- losses: each writes the sum over rows of the per-sample loss into out(slot), in the
  //      device's memory, and grad = grad_scale * d(per-sample loss)/d(prediction). ---------------
  // Cross-entropy on probabilities, as Keras computes it: normalise each row to sum 1, clip to
  // [eps, 1 - eps], then -sum(t * log). `labels` (sparse) or `targets` (one-hot), one of them.
  static void crossentropy_on_probabilities(const matrix& probs, const index_vector& labels,
                                            const matrix& targets, const matrix& grad,
                                            float grad_scale, float eps, const sums& out,
                                            std::size_t slot);
  // Cross-entropy on logits through a stable log-softmax: -sum(t * log_softmax(z)); the
  // gradient is softmax(z) * sum(t) - t. `labels` (sparse) or `targets` (one-hot), one of them.
  static void softmax_cross_entropy(const matrix& logits, const index_vector& labels,
                                    const matrix& targets, const matrix& grad, float grad_scale,
                                    const sums& out, std::size_t slot);
  // Per sample: mean over the last axis of (p - t)^2. `classes`: the length of that axis when
  // `pred` holds only some of its columns (a class dimension split across devices; the sums are
  // then partial), else 0.
  static void mean_squared_error(const matrix& pred, const matrix& targets, const matrix& grad,
                                 float grad_scale, const sums& out, std::size_t slot,
                                 std::size_t classes = 0);

  // Binary cross-entropy (Keras's, the JAX backend's arithmetic): each element a probability,
  // clipped to [epsilon, 1 - epsilon] (its gradient 0 where clipped), or a logit (-t log
  // sigmoid(z) - (1 - t) log sigmoid(-z)); the sum over rows of each row's mean over `classes`
  // (its columns when 0) into out(slot), d/dpred * grad_scale into grad.
  static void binary_crossentropy(const matrix& pred, const matrix& targets, const matrix& grad,
                                  float grad_scale, bool from_logits, float epsilon,
                                  const sums& out, std::size_t slot, std::size_t classes = 0);

  // ---- metrics --------------------------------------------------------------------------------
  // The sum over rows of each row's mean |pred - targets| (Keras's MeanAbsoluteError), into
  // out(slot).
  static void mean_absolute_error(const matrix& pred, const matrix& targets, const sums& out,
                                  std::size_t slot);
  // The rows whose arg-max (first maximum, as NumPy) equals the label / the target's arg-max,
  // counted into out(slot).
  static void count_argmax_equal(const matrix& pred, const index_vector& labels,
                                 const matrix& targets, const sums& out, std::size_t slot);

  // ---- a class dimension split across devices (vocab-parallel) -------------------------------
  // Each kernel works on this device's columns of whole rows, starting at global column `col0`;
  // the per-row statistics (rows x 1 or rows x 2 matrices) are completed by all_reduces over the
  // devices that share the rows, between the calls.
  // out(i) = max_j m(i, j)
  static void row_max(const matrix& m, const matrix& out);
  // out(i) = sum_j a(i, j) * b(i, j); with b empty, sum_j a(i, j).
  static void row_dot(const matrix& a, const matrix& b, const matrix& out);
  // dst = exp(src - mx(i)) (dst may be src); sum(i) = sum_j dst(i, j).
  static void exp_rows(const matrix& src, const matrix& mx, const matrix& dst, const matrix& sum);
  // m(i, j) *= 1 / s(i), as the whole-row softmax scales.
  static void divide_rows(const matrix& m, const matrix& s);
  // The softmax's gradient with the row sum of y * dy given: dz = y * (dy - dot(i)).
  static void softmax_backward_rows(const matrix& y, const matrix& dy, const matrix& dot,
                                    const matrix& dz);
  // A cross-entropy on logits z: out(i) = (sum_j t(i, j) * (z(i, j) - mx(i)), sum_j t(i, j)),
  // the targets `labels` (global class indices) or `targets` (this device's columns).
  static void target_terms(const matrix& z, const index_vector& labels, std::size_t col0,
                           const matrix& targets, const matrix& mx, const matrix& out);
  // The cross-entropy on logits from the completed statistics: grad holds exp(z - mx) (from
  // exp_rows), s the row sums, terms target_terms' sums. Per row: loss = sum(t) * log(s) -
  // sum(t * (z - mx)) into out(slot), on every device of the row's group; grad = grad_scale *
  // (exp(z - mx) / s * sum(t) - t).
  static void split_softmax_cross_entropy(const matrix& grad, const index_vector& labels,
                                          std::size_t col0, const matrix& targets, const matrix& s,
                                          const matrix& terms, float grad_scale, const sums& out,
                                          std::size_t slot);
  // A cross-entropy on probabilities with the row sums s given (Keras normalises each row):
  // grad = d(loss)/dq before the normalisation's correction, out(i) = (this device's part of
  // the row's loss, its part of sum_k dL/dq_k * q_k).
  static void crossentropy_terms(const matrix& probs, const index_vector& labels, std::size_t col0,
                                 const matrix& targets, const matrix& s, float eps,
                                 const matrix& grad, const matrix& out);
  // Finishes it from the completed terms: grad = grad_scale * (grad - dot) / s; the rows' loss
  // into out(slot).
  static void split_crossentropy(const matrix& grad, const matrix& s, const matrix& terms,
                                 float grad_scale, const sums& out, std::size_t slot);
  // out(i) = (max_j m(i, j), col0 + its first j), the index as a float (exact below 2^24).
  static void row_argmax(const matrix& m, std::size_t col0, const matrix& out);

  // ---- optimizer updates (Keras 3's formulas), each over a list of variables ------------------
  using updates = std::span<const update_tensors<matrix>>;
  static void sgd_update(updates u, float lr, float momentum, bool nesterov);
  // alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), computed by the caller.
  static void adam_update(updates u, float alpha, float beta_1, float beta_2, float epsilon);
  static void rmsprop_update(updates u, float lr, float rho, float momentum, float epsilon,
                             bool centered);

 private:
  // Below this many elements an element-wise kernel runs on the calling thread (a job of the pool
  // costs a few microseconds).
  static constexpr std::size_t elementwise_parallel_min = 32768;
  // f(i) for every i in [0, rows), each row costing about `row_cost` elements of work: the
  // pool's threads take contiguous blocks of rows once the work is worth a job (the threads the
  // GEMMs run on; Debian's Kokkos is Serial).
  template <class F>
  static void for_rows(const char* /*label*/, std::size_t rows, std::size_t row_cost, F f) {
    thread_pool& p = host_detail::pool();
    if (rows < 2 || rows * row_cost < elementwise_parallel_min || p.size() == 1) {
      for (std::size_t i = 0; i < rows; ++i) f(i);
      return;
    }
    p.run([&](std::size_t part, std::size_t parts) {
      const auto [i0, i1] = host_detail::share(rows, part, parts);
      for (std::size_t i = i0; i < i1; ++i) f(i);
    });
  }
  // f(t, begin, end) over every element of every tensor of u, in one job of the pool (one
  // dispatch for all the variables of a step): each thread takes the same share of each tensor,
  // [part n / parts, (part + 1) n / parts) at 16-element boundaries, which is the block of rows
  // its GEMM part wrote into the gradient (a kernel gradient's rows are split the same way) and
  // the same block every step (the slots stay in that core's cache); a tensor below
  // small_tensor elements (a bias) goes whole to one thread, in turn. Below parallel_min
  // elements in all, the caller does everything.
  static constexpr std::size_t small_tensor = 4096, parallel_min = 16384;
  template <class F>
  static void for_shares(updates u, F f) {
    std::size_t total = 0;
    for (const auto& t : u) total += t.value.size();
    thread_pool& p = host_detail::pool();
    if (p.size() == 1 || total < parallel_min) {
      for (const auto& t : u) f(t, 0, t.value.size());
      return;
    }
    p.run([&](std::size_t part, std::size_t parts) {
      std::size_t small = 0;
      for (const auto& t : u) {
        const std::size_t n = t.value.size();
        if (n < small_tensor) {
          if (small++ % parts == part && n > 0) f(t, 0, n);
          continue;
        }
        const auto [b, e] = host_detail::share(n, part, parts, 16);
        if (e > b) f(t, b, e);
      }
    });
  }
  // Row i of m (for the kernel bodies, which take a row's pointer; m may have no columns).
  static float* row_of(const matrix& m, std::size_t i) { return m.data() + i * m.stride(0); }
  // A loss's targets for the kernel bodies: the labels where there are any, else `targets`.
  static kernel_bodies::targets targets_of(const index_vector& labels, const matrix& targets,
                                           std::size_t col0 = 0) {
    return {labels.extent(0) > 0 ? labels.data() : nullptr, targets.data(), targets.stride(0),
            col0};
  }
};

}  // namespace tessel::backend

namespace tessel {
// TensorFlow's tf.config.experimental.get_memory_info(device): the bytes of the host backend's
// buffers (weights, gradients, optimizer slots, activations, communication buffers) allocated
// now, and the most at once since the program started or since reset_memory_stats().
TESSEL_INLINE memory_info get_memory_info() noexcept;
// tf.config.experimental.reset_memory_stats(device): the peak starts again from what is
// allocated now.
TESSEL_INLINE void reset_memory_stats() noexcept;
// The same for a device by TensorFlow's name: "CPU:0" (the host backend's buffers, as above) or
// "GPU:0" (this process's GPU: the device memory the CUDA backend holds from CUDA's pool). A
// name of no device this process has is a value_error saying which it has.
TESSEL_INLINE memory_info get_memory_info(std::string_view device);
TESSEL_INLINE void reset_memory_stats(std::string_view device);
}  // namespace tessel

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp). Kokkos, the BLAS,
// libxsmm and the dynamic loader are seen here alone: a program linked with tessel::tessel does
// not include their headers.
#if TESSEL_DEFINITIONS
#include <dlfcn.h>

#include <Kokkos_Core.hpp>
#include <cblas.h>
#include <cstring>
#include <new>
#include <stdexcept>
#if defined(TESSEL_HAVE_LIBXSMM)
#include <libxsmm.h>
#endif

namespace tessel::backend {
namespace host_detail {

// The losses' and metrics' reductions and the row statistics run as Kokkos parallel patterns.
using execution_space = Kokkos::DefaultHostExecutionSpace;
inline Kokkos::RangePolicy<execution_space> policy(std::size_t n) {
  return Kokkos::RangePolicy<execution_space>(0, n);
}
// A reduction's result: slot `slot` of the step's sums, as a Kokkos view (of memory it does not
// own).
inline Kokkos::View<double, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> sum_at(
    const host::sums& out, std::size_t slot) {
  return Kokkos::View<double, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
      out.data() + slot);
}

// The bytes of the backend's buffers now allocated, and the most since the last reset (what
// get_memory_info reports).
inline memory_counters& counters() noexcept {
  static memory_counters c;
  return c;
}

// n elements of T, not initialised, 64 bytes aligned (a cache line, an AVX-512 register), owned
// by the returned pointer and every view of it; counted in memory_counters.
template <class T>
strided_matrix<T, true> allocate(std::size_t rows, std::size_t cols) {
  constexpr std::align_val_t alignment{64};
  const std::size_t n = rows * cols;
  if (n == 0) return strided_matrix<T, true>(nullptr, nullptr, rows, cols, cols);
  T* p = static_cast<T*>(::operator new(n * sizeof(T), alignment));
  counters().add(n * sizeof(T));
  std::shared_ptr<T> owner(p, [n](T* q) {
    counters().remove(n * sizeof(T));
    ::operator delete(q, alignment);
  });
  return strided_matrix<T, true>(std::move(owner), p, rows, cols, cols);
}

TESSEL_INLINE void set_blas_threads(int n) {
  using set_threads_t = void (*)(int);
  static const auto set_threads =
      reinterpret_cast<set_threads_t>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set_threads != nullptr) set_threads(n);
}

TESSEL_INLINE std::unique_ptr<thread_pool>& pool_slot() {
  static std::unique_ptr<thread_pool> p;
  return p;
}

TESSEL_INLINE thread_pool& pool() {
  auto& p = pool_slot();
  if (!p) {
    p = std::make_unique<thread_pool>(pool_threads());
    set_blas_threads(1);
  }
  return *p;
}

TESSEL_INLINE void blas_gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                             const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                             std::size_t m, std::size_t n, std::size_t k) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<std::size_t>(lda, 1)), b,
              static_cast<int>(std::max<std::size_t>(ldb, 1)), beta, c,
              static_cast<int>(std::max<std::size_t>(ldc, 1)));
}

TESSEL_INLINE void small_gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                              const float* b, std::size_t ldb, float beta, float* c,
                              std::size_t ldc, std::size_t m, std::size_t n, std::size_t k) {
#if defined(TESSEL_HAVE_LIBXSMM)
  if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
    // Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T.
    const auto M = static_cast<libxsmm_blasint>(n), N = static_cast<libxsmm_blasint>(m),
               K = static_cast<libxsmm_blasint>(k), la = static_cast<libxsmm_blasint>(ldb),
               lb = static_cast<libxsmm_blasint>(lda), lc = static_cast<libxsmm_blasint>(ldc);
    const int flags = (tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    if (const libxsmm_smmfunction f =
            libxsmm_smmdispatch(M, N, K, &la, &lb, &lc, &alpha, &beta, &flags, nullptr)) {
      f(b, a, c);
      return;
    }
  }
#endif
  blas_gemm(ta, tb, alpha, a, lda, b, ldb, beta, c, ldc, m, n, k);
}

TESSEL_INLINE void activation_backward_block(activation_kind a, const float* y, std::size_t ldy,
                                             const float* dy, std::size_t lddy, float* dz,
                                             std::size_t lddz, std::size_t i0, std::size_t i1,
                                             std::size_t j0, std::size_t j1, float* db) {
  const std::size_t n = j1 - j0;
  float* out = db != nullptr ? db + j0 : nullptr;
  if (out != nullptr) std::fill(out, out + n, 0.0f);
  for (std::size_t i = i0; i < i1; ++i) {
    const float* yr = y + i * ldy + j0;
    const float* gr = dy + i * lddy + j0;
    float* zr = dz + i * lddz + j0;
    switch (a) {
      case activation_kind::linear:
        if (zr != gr) std::copy(gr, gr + n, zr);
        break;
      case activation_kind::relu:  // gr[j] read unconditionally: a select, not a branch
        for (std::size_t j = 0; j < n; ++j) zr[j] = kernel_bodies::relu_gradient(yr[j], gr[j]);
        break;
      case activation_kind::sigmoid:
        for (std::size_t j = 0; j < n; ++j) zr[j] = kernel_bodies::sigmoid_gradient(yr[j], gr[j]);
        break;
      case activation_kind::tanh:
        for (std::size_t j = 0; j < n; ++j) zr[j] = kernel_bodies::tanh_gradient(yr[j], gr[j]);
        break;
      case activation_kind::softmax:  // j0 = 0, j1 = the row's length
        kernel_bodies::softmax_gradient_row(yr, gr, zr, n);
        break;
    }
    if (out != nullptr)
      for (std::size_t j = 0; j < n; ++j) out[j] += zr[j];
  }
}

TESSEL_INLINE void apply_epilogue(const epilogue& e, float* c, std::size_t ldc, std::size_t rows,
                                  std::size_t n) {
  for (std::size_t i = 0; i < rows; ++i) {
    float* r = c + i * ldc;
    if (e.bias != nullptr)
      for (std::size_t j = 0; j < n; ++j) r[j] += e.bias[j];
    switch (e.activation) {
      case activation_kind::linear: break;
      case activation_kind::relu:  // NaN stays NaN, as jax.nn.relu (max(x, 0)) gives it
        for (std::size_t j = 0; j < n; ++j) r[j] = kernel_bodies::relu(r[j]);
        break;
      case activation_kind::sigmoid:
        for (std::size_t j = 0; j < n; ++j) r[j] = kernel_bodies::sigmoid(r[j]);
        break;
      case activation_kind::tanh:
        for (std::size_t j = 0; j < n; ++j) r[j] = kernel_bodies::tanh(r[j]);
        break;
      case activation_kind::softmax:
        kernel_bodies::softmax_row(r, n);
        break;
    }
  }
}

TESSEL_INLINE void gemm(bool ta, bool tb, float alpha, const float* a, std::size_t lda,
                        const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                        std::size_t m, std::size_t n, std::size_t k, const epilogue* e) {
  if (m == 0 || n == 0) return;
  thread_pool& p = pool();
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (flops > big_gemm_flops) {
    set_blas_threads(static_cast<int>(p.size()));
    blas_gemm(ta, tb, alpha, a, lda, b, ldb, beta, c, ldc, m, n, k);
    set_blas_threads(1);
    if (e != nullptr) {
      p.run([&](std::size_t part, std::size_t parts) {
        const auto [r0, r1] = share(m, part, parts);
        if (r1 > r0) apply_epilogue(*e, c + r0 * ldc, ldc, r1 - r0, n);
      });
    }
    return;
  }
#if defined(TESSEL_HAVE_LIBXSMM)
  // Row-major a * b^T (an input gradient, dy w^T), for which libxsmm 1.17 has no kernel: each part
  // takes a block of c's columns, transposes its rows of b into a scratch block (libxsmm_otrans)
  // and runs the a * b kernel on it; or, where a is the smaller operand (a batch of 32 rows
  // against a kernel's 256), transposes a and computes the block's transpose. 32 x 256 x 256 on 2
  // threads (seeds/001's input gradient), in cache: 38-50 us through OpenBLAS by rows (each part
  // packing all of b), 27-29 us transposing b's rows, 24 us transposing a; 256 x 256 x 256 (b's
  // rows): 195-196 us against 204-213.
  if (tb && !ta && e == nullptr && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && n >= 16) {
    std::size_t parts = p.size();
    while (parts > 1 && (flops / static_cast<double>(parts) < split_min_flops || n < 16 * parts))
      --parts;
    auto part_columns = [&](std::size_t j0, std::size_t j1) {
      thread_local std::vector<float> scratch, product;
      const std::size_t w = j1 - j0;
      if (m * (k + w) < w * k) {
        // a is the smaller operand (the batch's rows, against a kernel's): transpose it instead,
        // run c^T[j0:j1, :] = b[j0:j1, :] a^T, and write its transpose into c's columns.
        scratch.resize(k * m);
        product.resize(w * m);
        libxsmm_otrans(scratch.data(), a, sizeof(float), static_cast<libxsmm_blasint>(k),
                       static_cast<libxsmm_blasint>(m), static_cast<libxsmm_blasint>(lda),
                       static_cast<libxsmm_blasint>(m));
        small_gemm(false, false, 1.0f, b + j0 * ldb, ldb, scratch.data(), m, 0.0f,
                   product.data(), m, w, m, k);
        for (std::size_t i = 0; i < m; ++i) {
          float* row = c + i * ldc + j0;
          const float* column = product.data() + i;
          if (beta == 0.0f)
            for (std::size_t j = 0; j < w; ++j) row[j] = column[j * m];
          else
            for (std::size_t j = 0; j < w; ++j) row[j] += column[j * m];
        }
        return;
      }
      scratch.resize(k * w);
      // b's rows j0..j1 (k long, ldb apart) are a column-major k x w matrix: its transpose,
      // column-major w x k, is the row-major k x w block b^T[:, j0:j1].
      libxsmm_otrans(scratch.data(), b + j0 * ldb, sizeof(float),
                     static_cast<libxsmm_blasint>(k), static_cast<libxsmm_blasint>(w),
                     static_cast<libxsmm_blasint>(ldb), static_cast<libxsmm_blasint>(w));
      small_gemm(false, false, alpha, a, lda, scratch.data(), w, beta, c + j0, ldc, m, w, k);
    };
    if (parts == 1) return part_columns(0, n);
    p.run([&](std::size_t part, std::size_t) {
      if (part >= parts) return;
      const auto [j0, j1] = share(n, part, parts, 16);
      if (j1 > j0) part_columns(j0, j1);
    });
    return;
  }
#endif
  // Parts of whole 8-row blocks (a vector's width of rows for the kernels).
  std::size_t parts = p.size();
  while (parts > 1 && (flops / static_cast<double>(parts) < split_min_flops || m < 8 * parts))
    --parts;
  auto part_rows = [&](std::size_t r0, std::size_t r1) {
    // Rows r0.. of op(a): rows of a, or columns of a when it is transposed.
    const float* ap = ta ? a + r0 : a + r0 * lda;
    small_gemm(ta, tb, alpha, ap, lda, b, ldb, beta, c + r0 * ldc, ldc, r1 - r0, n, k);
    if (e != nullptr) apply_epilogue(*e, c + r0 * ldc, ldc, r1 - r0, n);
  };
  if (parts == 1) return part_rows(0, m);
  const std::size_t rows = (m / parts + 7) / 8 * 8;
  p.run([&](std::size_t part, std::size_t) {
    if (part >= parts) return;
    const std::size_t r0 = std::min(m, part * rows);
    const std::size_t r1 = part + 1 == parts ? m : std::min(m, r0 + rows);
    if (r1 > r0) part_rows(r0, r1);
  });
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define TESSEL_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TESSEL_MULTIVERSION
#endif

TESSEL_MULTIVERSION TESSEL_INLINE void adam_chunk(float* __restrict w, const float* __restrict g,
                                                  float* __restrict m, float* __restrict v,
                                                  std::size_t n, float alpha, float beta_1,
                                                  float beta_2, float epsilon) {
  const float one_minus_b1 = 1.0f - beta_1, one_minus_b2 = 1.0f - beta_2;
  for (std::size_t b = 0; b < n; b += update_block) {
    const std::size_t e = std::min(n, b + update_block);
    for (std::size_t k = b; k < e; ++k)
      kernel_bodies::adam_moments(g[k], m[k], v[k], one_minus_b1, one_minus_b2);
    for (std::size_t k = b; k < e; ++k)
      w[k] -= kernel_bodies::adam_step(m[k], v[k], alpha, epsilon);
  }
}

TESSEL_MULTIVERSION TESSEL_INLINE void sgd_chunk(float* __restrict w, const float* __restrict g,
                                                 float* __restrict m, std::size_t n, float lr,
                                                 float momentum, bool nesterov) {
  // One loop per case, so that each vectorises (kernel_bodies::sgd's branches fold away).
  if (m == nullptr) {
    for (std::size_t k = 0; k < n; ++k) kernel_bodies::sgd(w[k], g[k], nullptr, lr, 0.0f, false);
  } else if (nesterov) {
    for (std::size_t k = 0; k < n; ++k) kernel_bodies::sgd(w[k], g[k], &m[k], lr, momentum, true);
  } else {
    for (std::size_t k = 0; k < n; ++k) kernel_bodies::sgd(w[k], g[k], &m[k], lr, momentum, false);
  }
}

TESSEL_MULTIVERSION TESSEL_INLINE void rmsprop_chunk(float* __restrict w, const float* __restrict g,
                                                     float* __restrict vel, float* __restrict avg,
                                                     float* __restrict mom, std::size_t n, float lr,
                                                     float rho, float momentum, float epsilon) {
  for (std::size_t b = 0; b < n; b += update_block) {
    const std::size_t e = std::min(n, b + update_block);
    for (std::size_t k = b; k < e; ++k)
      kernel_bodies::rmsprop_averages(g[k], vel[k], avg ? &avg[k] : nullptr, rho);
    for (std::size_t k = b; k < e; ++k) {
      const float increment =
          kernel_bodies::rmsprop_increment(g[k], vel[k], avg ? &avg[k] : nullptr, lr, epsilon);
      kernel_bodies::rmsprop_step(w[k], increment, mom ? &mom[k] : nullptr, momentum);
    }
  }
}

#undef TESSEL_MULTIVERSION

// ---- the convolutional and batch normalization layers' launches ------------------------------
// f(i0, i1) over [0, n) in contiguous blocks: on the pool's threads, one block each, once the
// work (n items of `cost` elements each) is worth a job (as host::for_rows decides); else all on
// the caller.
inline constexpr std::size_t launch_parallel_min = 32768;
template <class F>
void blocks(std::size_t n, std::size_t cost, std::size_t align, F&& f) {
  thread_pool& p = pool();
  if (n < 2 || n * cost < launch_parallel_min || p.size() == 1) return f(0, n);
  p.run([&](std::size_t part, std::size_t parts) {
    const auto [i0, i1] = share(n, part, parts, align);
    if (i1 > i0) f(i0, i1);
  });
}

// The taps [k0, k1) of a window dimension that fall inside the input from output position o.
inline range inside(const convolution::window& d, std::size_t o) {
  const std::size_t start = o * d.stride;  // the window's first tap, in the padded input
  const std::size_t k0 = start >= d.before ? 0 : std::min(d.size, d.before - start);
  const std::size_t end = d.before + d.in;  // one past the input, in the padded input
  const std::size_t k1 = start >= end ? 0 : std::min(d.size, end - start);
  return {k0, std::max(k0, k1)};
}

// Element-wise runs, plain loops that vectorise (no aliasing between the two).
inline void copy_run(const float* __restrict s, float* __restrict d, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) d[j] = s[j];
}
inline void zero_run(float* d, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) d[j] = 0.0f;
}
inline void add_run(const float* __restrict s, float* __restrict d, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) d[j] += s[j];
}

TESSEL_INLINE void launch(const convolution::im2col_rows& f, std::size_t) {
  const convolution::geometry& g = f.g;
  const std::size_t c = g.channels, patch = g.patch(), kh = g.h.size, kw = g.w.size;
  const std::size_t oh = g.h.out, ow = g.w.out;
  // Blocks of output rows of the image (b, oy), each ow rows of the im2col matrix.
  blocks(g.batch * oh, ow * patch, 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t b = r / oh, oy = r % oh;
      float* row = f.cols + r * ow * patch;
      if (c == 1) {
        // One channel (a grayscale input): runs of a few values, each tap's value chosen in
        // place (a run's copy would be a call for 3 values), a kernel row for every ox at once.
        for (std::size_t ky = 0; ky < kh; ++ky) {
          std::size_t iy = 0;
          const bool in = convolution::input_at(g.h, oy, ky, iy);
          const float* s = f.x + (b * g.h.in + iy) * g.w.in;
          const auto w = static_cast<std::ptrdiff_t>(g.w.in);
          for (std::size_t ox = 0; ox < ow; ++ox) {
            float* d = row + ox * patch + ky * kw;
            const auto start = static_cast<std::ptrdiff_t>(ox * g.w.stride) -
                               static_cast<std::ptrdiff_t>(g.w.before);
            for (std::size_t k = 0; k < kw; ++k) {
              const std::ptrdiff_t ix = start + static_cast<std::ptrdiff_t>(k);
              d[k] = in && ix >= 0 && ix < w ? s[ix] : 0.0f;
            }
          }
        }
        continue;
      }
      for (std::size_t ox = 0; ox < ow; ++ox, row += patch) {
        const auto [k0, k1] = inside(g.w, ox);
        const float* first = f.x + (ox * g.w.stride + k0 - g.w.before) * c;  // tap k0's column
        for (std::size_t ky = 0; ky < kh; ++ky) {
          float* d = row + ky * kw * c;
          std::size_t iy = 0;
          if (k1 == k0 || !convolution::input_at(g.h, oy, ky, iy)) {
            zero_run(d, kw * c);
            continue;
          }
          zero_run(d, k0 * c);
          copy_run(first + (b * g.h.in + iy) * g.w.in * c, d + k0 * c, (k1 - k0) * c);
          zero_run(d + k1 * c, (kw - k1) * c);
        }
      }
    }
  });
}

TESSEL_INLINE void launch(const convolution::col2im_elements& f, std::size_t) {
  const convolution::geometry& g = f.g;
  const std::size_t c = g.channels, patch = g.patch(), kh = g.h.size, kw = g.w.size;
  const std::size_t oh = g.h.out, ow = g.w.out, image = g.h.in * g.w.in * c;
  blocks(g.batch, oh * ow * patch, 1, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t b = b0; b < b1; ++b) {
      float* dx = f.dx + b * image;
      zero_run(dx, image);
      const float* row = f.dcols + b * oh * ow * patch;
      for (std::size_t oy = 0; oy < oh; ++oy)
        for (std::size_t ox = 0; ox < ow; ++ox, row += patch) {
          const auto [k0, k1] = inside(g.w, ox);
          if (k1 == k0) continue;
          for (std::size_t ky = 0; ky < kh; ++ky) {
            std::size_t iy = 0;
            if (!convolution::input_at(g.h, oy, ky, iy)) continue;
            add_run(row + (ky * kw + k0) * c,
                    dx + (iy * g.w.in + ox * g.w.stride + k0 - g.w.before) * c, (k1 - k0) * c);
          }
        }
    }
  });
}

// Pooling over one window, all channels at once: the channels in blocks of pool_block. Below
// few_channels a window's bookkeeping costs more than its values: the body, index by index.
inline constexpr std::size_t pool_block = 64, few_channels = 4;
template <class F>
void body_blocks(const F& f, std::size_t n, std::size_t cost) {
  blocks(n, cost, 1, [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) f(i);
  });
}

TESSEL_INLINE void launch(const convolution::max_pool_elements& f, std::size_t n) {
  const convolution::geometry& g = f.g;
  const std::size_t ch = g.channels;
  if (ch < few_channels) return body_blocks(f, n, g.h.size * g.w.size);
  blocks(g.out_rows(), g.h.size * g.w.size * ch, 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t ox = r % g.w.out, oy = (r / g.w.out) % g.h.out;
      const std::size_t b = r / (g.w.out * g.h.out);
      const auto [ky0, ky1] = inside(g.h, oy);
      const auto [kx0, kx1] = inside(g.w, ox);
      for (std::size_t c0 = 0; c0 < ch; c0 += pool_block) {
        const std::size_t n = std::min(pool_block, ch - c0);
        float best[pool_block];
        bool any = false;
        for (std::size_t ky = ky0; ky < ky1; ++ky)
          for (std::size_t kx = kx0; kx < kx1; ++kx) {
            const float* x = f.x +
                             ((b * g.h.in + oy * g.h.stride + ky - g.h.before) * g.w.in +
                              ox * g.w.stride + kx - g.w.before) * ch + c0;
            if (!any) {
              for (std::size_t j = 0; j < n; ++j) best[j] = x[j];
              any = true;
              continue;
            }
            // NaN wins, as max_pool_value's comparison; a select, not a branch
            for (std::size_t j = 0; j < n; ++j) {
              const bool take = x[j] > best[j] || (x[j] != x[j] && best[j] == best[j]);
              best[j] = take ? x[j] : best[j];
            }
          }
        float* y = f.y + r * ch + c0;
        for (std::size_t j = 0; j < n; ++j) y[j] = any ? best[j] : 0.0f;
      }
    }
  });
}

TESSEL_INLINE void launch(const convolution::average_pool_elements& f, std::size_t n) {
  const convolution::geometry& g = f.g;
  const std::size_t ch = g.channels;
  if (ch < few_channels) return body_blocks(f, n, g.h.size * g.w.size);
  blocks(g.out_rows(), g.h.size * g.w.size * ch, 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t ox = r % g.w.out, oy = (r / g.w.out) % g.h.out;
      const std::size_t b = r / (g.w.out * g.h.out);
      const auto [ky0, ky1] = inside(g.h, oy);
      const auto [kx0, kx1] = inside(g.w, ox);
      const auto count = static_cast<float>(convolution::pool_count(g, oy, ox));
      for (std::size_t c0 = 0; c0 < ch; c0 += pool_block) {
        const std::size_t n = std::min(pool_block, ch - c0);
        float s[pool_block];
        zero_run(s, n);
        for (std::size_t ky = ky0; ky < ky1; ++ky)
          for (std::size_t kx = kx0; kx < kx1; ++kx)
            add_run(f.x +
                        ((b * g.h.in + oy * g.h.stride + ky - g.h.before) * g.w.in +
                         ox * g.w.stride + kx - g.w.before) * ch + c0,
                    s, n);
        float* y = f.y + r * ch + c0;
        for (std::size_t j = 0; j < n; ++j) y[j] = s[j] / count;
      }
    }
  });
}

TESSEL_INLINE void launch(const convolution::max_pool_gradient_elements& f, std::size_t n) {
  const convolution::geometry& g = f.g;
  const std::size_t ch = g.channels, image = g.h.in * g.w.in * ch;
  const std::size_t outputs = g.h.out * g.w.out;
  if (ch < few_channels) {
    // Each output's maximum found again by the body, its gradient added where it came from.
    return blocks(g.batch, outputs * g.h.size * g.w.size * ch, 1,
                  [&](std::size_t b0, std::size_t b1) {
                    zero_run(f.dx + b0 * image, (b1 - b0) * image);
                    for (std::size_t o = b0 * outputs * ch; o < b1 * outputs * ch; ++o) {
                      std::size_t from = 0;
                      convolution::max_pool_value(g, f.x, o, from);
                      f.dx[from] += f.dy[o];
                    }
                  });
  }
  (void)n;
  blocks(g.batch, outputs * g.h.size * g.w.size * ch, 1, [&](std::size_t b0, std::size_t b1) {
    zero_run(f.dx + b0 * image, (b1 - b0) * image);
    for (std::size_t r = b0 * outputs; r < b1 * outputs; ++r) {
      const std::size_t ox = r % g.w.out, oy = (r / g.w.out) % g.h.out;
      const std::size_t b = r / outputs;
      const auto [ky0, ky1] = inside(g.h, oy);
      const auto [kx0, kx1] = inside(g.w, ox);
      if (ky1 == ky0 || kx1 == kx0) continue;
      for (std::size_t c0 = 0; c0 < ch; c0 += pool_block) {
        const std::size_t m = std::min(pool_block, ch - c0);
        // Each channel's maximum and the tap it came from (32-bit, so that the selects
        // vectorise with the floats'), as max_pool_value finds them.
        float best[pool_block];
        std::uint32_t from[pool_block];
        const float* x0 = f.x + ((b * g.h.in + oy * g.h.stride + ky0 - g.h.before) * g.w.in +
                                 ox * g.w.stride + kx0 - g.w.before) * ch + c0;
        for (std::size_t j = 0; j < m; ++j) {
          best[j] = x0[j];
          from[j] = 0;
        }
        for (std::size_t ky = ky0; ky < ky1; ++ky)
          for (std::size_t kx = ky == ky0 ? kx0 + 1 : kx0; kx < kx1; ++kx) {
            const float* x = x0 + ((ky - ky0) * g.w.in + kx - kx0) * ch;
            const auto tap = static_cast<std::uint32_t>((ky - ky0) * g.w.size + kx - kx0);
            for (std::size_t j = 0; j < m; ++j) {
              const bool take = x[j] > best[j] || (x[j] != x[j] && best[j] == best[j]);
              best[j] = take ? x[j] : best[j];
              from[j] = take ? tap : from[j];
            }
          }
        const float* dy = f.dy + r * ch + c0;
        float* dx = f.dx + (x0 - f.x);
        for (std::size_t j = 0; j < m; ++j) {
          const std::size_t ky = from[j] / g.w.size, kx = from[j] % g.w.size;
          dx[(ky * g.w.in + kx) * ch + j] += dy[j];
        }
      }
    }
  });
}

TESSEL_INLINE void launch(const convolution::average_pool_gradient_elements& f, std::size_t) {
  const convolution::geometry& g = f.g;
  const std::size_t ch = g.channels, image = g.h.in * g.w.in * ch;
  blocks(g.batch, g.h.out * g.w.out * g.h.size * g.w.size * ch, 1,
         [&](std::size_t b0, std::size_t b1) {
           for (std::size_t b = b0; b < b1; ++b) {
             float* dx = f.dx + b * image;
             zero_run(dx, image);
             for (std::size_t oy = 0; oy < g.h.out; ++oy)
               for (std::size_t ox = 0; ox < g.w.out; ++ox) {
                 const float* dy = f.dy + ((b * g.h.out + oy) * g.w.out + ox) * ch;
                 const auto count = static_cast<float>(convolution::pool_count(g, oy, ox));
                 const auto [ky0, ky1] = inside(g.h, oy);
                 const auto [kx0, kx1] = inside(g.w, ox);
                 for (std::size_t c0 = 0; c0 < ch; c0 += pool_block) {
                   const std::size_t n = std::min(pool_block, ch - c0);
                   float share[pool_block];
                   for (std::size_t j = 0; j < n; ++j) share[j] = dy[c0 + j] / count;
                   for (std::size_t ky = ky0; ky < ky1; ++ky)
                     for (std::size_t kx = kx0; kx < kx1; ++kx)
                       add_run(share,
                               dx + ((oy * g.h.stride + ky - g.h.before) * g.w.in +
                                     ox * g.w.stride + kx - g.w.before) * ch + c0,
                               n);
                 }
               }
           }
         });
}

// Batch normalization's column sums: one double accumulator per channel, rows in order (as
// column_sum and its siblings add them), channels in blocks of bn_block; the pool's threads
// take blocks of channels.
inline constexpr std::size_t bn_block = 64;
template <class F>
void channel_blocks(std::size_t rows, std::size_t channels, F&& f) {
  blocks(channels, rows, 8, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t b = c0; b < c1; b += bn_block) f(b, std::min(c1, b + bn_block));
  });
}

TESSEL_INLINE void launch(const batch_normalization::channel_sums& f, std::size_t) {
  const std::size_t ld = f.channels;
  channel_blocks(f.rows, f.channels, [&](std::size_t c0, std::size_t c1) {
    const std::size_t n = c1 - c0;
    double s[bn_block] = {};
    for (std::size_t i = 0; i < f.rows; ++i) {
      const float* x = f.x + i * ld + c0;
      for (std::size_t j = 0; j < n; ++j) s[j] += x[j];
    }
    for (std::size_t j = 0; j < n; ++j) f.sums[c0 + j] = static_cast<float>(s[j]);
  });
}

TESSEL_INLINE void launch(const batch_normalization::channel_deviations& f, std::size_t) {
  const std::size_t ld = f.channels;
  channel_blocks(f.rows, f.channels, [&](std::size_t c0, std::size_t c1) {
    const std::size_t n = c1 - c0;
    double s[bn_block] = {};
    float mean[bn_block];
    for (std::size_t j = 0; j < n; ++j) mean[j] = f.mean(c0 + j);
    for (std::size_t i = 0; i < f.rows; ++i) {
      const float* x = f.x + i * ld + c0;
      for (std::size_t j = 0; j < n; ++j) {
        const double d = static_cast<double>(x[j]) - mean[j];
        s[j] += d * d;
      }
    }
    for (std::size_t j = 0; j < n; ++j) f.sums[f.channels + c0 + j] = static_cast<float>(s[j]);
  });
}

TESSEL_INLINE void launch(const batch_normalization::channel_gradient_sums& f, std::size_t) {
  const std::size_t ld = f.channels;
  channel_blocks(f.rows, f.channels, [&](std::size_t c0, std::size_t c1) {
    const std::size_t n = c1 - c0;
    double s[bn_block] = {}, t[bn_block] = {};
    for (std::size_t i = 0; i < f.rows; ++i) {
      const float* dy = f.dy + i * ld + c0;
      const float* xhat = f.xhat + i * ld + c0;
      for (std::size_t j = 0; j < n; ++j) {
        s[j] += dy[j];
        t[j] += static_cast<double>(dy[j]) * xhat[j];
      }
    }
    for (std::size_t j = 0; j < n; ++j) f.store(c0 + j, s[j], t[j]);
  });
}

// Rows [i0, i1) of x (channels long) normalized: y = x a + b, x-hat = (x - mean) inv, as
// batch_normalization::normalize. The per-channel constants as parameters of their own, so that
// the compiler knows no store changes them and vectorises the channels.
inline void normalize_rows(const float* __restrict x, const float* __restrict mean,
                           const float* __restrict a, const float* __restrict b,
                           const float* __restrict inv, std::size_t channels, std::size_t i0,
                           std::size_t i1, float* __restrict y, float* __restrict xhat) {
  for (std::size_t i = i0; i < i1; ++i) {
    const std::size_t at = i * channels;
    for (std::size_t c = 0; c < channels; ++c) {
      xhat[at + c] = (x[at + c] - mean[c]) * inv[c];
      y[at + c] = x[at + c] * a[c] + b[c];
    }
  }
}

TESSEL_INLINE void launch(const batch_normalization::normalize_elements& f, std::size_t n) {
  const std::size_t ch = f.channels, rows = ch == 0 ? 0 : n / ch;
  blocks(rows, ch, 1, [&](std::size_t i0, std::size_t i1) {
    normalize_rows(f.x, f.maps, f.maps + 2 * ch, f.maps + 3 * ch, f.maps + 4 * ch, ch, i0, i1,
                   f.y, f.xhat);
  });
}

// Rows [i0, i1) of the input's gradient in training, as batch_normalization::input_gradient:
// a (dy - mean dy - x-hat mean(dy x-hat)); in inference (mean_dy null) a dy.
inline void input_gradient_rows(const float* __restrict dy, const float* __restrict xhat,
                                const float* __restrict a, const float* __restrict mean_dy,
                                const float* __restrict mean_dy_xhat, std::size_t channels,
                                std::size_t i0, std::size_t i1, float* __restrict dx) {
  for (std::size_t i = i0; i < i1; ++i) {
    const std::size_t at = i * channels;
    if (mean_dy == nullptr) {
      for (std::size_t c = 0; c < channels; ++c) dx[at + c] = a[c] * dy[at + c];
      continue;
    }
    for (std::size_t c = 0; c < channels; ++c)
      dx[at + c] = a[c] * (dy[at + c] - mean_dy[c] - xhat[at + c] * mean_dy_xhat[c]);
  }
}

TESSEL_INLINE void launch(const batch_normalization::input_gradient_elements& f, std::size_t n) {
  const std::size_t ch = f.channels, rows = ch == 0 ? 0 : n / ch;
  // The batch's means of dy and dy x-hat per channel, as input_gradient_elements forms them.
  thread_local std::vector<float> means;
  means.resize(2 * ch);
  if (f.sums != nullptr)
    for (std::size_t c = 0; c < 2 * ch; ++c) means[c] = static_cast<float>(f.sums[c] / f.count);
  // (pointers taken here: inside the job, `means` would name each thread's own)
  const float* mean_dy = f.sums != nullptr ? means.data() : nullptr;
  const float* mean_dy_xhat = means.data() + ch;
  blocks(rows, ch, 1, [&](std::size_t i0, std::size_t i1) {
    input_gradient_rows(f.dy, f.xhat, f.maps + 2 * ch, mean_dy, mean_dy_xhat, ch, i0, i1, f.dx);
  });
}

}  // namespace host_detail

TESSEL_INLINE bool host::set_flush_denormal(bool on) {
#if defined(__SSE2__)
  constexpr unsigned ftz = 0x8000u, daz = 0x0040u;
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(on ? (csr | ftz | daz) : (csr & ~(ftz | daz)));
  using shutdown_t = int (*)();
  if (auto shutdown =
          reinterpret_cast<shutdown_t>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_")))
    shutdown();
  return true;
#else
  (void)on;
  return false;
#endif
}

TESSEL_INLINE bool host::is_initialized() { return Kokkos::is_initialized(); }
TESSEL_INLINE void host::initialize(int& argc, char** argv) {
  if (!Kokkos::is_initialized()) Kokkos::initialize(argc, argv);
}
TESSEL_INLINE void host::finalize() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}

TESSEL_INLINE host::matrix host::make_matrix(const std::string& /*label*/, std::size_t rows,
                                             std::size_t cols) {
  return host_detail::allocate<float>(rows, cols);
}
TESSEL_INLINE host::matrix host::make_zeros(const std::string& label, std::size_t rows,
                                            std::size_t cols) {
  matrix m = make_matrix(label, rows, cols);
  if (m.size() > 0) std::memset(m.data(), 0, m.size() * sizeof(float));
  return m;
}
TESSEL_INLINE host::index_vector host::make_indices(const std::string& /*label*/, std::size_t n) {
  return host_detail::allocate<std::int32_t>(n, 1);
}
TESSEL_INLINE host::sums host::make_sums(const std::string& /*label*/, std::size_t n) {
  sums s = host_detail::allocate<double>(n, 1);
  for (std::size_t i = 0; i < n; ++i) s(i) = 0.0;
  return s;
}
TESSEL_INLINE void host::fill(const matrix& m, float v) {
  for (std::size_t i = 0; i < m.extent(0); ++i) std::fill_n(row_of(m, i), m.extent(1), v);
}
TESSEL_INLINE void host::copy(const matrix& src, const matrix& dst) {
  if (src.extent(0) != dst.extent(0) || src.extent(1) != dst.extent(1))
    throw std::invalid_argument("tessel: host::copy of a " + std::to_string(src.extent(0)) + "x" +
                                std::to_string(src.extent(1)) + " matrix into a " +
                                std::to_string(dst.extent(0)) + "x" +
                                std::to_string(dst.extent(1)) + " one: the shapes must match");
  if (src.data() == dst.data()) return;
  for (std::size_t i = 0; i < src.extent(0); ++i)
    std::copy_n(row_of(src, i), src.extent(1), row_of(dst, i));
}

TESSEL_INLINE void host::gemm(bool trans_a, bool trans_b, float alpha, const matrix& a,
                              const matrix& b, float beta, const matrix& c) {
  if ((trans_a ? a.extent(0) : a.extent(1)) == 0) {
    if (beta == 0.0f) {
      fill(c, 0.0f);
    } else {
      const std::size_t n = c.extent(1);
      for_rows("tessel::gemm_scale", c.extent(0), n, [=](std::size_t i) {
        for (std::size_t j = 0; j < n; ++j) c(i, j) *= beta;
      });
    }
    return;
  }
  host_detail::gemm(trans_a, trans_b, alpha, a.data(), a.stride(0), b.data(), b.stride(0),
                    beta, c.data(), c.stride(0), c.extent(0), c.extent(1),
                    trans_a ? a.extent(0) : a.extent(1));
}

TESSEL_INLINE void host::gemm_bias_activation(const matrix& x, const matrix& w, const matrix& bias,
                                              activation_kind a, const matrix& y) {
  const host_detail::epilogue e{bias.extent(0) > 0 ? bias.data() : nullptr, a};
  if (x.extent(1) == 0) {  // an empty contraction: the bias alone
    fill(y, 0.0f);
    host_detail::apply_epilogue(e, y.data(), y.stride(0), y.extent(0), y.extent(1));
    return;
  }
  host_detail::gemm(false, false, 1.0f, x.data(), x.stride(0), w.data(), w.stride(0), 0.0f,
                    y.data(), y.stride(0), y.extent(0), y.extent(1), x.extent(1), &e);
}

TESSEL_INLINE void host::broadcast_rows(const matrix& row, const matrix& out) {
  const std::size_t n = out.extent(1);
  for_rows("tessel::broadcast_rows", out.extent(0), n, [=](std::size_t i) {
    for (std::size_t j = 0; j < n; ++j) out(i, j) = row(0, j);
  });
}

TESSEL_INLINE void host::column_sums(const matrix& in, const matrix& out) {
  const std::size_t m = in.extent(0), n = in.extent(1), ld = in.stride(0);
  const float* pi = in.data();
  float* po = out.data();
  constexpr std::size_t block = 256;
  for_rows("tessel::column_sums", (n + block - 1) / block, m * block, [=](std::size_t b) {
    const std::size_t j0 = b * block;
    kernel_bodies::column_sums(pi + j0, ld, m, std::min(n, j0 + block) - j0, po + j0);
  });
}

TESSEL_INLINE void host::activation_backward_bias(activation_kind a, const matrix& y,
                                                  const matrix& dy, const matrix& dz,
                                                  const matrix& db) {
  const std::size_t m = y.extent(0), n = y.extent(1);
  const bool with_bias = db.extent(0) > 0;
  float* out = with_bias ? db.data() : nullptr;
  auto block = [&](std::size_t i0, std::size_t i1, std::size_t j0, std::size_t j1) {
    host_detail::activation_backward_block(a, y.data(), y.stride(0), dy.data(), dy.stride(0),
                                           dz.data(), dz.stride(0), i0, i1, j0, j1, out);
  };
  thread_pool& p = host_detail::pool();
  if (m * n < elementwise_parallel_min || p.size() == 1) return block(0, m, 0, n);
  if (a == activation_kind::softmax) {
    if (with_bias) return block(0, m, 0, n);
    return p.run([&](std::size_t part, std::size_t parts) {
      const auto [i0, i1] = host_detail::share(m, part, parts);
      block(i0, i1, 0, n);
    });
  }
  p.run([&](std::size_t part, std::size_t parts) {
    const auto [j0, j1] = host_detail::share(n, part, parts, 16);
    if (j1 > j0) block(0, m, j0, j1);
  });
}

TESSEL_INLINE void host::activation_forward(activation_kind a, const matrix& m) {
  const host_detail::epilogue e{nullptr, a};
  const std::size_t n = m.extent(1);
  for_rows("tessel::activation_forward", m.extent(0), n, [&](std::size_t i) {
    host_detail::apply_epilogue(e, &m(i, 0), m.stride(0), 1, n);
  });
}

TESSEL_INLINE void host::scale_shift(const matrix& in, const matrix& out, float scale,
                                     float offset) {
  const float* pi = in.data();
  float* po = out.data();
  const std::size_t n = in.size(), block = 4096;
  for_rows("tessel::scale_shift", (n + block - 1) / block, block, [=](std::size_t b) {
    for (std::size_t k = b * block; k < std::min(n, (b + 1) * block); ++k)
      po[k] = kernel_bodies::scale_shift(pi[k], scale, offset);
  });
}

TESSEL_INLINE void host::add(const matrix& a, const matrix& b, const matrix& out) {
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
  const std::size_t n = out.size(), block = 4096;
  for_rows("tessel::add", (n + block - 1) / block, block, [=](std::size_t k0) {
    for (std::size_t k = k0 * block; k < std::min(n, (k0 + 1) * block); ++k) po[k] = pa[k] + pb[k];
  });
}

TESSEL_INLINE void host::layer_normalization(const matrix& x, std::size_t features,
                                             const matrix& gamma, bool has_gamma,
                                             const matrix& beta, bool has_beta, float epsilon,
                                             const matrix& xhat, const matrix& inv,
                                             const matrix& y) {
  const float* px = x.data();
  const float* pg = gamma.data();
  const float* pb = beta.data();
  float* ph = xhat.data();
  float* pi = inv.data();
  float* py = y.data();
  const std::size_t n = features;
  for_rows("tessel::layer_normalization", x.size() / n, n, [=](std::size_t r) {
    pi[r] = kernel_bodies::layer_normalization_row(px + r * n, n, has_gamma ? pg : nullptr,
                                                   has_beta ? pb : nullptr, epsilon, py + r * n,
                                                   ph + r * n);
  });
}

TESSEL_INLINE void host::layer_normalization_backward(const matrix& dy, const matrix& xhat,
                                                      const matrix& inv, std::size_t features,
                                                      const matrix& gamma, bool has_gamma,
                                                      const matrix& dx, bool want_dx,
                                                      const matrix& dgamma, bool want_dgamma,
                                                      const matrix& dbeta, bool want_dbeta) {
  const float* pd = dy.data();
  const float* ph = xhat.data();
  const float* pi = inv.data();
  const float* pg = gamma.data();
  float* px = dx.data();
  float* pdg = dgamma.data();
  float* pdb = dbeta.data();
  const std::size_t n = features, runs = xhat.size() / features;
  if (want_dgamma || want_dbeta)
    for_rows("tessel::layer_normalization_backward_variables", n, runs, [=](std::size_t j) {
      double sg = 0, sb = 0;
      for (std::size_t r = 0; r < runs; ++r)
        kernel_bodies::layer_normalization_variable_terms(pd[r * n + j], ph[r * n + j], sg, sb);
      if (want_dgamma) pdg[j] = static_cast<float>(sg);
      if (want_dbeta) pdb[j] = static_cast<float>(sb);
    });
  if (!want_dx) return;
  for_rows("tessel::layer_normalization_backward", runs, n, [=](std::size_t r) {
    kernel_bodies::layer_normalization_backward_row(pd + r * n, ph + r * n, pi[r],
                                                    has_gamma ? pg : nullptr, n, px + r * n);
  });
}

TESSEL_INLINE void host::copy_columns(const matrix& src, std::size_t src_first, const matrix& dst,
                                      std::size_t dst_first, std::size_t count) {
  const float* ps = src.data();
  float* pd = dst.data();
  const std::size_t ls = cols(src), ld = cols(dst);
  for_rows("tessel::copy_columns", rows(dst), count, [=](std::size_t i) {
    std::copy_n(ps + i * ls + src_first, count, pd + i * ld + dst_first);
  });
}

TESSEL_INLINE void host::dropout(const matrix& in, const matrix& out, const random::stream& s,
                                 float rate, std::uint64_t first_row, std::uint64_t first_col,
                                 std::uint64_t global_cols) {
  const std::size_t n = in.extent(1);
  const float keep_scale = kernel_bodies::dropout_keep_scale(rate);
  for_rows("tessel::dropout", in.extent(0), n, [=, &s](std::size_t i) {
    const std::uint64_t base = (first_row + i) * global_cols + first_col;
    for (std::size_t j = 0; j < n; ++j)
      out(i, j) = kernel_bodies::dropout(s, base + j, in(i, j), rate, keep_scale);
  });
}

TESSEL_INLINE void host::crossentropy_on_probabilities(const matrix& probs,
                                                       const index_vector& labels,
                                                       const matrix& targets, const matrix& grad,
                                                       float grad_scale, float eps, const sums& out,
                                                       std::size_t slot) {
  const std::size_t n = probs.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets);
  Kokkos::parallel_reduce(
      "tessel::xent_probabilities", host_detail::policy(probs.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(kernel_bodies::crossentropy_row(
            row_of(probs, i), n, t.row(i), eps, grad_scale, row_of(grad, i)));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::softmax_cross_entropy(const matrix& logits, const index_vector& labels,
                                               const matrix& targets, const matrix& grad,
                                               float grad_scale, const sums& out,
                                               std::size_t slot) {
  const std::size_t n = logits.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets);
  Kokkos::parallel_reduce(
      "tessel::softmax_xent", host_detail::policy(logits.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(kernel_bodies::softmax_crossentropy_row(
            row_of(logits, i), n, t.row(i), grad_scale, row_of(grad, i)));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::mean_squared_error(const matrix& pred, const matrix& targets,
                                            const matrix& grad, float grad_scale, const sums& out,
                                            std::size_t slot, std::size_t classes) {
  const std::size_t n = pred.extent(1);
  const float inv_n = 1.0f / static_cast<float>(classes ? classes : n);
  Kokkos::parallel_reduce(
      "tessel::mse", host_detail::policy(pred.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(kernel_bodies::squared_error_row(
            row_of(pred, i), row_of(targets, i), n, grad_scale, inv_n, row_of(grad, i)));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::binary_crossentropy(const matrix& pred, const matrix& targets,
                                             const matrix& grad, float grad_scale, bool from_logits,
                                             float epsilon, const sums& out, std::size_t slot,
                                             std::size_t classes) {
  const std::size_t n = pred.extent(1);
  const float inv_n = 1.0f / static_cast<float>(classes ? classes : n);
  Kokkos::parallel_reduce(
      "tessel::binary_crossentropy", host_detail::policy(pred.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(kernel_bodies::binary_crossentropy_row(
            row_of(pred, i), row_of(targets, i), n, from_logits, epsilon, grad_scale, inv_n,
            row_of(grad, i)));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::mean_absolute_error(const matrix& pred, const matrix& targets,
                                             const sums& out, std::size_t slot) {
  const std::size_t n = pred.extent(1);
  const float inv_n = 1.0f / static_cast<float>(n);
  Kokkos::parallel_reduce(
      "tessel::mean_absolute_error", host_detail::policy(pred.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(
            kernel_bodies::absolute_error_row(row_of(pred, i), row_of(targets, i), n, inv_n));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::count_argmax_equal(const matrix& pred, const index_vector& labels,
                                            const matrix& targets, const sums& out,
                                            std::size_t slot) {
  const std::size_t n = pred.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets);
  Kokkos::parallel_reduce(
      "tessel::argmax_equal", host_detail::policy(pred.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += kernel_bodies::argmax_matches(row_of(pred, i), n, t.row(i)) ? 1.0 : 0.0;
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::row_max(const matrix& m, const matrix& out) {
  const std::size_t n = m.extent(1);
  Kokkos::parallel_for(
      "tessel::row_max", host_detail::policy(m.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { out(i, 0) = kernel_bodies::row_max(row_of(m, i), n); });
}

TESSEL_INLINE void host::row_dot(const matrix& a, const matrix& b, const matrix& out) {
  const std::size_t n = a.extent(1);
  const bool with_b = b.extent(0) > 0;
  Kokkos::parallel_for(
      "tessel::row_dot", host_detail::policy(a.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
        out(i, 0) = with_b ? kernel_bodies::row_dot(row_of(a, i), row_of(b, i), n)
                           : kernel_bodies::row_sum(row_of(a, i), n);
      });
}

TESSEL_INLINE void host::exp_rows(const matrix& src, const matrix& mx, const matrix& dst,
                                  const matrix& sum) {
  const std::size_t n = src.extent(1);
  Kokkos::parallel_for(
      "tessel::exp_rows", host_detail::policy(src.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
        sum(i, 0) = kernel_bodies::exp_row(row_of(src, i), mx(i, 0), row_of(dst, i), n);
      });
}

TESSEL_INLINE void host::divide_rows(const matrix& m, const matrix& s) {
  const std::size_t n = m.extent(1);
  Kokkos::parallel_for(
      "tessel::divide_rows", host_detail::policy(m.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { kernel_bodies::divide_row(row_of(m, i), s(i, 0), n); });
}

TESSEL_INLINE void host::softmax_backward_rows(const matrix& y, const matrix& dy, const matrix& dot,
                                               const matrix& dz) {
  const std::size_t n = y.extent(1);
  Kokkos::parallel_for(
      "tessel::softmax_backward_rows", host_detail::policy(y.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) {
        kernel_bodies::softmax_gradient_given_dot(row_of(y, i), row_of(dy, i), dot(i, 0),
                                                  row_of(dz, i), n);
      });
}

TESSEL_INLINE void host::target_terms(const matrix& z, const index_vector& labels, std::size_t col0,
                                      const matrix& targets, const matrix& mx, const matrix& out) {
  const std::size_t n = z.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets, col0);
  Kokkos::parallel_for(
      "tessel::target_terms", host_detail::policy(z.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
        float tz = 0.0f, ts = 0.0f;
        kernel_bodies::target_terms_row(row_of(z, i), n, t.row(i), mx(i, 0), tz, ts);
        out(i, 0) = tz;
        out(i, 1) = ts;
      });
}

TESSEL_INLINE void host::split_softmax_cross_entropy(const matrix& grad, const index_vector& labels,
                                                     std::size_t col0, const matrix& targets,
                                                     const matrix& s, const matrix& terms,
                                                     float grad_scale, const sums& out,
                                                     std::size_t slot) {
  const std::size_t n = grad.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets, col0);
  Kokkos::parallel_reduce(
      "tessel::split_softmax_xent", host_detail::policy(grad.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        acc += static_cast<double>(kernel_bodies::split_softmax_crossentropy_row(
            row_of(grad, i), n, t.row(i), s(i, 0), terms(i, 0), terms(i, 1), grad_scale));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::crossentropy_terms(const matrix& probs, const index_vector& labels,
                                            std::size_t col0, const matrix& targets,
                                            const matrix& s, float eps, const matrix& grad,
                                            const matrix& out) {
  const std::size_t n = probs.extent(1);
  const kernel_bodies::targets t = targets_of(labels, targets, col0);
  Kokkos::parallel_for(
      "tessel::crossentropy_terms", host_detail::policy(probs.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) {
        float loss = 0.0f, dot = 0.0f;
        kernel_bodies::crossentropy_terms_row(row_of(probs, i), n, t.row(i), s(i, 0), eps,
                                              row_of(grad, i), loss, dot);
        out(i, 0) = loss;
        out(i, 1) = dot;
      });
}

TESSEL_INLINE void host::split_crossentropy(const matrix& grad, const matrix& s,
                                            const matrix& terms, float grad_scale, const sums& out,
                                            std::size_t slot) {
  const std::size_t n = grad.extent(1);
  Kokkos::parallel_reduce(
      "tessel::split_crossentropy", host_detail::policy(grad.extent(0)),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        kernel_bodies::crossentropy_gradient_row(row_of(grad, i), n, terms(i, 1), s(i, 0),
                                                 grad_scale);
        acc += static_cast<double>(terms(i, 0));
      },
      host_detail::sum_at(out, slot));
}

TESSEL_INLINE void host::row_argmax(const matrix& m, std::size_t col0, const matrix& out) {
  const std::size_t n = m.extent(1);
  Kokkos::parallel_for(
      "tessel::row_argmax", host_detail::policy(m.extent(0)), KOKKOS_LAMBDA(std::size_t i) {
        const std::size_t best = kernel_bodies::argmax_row(row_of(m, i), n);
        out(i, 0) = m(i, best);
        out(i, 1) = static_cast<float>(col0 + best);
      });
}

TESSEL_INLINE void host::sgd_update(updates u, float lr, float momentum, bool nesterov) {
  for_shares(u, [=](const update_tensors<matrix>& t, std::size_t b, std::size_t e) {
    host_detail::sgd_chunk(t.value.data() + b, t.gradient.data() + b,
                           momentum != 0.0f ? t.slot_a.data() + b : nullptr, e - b, lr,
                           momentum, nesterov);
  });
}

TESSEL_INLINE void host::adam_update(updates u, float alpha, float beta_1, float beta_2,
                                     float epsilon) {
  for_shares(u, [=](const update_tensors<matrix>& t, std::size_t b, std::size_t e) {
    host_detail::adam_chunk(t.value.data() + b, t.gradient.data() + b, t.slot_a.data() + b,
                            t.slot_b.data() + b, e - b, alpha, beta_1, beta_2, epsilon);
  });
}

TESSEL_INLINE void host::rmsprop_update(updates u, float lr, float rho, float momentum,
                                        float epsilon, bool centered) {
  for_shares(u, [=](const update_tensors<matrix>& t, std::size_t b, std::size_t e) {
    host_detail::rmsprop_chunk(t.value.data() + b, t.gradient.data() + b, t.slot_a.data() + b,
                               centered ? t.slot_c.data() + b : nullptr,
                               momentum > 0.0f ? t.slot_b.data() + b : nullptr, e - b, lr, rho,
                               momentum, epsilon);
  });
}

}  // namespace tessel::backend

namespace tessel {
TESSEL_INLINE memory_info get_memory_info() noexcept {
  return backend::host_detail::counters().info();
}
TESSEL_INLINE void reset_memory_stats() noexcept { backend::host_detail::counters().reset_peak(); }
namespace detail {
// The counters of the device TensorFlow names `device` ("CPU:0", "GPU:0"; "CPU" and "GPU" alone
// are device 0), or a value_error naming the devices this process has.
inline backend::memory_counters& counters_of(std::string_view device, const char* what) {
  const bool gpu = backend::device_memory_counted().load(std::memory_order_relaxed);
  if (device == "CPU" || device == "CPU:0") return backend::host_detail::counters();
  if (gpu && (device == "GPU" || device == "GPU:0")) return backend::device_memory_counters();
  throw value_error(std::string(what) + ": no device '" + std::string(device) +
                    "' in this process, which has " +
                    (gpu ? "'CPU:0' (the host backend's buffers) and 'GPU:0' (its GPU: one "
                           "device per process)"
                         : "'CPU:0' (the host backend's buffers) only: 'GPU:0' needs the CUDA "
                           "backend (link tessel::cuda) and a model or tensor built on it"));
}
}  // namespace detail
TESSEL_INLINE memory_info get_memory_info(std::string_view device) {
  return detail::counters_of(device, "get_memory_info").info();
}
TESSEL_INLINE void reset_memory_stats(std::string_view device) {
  detail::counters_of(device, "reset_memory_stats").reset_peak();
}
}  // namespace tessel
#endif  // TESSEL_DEFINITIONS
