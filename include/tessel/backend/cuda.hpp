// cuda: the GPU backend. Data lives in device memory from CUDA's stream-ordered pool
// (cudaMallocAsync, kept cached as PyTorch's caching allocator keeps it); every operation is
// queued on the process's one stream, so a step runs without waiting on the host until its one
// read-back of the loss and metric sums. GEMMs go through cuBLAS with TF32 off (float32 exactly,
// as Keras computes; set_allow_tf32 turns it on, as torch.backends.cuda.matmul.allow_tf32 does),
// everything else through the kernels of src/cuda/kernels.cu (backend/cuda_kernels.hpp), which
// do what the host backend's functions of the same names do, in the same order where an order
// decides the bits. The process uses GPU local_rank % device_count, local_rank its index among
// the processes on its machine (from MPI, through tessel::initialize).
// Compiled by the host compiler; link `tessel::cuda` (CMake, TESSEL_ENABLE_CUDA) for the kernels.
// Layers never name this type: they are written against backend_interface (interface.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../core/activations.hpp"
#include "../core/errors.hpp"
#include "../random/philox.hpp"
#include "cuda_context.hpp"
#include "cuda_kernels.hpp"
#include "cuda_launch.hpp"
#include "host.hpp"
#include "interface.hpp"
#include "strided_matrix.hpp"

namespace tessel::backend {

namespace cuda_detail {

// A row-major block of device memory that shares the ownership of its allocation (no element
// access from the host).
template <class T>
using device_matrix = strided_matrix<T, false>;

}  // namespace cuda_detail

struct cuda {
  static constexpr std::string_view device_kind = "gpu";
  using matrix = cuda_detail::device_matrix<float>;
  using index_vector = cuda_detail::device_matrix<std::int32_t>;  // one column
  using sums = cuda_detail::device_matrix<double>;                // one column

  // The process-wide setup `tessel::initialize` runs on the default backend, which this is in a
  // program linked with tessel::cuda: the CPU side is the host backend's (Kokkos, the thread pool
  // for host work, denormals flushed); the GPU is set up on first use, and released here.
  static bool is_initialized() { return host::is_initialized(); }
  static void initialize(int& argc, char** argv) { host::initialize(argc, argv); }
  static void finalize() {
    cuda_detail::context_slot().reset();
    host::finalize();
  }
  // The process's GPU is local_rank % device_count; its host threads share the cores as the
  // host backend's do.
  static void place_on_node(int local_rank, int local_size) {
    cuda_detail::node_rank() = local_rank;
    host::place_on_node(local_rank, local_size);
  }
  static std::size_t threads() { return host::threads(); }
  static bool set_flush_denormal(bool on) { return host::set_flush_denormal(on); }
  static bool flushes_denormals() { return host::flushes_denormals(); }

  // The number of GPUs this process sees (0 without a driver or a device; nothing is thrown).
  static int device_count() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }
  // The GPU this process computes on.
  static int device() { return cuda_detail::ctx().device; }
  static cudaStream_t stream() { return cuda_detail::stream(); }
  // Waits for everything queued on the process's stream.
  static void synchronize() {
    cuda_detail::check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }
  // TF32 tensor cores for the float32 GEMMs (torch.backends.cuda.matmul.allow_tf32): about 10
  // bits of mantissa in the products, so results leave Keras's float32 parity. Off by default.
  static void set_allow_tf32(bool on) {
    cuda_detail::context& c = cuda_detail::ctx();
    cuda_detail::check(
        cublasSetMathMode(c.blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
    c.allow_tf32 = on;
  }
  static bool allow_tf32() { return cuda_detail::ctx().allow_tf32; }

  // ---- memory -------------------------------------------------------------------------------
  static matrix make_matrix(const std::string&, std::size_t rows, std::size_t cols) {
    return make<float>(rows, cols, false);
  }
  static matrix make_zeros(const std::string&, std::size_t rows, std::size_t cols) {
    return make<float>(rows, cols, true);
  }
  static index_vector make_indices(const std::string&, std::size_t n) {
    return make<std::int32_t>(n, 1, false);
  }
  static sums make_sums(const std::string&, std::size_t n) { return make<double>(n, 1, true); }
  static std::size_t rows(const matrix& m) { return m.extent(0); }
  static std::size_t cols(const matrix& m) { return m.extent(1); }
  // Rows [begin, end) of m, sharing its memory.
  static matrix row_range(const matrix& m, std::size_t begin, std::size_t end) {
    return matrix(m.owner(), m.data() + begin * m.stride(0), end - begin, m.extent(1),
                  m.stride(0));
  }
  // A rows x cols matrix over the elements of `storage` from `offset` on, sharing its memory.
  static matrix alias(const matrix& storage, std::size_t offset, std::size_t rows,
                      std::size_t cols) {
    return matrix(storage.owner(), storage.data() + offset, rows, cols, cols);
  }
  // The memory the collectives read and write: device memory (NCCL, or MPI through host
  // buffers; a single process runs none).
  static std::span<float> comm_span(const matrix& m) { return {m.data(), m.size()}; }

  // Host to device: the host buffer may be reused as soon as this returns. Up to 8 MB (a batch)
  // is copied into a page-locked buffer of a ring of 4 and crosses while the host queues the
  // step (cuda_detail::upload_ring); more goes from the pageable memory, the driver staging it.
  // As the host backend does, src's elements fill dst's first rows (src may be shorter).
  static void upload(std::span<const float> src, const matrix& dst) {
    const std::size_t cols = dst.extent(1);
    if (src.empty() || cols == 0) return;
    if (src.size() > dst.size())
      throw value_error("upload: " + std::to_string(src.size()) + " values into a " +
                        std::to_string(dst.extent(0)) + " x " + std::to_string(cols) + " matrix");
    from_host(src, [&](const float* from) {
      copy_2d(dst.data(), dst.stride(0), from, cols, cols, src.size() / cols,
              cudaMemcpyHostToDevice);
      if (const std::size_t rest = src.size() % cols; rest != 0)
        copy_2d(dst.data() + src.size() / cols * dst.stride(0), dst.stride(0),
                from + src.size() / cols * cols, cols, rest, 1, cudaMemcpyHostToDevice);
    });
  }
  static void upload(std::span<const std::int32_t> src, const index_vector& dst) {
    if (src.empty()) return;
    if (src.size() > dst.size())
      throw value_error("upload: " + std::to_string(src.size()) + " labels into " +
                        std::to_string(dst.size()));
    from_host(src, [&](const std::int32_t* from) {
      cuda_detail::check(
          cudaMemcpyAsync(dst.data(), from, src.size_bytes(), cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync (upload)");
    });
  }
  // Device to host, waiting for the queued work first.
  static void download(const matrix& src, std::span<float> dst) {
    copy_2d(dst.data(), src.extent(1), src.data(), src.stride(0), src.extent(1), src.extent(0),
            cudaMemcpyDeviceToHost);
    synchronize();
  }
  // The one read-back of a step: every sum at once.
  static void download(const sums& src, std::span<double> dst) {
    if (src.size() > 0)
      cuda_detail::check(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(double),
                                         cudaMemcpyDeviceToHost, stream()),
                         "cudaMemcpyAsync (download)");
    synchronize();
  }
  static void fill(const matrix& m, float v) {
    if (v == 0.0f && m.contiguous()) {
      if (m.size() > 0)
        cuda_detail::check(cudaMemsetAsync(m.data(), 0, m.size() * sizeof(float), stream()),
                           "cudaMemsetAsync");
      return;
    }
    cuda_kernels::fill(mut(m), v, stream());
    launched();
  }
  static void copy(const matrix& src, const matrix& dst) {
    if (src.data() == dst.data()) return;  // onto itself: set_state_tree of the model's own state
    copy_2d(dst.data(), dst.stride(0), src.data(), src.stride(0), src.extent(1), src.extent(0),
            cudaMemcpyDeviceToDevice);
  }

  // f(i) for every i in [0, n), one GPU thread each: a layer's functor over its kernel bodies,
  // instantiated for the GPU in the layer family's .cu file (cuda_launch.hpp). The label and
  // the cost per i (which the host backend uses to split the work) are not needed here.
  template <class F>
  static void for_each(const char*, std::size_t n, std::size_t, const F& f) {
    cuda_launch::for_each(n, f, stream());
    launched();
  }

  // ---- dense algebra ------------------------------------------------------------------------
  // c = alpha * op(a) * op(b) + beta * c, row-major: cuBLAS (column-major) computes
  // c^T = op(b)^T op(a)^T on the same memory.
  static void gemm(bool trans_a, bool trans_b, float alpha, const matrix& a, const matrix& b,
                   float beta, const matrix& c) {
    const std::size_t m = c.extent(0), n = c.extent(1),
                      k = trans_a ? a.extent(0) : a.extent(1);
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty contraction still gives beta * c
      if (beta == 0.0f) fill(c, 0.0f);
      else cuda_kernels::scale(mut(c), beta, stream());
      launched();
      return;
    }
    cuda_detail::check(
        cublasSgemm(cuda_detail::ctx().blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, gemm_plans::blas_int(n, "n"),
                    gemm_plans::blas_int(m, "m"), gemm_plans::blas_int(k, "k"), &alpha,
                    b.data(), ld(b), a.data(), ld(a), &beta, c.data(), ld(c)),
        "cublasSgemm");
  }
  // Dense's forward: y = activation(x w + bias) (bias: one row, or empty). Linear and ReLU
  // layers take one cuBLASLt call with the bias in its epilogue (cuda_detail::lt_dense), then
  // ReLU's body (backend/gemm_plans.hpp); the others, or a shape cuBLASLt refuses, a GEMM then
  // one kernel.
  static void gemm_bias_activation(const matrix& x, const matrix& w, const matrix& bias,
                                   activation_kind a, const matrix& y) {
    const std::size_t m = y.extent(0), n = y.extent(1), k = x.extent(1);
    const bool has_bias = bias.extent(0) > 0;
    const gemm_plans::dense_choice choice = gemm_plans::choose_dense(has_bias, a);
    cuda_detail::context& c = cuda_detail::ctx();
    if (choice.fused && m > 0 && n > 0 && k > 0 &&
        c.dense.run(x.data(), x.stride(0), w.data(), w.stride(0), has_bias ? bias.data() : nullptr,
                    choice.gemm_epilogue, y.data(), y.stride(0), m, n, k, c.allow_tf32,
                    c.stream)) {
      ++c.fused_dense;
      if (choice.activation_after) {
        cuda_kernels::bias_activation(nullptr, a, mut(y), stream());
        launched();
      }
      return;
    }
    ++c.unfused_dense;
    gemm(false, false, 1.0f, x, w, 0.0f, y);
    cuda_kernels::bias_activation(has_bias ? bias.data() : nullptr, a, mut(y), stream());
    launched();
  }

  // ---- element-wise -------------------------------------------------------------------------
  static void broadcast_rows(const matrix& row, const matrix& out) {
    cuda_kernels::broadcast_rows(in(row), mut(out), stream());
    launched();
  }
  static void activation_forward(activation_kind a, const matrix& m) {
    cuda_kernels::bias_activation(nullptr, a, mut(m), stream());
    launched();
  }
  static void activation_backward(activation_kind a, const matrix& y, const matrix& dy,
                                  const matrix& dz) {
    cuda_kernels::activation_backward_bias(a, in(y), in(dy), mut(dz), nullptr, stream());
    launched();
  }
  static void scale_shift(const matrix& src, const matrix& out, float scale, float offset) {
    cuda_kernels::scale_shift(in(src), mut(out), scale, offset, stream());
    launched();
  }
  static void add(const matrix& a, const matrix& b, const matrix& out) {
    cuda_kernels::add(in(a), in(b), mut(out), stream());
    launched();
  }
  static void layer_normalization(const matrix& x, std::size_t features, const matrix& gamma,
                                  bool has_gamma, const matrix& beta, bool has_beta,
                                  float epsilon, const matrix& xhat, const matrix& inv,
                                  const matrix& y) {
    cuda_kernels::layer_normalization(in(x), features, gamma.data(), has_gamma, beta.data(),
                                      has_beta, epsilon, mut(xhat), inv.data(), mut(y), stream());
    launched();
  }
  static void layer_normalization_backward(const matrix& dy, const matrix& xhat,
                                           const matrix& inv, std::size_t features,
                                           const matrix& gamma, bool has_gamma, const matrix& dx,
                                           bool want_dx, const matrix& dgamma, bool want_dgamma,
                                           const matrix& dbeta, bool want_dbeta) {
    cuda_kernels::layer_normalization_backward(in(dy), in(xhat), inv.data(), features,
                                               gamma.data(), has_gamma, mut(dx), want_dx,
                                               dgamma.data(), want_dgamma, dbeta.data(),
                                               want_dbeta, stream());
    launched();
  }
  static void copy_columns(const matrix& src, std::size_t src_first, const matrix& dst,
                           std::size_t dst_first, std::size_t count) {
    cuda_kernels::copy_columns(in(src), src_first, mut(dst), dst_first, count, stream());
    launched();
  }
  // Inverted dropout with the host backend's masks (the same Philox stream, drawn at each
  // element's global index).
  static void dropout(const matrix& src, const matrix& out, const random::stream& s, float rate,
                      std::uint64_t first_row, std::uint64_t first_col,
                      std::uint64_t global_cols) {
    cuda_kernels::dropout(in(src), mut(out), s, rate, first_row, first_col, global_cols,
                          stream());
    launched();
  }

  // ---- reductions ---------------------------------------------------------------------------
  static void column_sums(const matrix& src, const matrix& out) {
    cuda_kernels::column_sums(in(src), out.data(), stream());
    launched();
  }
  static void activation_backward_bias(activation_kind a, const matrix& y, const matrix& dy,
                                       const matrix& dz, const matrix& db) {
    cuda_kernels::activation_backward_bias(a, in(y), in(dy), mut(dz),
                                           db.extent(0) > 0 ? db.data() : nullptr, stream());
    launched();
  }
  static void crossentropy_on_probabilities(const matrix& probs, const index_vector& labels,
                                              const matrix& targets, const matrix& grad,
                                              float grad_scale, float eps, const sums& out,
                                              std::size_t slot) {
    cuda_kernels::crossentropy_on_probabilities(in(probs), labels_of(labels), in(targets),
                                                mut(grad), grad_scale, eps, out.data() + slot,
                                                stream());
    launched();
  }
  static void softmax_cross_entropy(const matrix& logits, const index_vector& labels,
                                      const matrix& targets, const matrix& grad,
                                      float grad_scale, const sums& out, std::size_t slot) {
    cuda_kernels::softmax_cross_entropy(in(logits), labels_of(labels), in(targets), mut(grad),
                                        grad_scale, out.data() + slot, stream());
    launched();
  }
  static void mean_squared_error(const matrix& pred, const matrix& targets, const matrix& grad,
                                 float grad_scale, const sums& out, std::size_t slot,
                                 std::size_t classes = 0) {
    cuda_kernels::mean_squared_error(in(pred), in(targets), mut(grad), grad_scale, classes,
                                     out.data() + slot, stream());
    launched();
  }
  static void binary_crossentropy(const matrix& pred, const matrix& targets, const matrix& grad,
                                  float grad_scale, bool from_logits, float epsilon,
                                  const sums& out, std::size_t slot, std::size_t classes = 0) {
    cuda_kernels::binary_crossentropy(in(pred), in(targets), mut(grad), grad_scale, from_logits,
                                      epsilon, classes, out.data() + slot, stream());
    launched();
  }
  static void mean_absolute_error(const matrix& pred, const matrix& targets, const sums& out,
                                  std::size_t slot) {
    cuda_kernels::mean_absolute_error(in(pred), in(targets), out.data() + slot, stream());
    launched();
  }
  static void count_argmax_equal(const matrix& pred, const index_vector& labels,
                                 const matrix& targets, const sums& out, std::size_t slot) {
    cuda_kernels::count_argmax_equal(in(pred), labels_of(labels), in(targets), out.data() + slot,
                                     stream());
    launched();
  }

  // ---- a class dimension split across devices -----------------------------------------------
  static void row_max(const matrix& m, const matrix& out) {
    cuda_kernels::row_max(in(m), mut(out), stream());
    launched();
  }
  static void row_dot(const matrix& a, const matrix& b, const matrix& out) {
    cuda_kernels::row_dot(in(a), in(b), mut(out), stream());
    launched();
  }
  static void exp_rows(const matrix& src, const matrix& mx, const matrix& dst, const matrix& sum) {
    cuda_kernels::exp_rows(in(src), in(mx), mut(dst), mut(sum), stream());
    launched();
  }
  static void divide_rows(const matrix& m, const matrix& s) {
    cuda_kernels::divide_rows(mut(m), in(s), stream());
    launched();
  }
  static void softmax_backward_rows(const matrix& y, const matrix& dy, const matrix& dot,
                                    const matrix& dz) {
    cuda_kernels::softmax_backward_rows(in(y), in(dy), in(dot), mut(dz), stream());
    launched();
  }
  static void target_terms(const matrix& z, const index_vector& labels, std::size_t col0,
                           const matrix& targets, const matrix& mx, const matrix& out) {
    cuda_kernels::target_terms(in(z), labels_of(labels), col0, in(targets), in(mx), mut(out),
                               stream());
    launched();
  }
  static void split_softmax_cross_entropy(const matrix& grad, const index_vector& labels,
                                          std::size_t col0, const matrix& targets,
                                          const matrix& s, const matrix& terms, float grad_scale,
                                          const sums& out, std::size_t slot) {
    cuda_kernels::split_softmax_cross_entropy(mut(grad), labels_of(labels), col0, in(targets),
                                              in(s), in(terms), grad_scale, out.data() + slot,
                                              stream());
    launched();
  }
  static void crossentropy_terms(const matrix& probs, const index_vector& labels,
                                 std::size_t col0, const matrix& targets, const matrix& s,
                                 float eps, const matrix& grad, const matrix& out) {
    cuda_kernels::crossentropy_terms(in(probs), labels_of(labels), col0, in(targets), in(s), eps,
                                     mut(grad), mut(out), stream());
    launched();
  }
  static void split_crossentropy(const matrix& grad, const matrix& s, const matrix& terms,
                                 float grad_scale, const sums& out, std::size_t slot) {
    cuda_kernels::split_crossentropy(mut(grad), in(s), in(terms), grad_scale, out.data() + slot,
                                     stream());
    launched();
  }
  static void row_argmax(const matrix& m, std::size_t col0, const matrix& out) {
    cuda_kernels::row_argmax(in(m), col0, mut(out), stream());
    launched();
  }

  // ---- optimizer updates, all the variables of a call in one launch per 32 -------------------
  using updates = std::span<const update_tensors<matrix>>;
  static void sgd_update(updates u, float lr, float momentum, bool nesterov) {
    const auto p = pointers(u, momentum != 0.0f, false, false);
    cuda_kernels::sgd_update(p.data(), p.size(), lr, momentum, nesterov, stream());
    launched();
  }
  // alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), computed by the caller.
  static void adam_update(updates u, float alpha, float beta_1, float beta_2, float epsilon) {
    const auto p = pointers(u, true, true, false);
    cuda_kernels::adam_update(p.data(), p.size(), alpha, beta_1, beta_2, epsilon, stream());
    launched();
  }
  static void rmsprop_update(updates u, float lr, float rho, float momentum, float epsilon,
                             bool centered) {
    const auto p = pointers(u, true, momentum > 0.0f, centered);
    cuda_kernels::rmsprop_update(p.data(), p.size(), lr, rho, momentum, epsilon, centered,
                                 stream());
    launched();
  }

 private:
  // A kernel that could not start (a bad launch configuration, no kernel image for this GPU) is
  // reported here, where it is queued, rather than at a later synchronisation.
  static void launched() { cuda_detail::check(cudaGetLastError(), "a kernel launch"); }
  static int ld(const matrix& m) {
    return gemm_plans::blas_int(m.stride(0) > 0 ? m.stride(0) : 1, "leading dimension");
  }
  static cuda_kernels::cmat in(const matrix& m) {
    return {m.data(), m.extent(0), m.extent(1), m.stride(0)};
  }
  static cuda_kernels::mat mut(const matrix& m) {
    return {m.data(), m.extent(0), m.extent(1), m.stride(0)};
  }
  static const std::int32_t* labels_of(const index_vector& l) {
    return l.extent(0) > 0 ? l.data() : nullptr;
  }
  // rows x cols elements, rows `dpitch` / `spitch` elements apart on each side.
  static void copy_2d(float* dst, std::size_t dpitch, const float* src, std::size_t spitch,
                      std::size_t cols, std::size_t rows, cudaMemcpyKind kind) {
    if (rows == 0 || cols == 0) return;
    cuda_detail::check(cudaMemcpy2DAsync(dst, dpitch * sizeof(float), src, spitch * sizeof(float),
                                         cols * sizeof(float), rows, kind, stream()),
                       "cudaMemcpy2DAsync");
  }
  // A rows x cols matrix of new device memory, zeroed or not.
  template <class T>
  static cuda_detail::device_matrix<T> make(std::size_t rows, std::size_t cols, bool zeros) {
    auto owner = cuda_detail::allocate<T>(rows * cols);
    T* p = owner.get();
    if (zeros && p != nullptr)
      cuda_detail::check(cudaMemsetAsync(p, 0, rows * cols * sizeof(T), stream()),
                         "cudaMemsetAsync");
    return {std::move(owner), p, rows, cols, cols};
  }
  // Queues copy(from) with `from` the host values of src: up to upload_ring::max_bytes, a
  // page-locked copy from the upload ring, marked done after the copy is queued; beyond, src.
  template <class T, class Copy>
  static void from_host(std::span<const T> src, Copy&& copy) {
    if (src.size_bytes() > cuda_detail::upload_ring::max_bytes) return copy(src.data());
    cuda_detail::upload_ring& ring = cuda_detail::ctx().uploads;
    copy(static_cast<const T*>(ring.stage(src.data(), src.size_bytes())));
    ring.done(stream());
  }
  static std::vector<cuda_kernels::update_ptrs> pointers(updates u, bool a, bool b, bool c) {
    std::vector<cuda_kernels::update_ptrs> p;
    p.reserve(u.size());
    for (const auto& t : u)
      p.push_back({t.value.data(), t.gradient.data(), a ? t.slot_a.data() : nullptr,
                   b ? t.slot_b.data() : nullptr, c ? t.slot_c.data() : nullptr,
                   t.value.size()});
    return p;
  }
};

static_assert(backend_interface<cuda>);

}  // namespace tessel::backend
