// The CUDA backend's kernels (declared in include/tessel/backend/cuda_kernels.hpp). Each one
// does what the host backend's function of the same name does (backend/host.hpp). Every sum is
// added in an order fixed by the shape alone, so that a step gives the same bits every time it
// runs: a row's softmax goes along the row; a column sum (a bias gradient) splits the rows over
// the GPU and adds the parts in a fixed tree (cuda_launch::reduce_columns); an element-wise
// loss spreads each row over a block (row_terms_kernel); and a sum over rows is reduced by one
// block in a fixed order. These are not the host's orders (it adds in row order): the sums
// agree to rounding, in double where the host's are.
//
// This file keeps only the launching: the CUDA target's grid-stride launcher
// (cuda_launch::for_each, backend/cuda_launch.cuh: f(k) for every k in [0, n), an element, a
// row or a column per call), block_sum_kernel (one block's fixed-order sum of f(row) over the
// rows, for the losses and metrics), row_terms_kernel and the optimizers' multi-tensor kernel. Each operation is a
// small functor whose __device__ operator() calls the arithmetic written once, for the host
// backend too, in backend/kernel_bodies.hpp.
#include <array>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <tessel/backend/cuda_kernels.hpp>
#include <tessel/backend/cuda_launch.cuh>
#include <tessel/backend/kernel_bodies.hpp>
#include <tessel/backend/tensor_batches.hpp>

namespace tessel::backend::cuda_kernels {
namespace {

namespace kb = kernel_bodies;

constexpr int threads = 256;

// Blocks for n independent items, `threads` per block, at most 65535 x 8 (the loops stride).
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535u * 8 ? b : 65535u * 8));
}

#define TESSEL_GRID_STRIDE(k, n)                                                               \
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < (n); \
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)

// ---- the launchers -----------------------------------------------------------------------------

// f(k) for every k in [0, n), grid-stride: an element, a row or a column per call.
using cuda_launch::for_each;

// f(i, j) for every element of a rows x cols matrix, one thread per element.
template <class F>
struct elements {
  std::size_t cols;
  F f;
  __device__ void operator()(std::size_t k) const { f(k / cols, k % cols); }
};
template <class F>
void for_each_element(std::size_t rows, std::size_t cols, const F& f, cudaStream_t s) {
  for_each(rows * cols, elements<F>{cols, f}, s);
}

// The block's sum of every thread's `v`, in a fixed tree (the same bits each run): the launcher's
// (cuda_launch.cuh), for blocks of `threads` threads.
using cuda_launch::detail::block_total;
static_assert(threads == cuda_launch::detail::threads);
// *out = the sum of f(i) (a double) over the rows i in [0, n), by one block: thread t adds rows
// t, t + threads, ... in turn, then block_total adds the threads' sums. The losses and metrics.
template <class F>
__global__ void block_sum_kernel(std::size_t n, F f, double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) acc += f(i);
  const double total = block_total(acc);
  if (threadIdx.x == 0) *out = total;
}
template <class F>
void block_sum(std::size_t n, const F& f, double* out, cudaStream_t s) {
  block_sum_kernel<<<1, threads, 0, s>>>(n, f, out);
}

// A loss whose row value is inv_n times the sum of element terms (squared error, binary
// cross-entropy, absolute error), for rows of any width: one block per row (grid-stride), its
// threads over the row's elements (coalesced), each term added in double and the threads' sums
// in block_total's fixed tree; row i's value, rounded to float and times inv_n as the row's loop
// gives it, goes to `values`, and block_sum adds the rows in order. On one thread a row of 4,096
// elements took milliseconds.
template <class Term>
__global__ void row_terms_kernel(std::size_t rows, std::size_t cols, Term term, float inv_n,
                                 float* values) {
  for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
    double acc = 0.0;
    for (std::size_t j = threadIdx.x; j < cols; j += blockDim.x) acc += term(i, j);
    const double total = block_total(acc);
    if (threadIdx.x == 0) values[i] = static_cast<float>(total) * inv_n;
    __syncthreads();  // every thread has read block_total's result before the next row's
  }
}
struct row_value_op {
  const float* values;
  __device__ double operator()(std::size_t i) const { return static_cast<double>(values[i]); }
};
// False (nothing launched) where the pool cannot hold the rows' values.
template <class Term>
bool row_terms_sum(std::size_t rows, std::size_t cols, const Term& term, float inv_n, double* out,
                   cudaStream_t s) {
  if (rows == 0) return false;
  float* values = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&values), rows * sizeof(float), s) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const unsigned grid = static_cast<unsigned>(rows < 65535u * 8 ? rows : 65535u * 8);
  row_terms_kernel<<<grid, threads, 0, s>>>(rows, cols, term, inv_n, values);
  block_sum(rows, row_value_op{values}, out, s);
  cudaFreeAsync(values, s);
  return true;
}

// Row i of a matrix, and element (i, j).
__device__ float* row(const mat& m, std::size_t i) { return m.p + i * m.ld; }
__device__ const float* row(const cmat& m, std::size_t i) { return m.p + i * m.ld; }
__device__ float& at(const mat& m, std::size_t i, std::size_t j) { return m.p[i * m.ld + j]; }
__device__ float at(const cmat& m, std::size_t i, std::size_t j) { return m.p[i * m.ld + j]; }

// A loss's targets for the kernel bodies: `labels` (null: none) or `t`.
kb::targets targets_of(const std::int32_t* labels, cmat t, std::size_t col0 = 0) {
  return {labels, t.p, t.ld, col0};
}

// ---- memory and element-wise: f(i, j) ----------------------------------------------------------

struct fill_op {
  mat m;
  float v;
  __device__ void operator()(std::size_t i, std::size_t j) const { at(m, i, j) = v; }
};
struct scale_op {
  mat m;
  float beta;
  __device__ void operator()(std::size_t i, std::size_t j) const { at(m, i, j) *= beta; }
};
struct broadcast_rows_op {
  cmat in;
  mat out;
  __device__ void operator()(std::size_t i, std::size_t j) const { at(out, i, j) = in.p[j]; }
};
struct bias_activation_op {
  const float* bias;
  activation_kind a;
  mat y;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    float& v = at(y, i, j);
    v = kb::activate(a, bias != nullptr ? v + bias[j] : v);
  }
};
struct activation_backward_op {
  activation_kind a;
  cmat y, dy;
  mat dz;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    at(dz, i, j) = kb::activation_gradient(a, at(y, i, j), at(dy, i, j));
  }
};
struct scale_shift_op {
  cmat in;
  mat out;
  float scale, offset;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    at(out, i, j) = kb::scale_shift(at(in, i, j), scale, offset);
  }
};
struct add_op {
  cmat a, b;
  mat out;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    at(out, i, j) = at(a, i, j) + at(b, i, j);
  }
};
struct copy_columns_op {
  cmat src;
  std::size_t src_first;
  mat dst;
  std::size_t dst_first;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    at(dst, i, dst_first + j) = at(src, i, src_first + j);
  }
};
struct dropout_op {
  cmat in;
  mat out;
  random::stream st;
  float rate, keep_scale;
  std::uint64_t first_row, first_col, global_cols;
  __device__ void operator()(std::size_t i, std::size_t j) const {
    const std::uint64_t index = (first_row + i) * global_cols + first_col + j;
    at(out, i, j) = kb::dropout(st, index, at(in, i, j), rate, keep_scale);
  }
};

// ---- rows, runs and columns: f(i) --------------------------------------------------------------

// The bias, then softmax along row i (host_detail::apply_epilogue's order).
struct bias_softmax_op {
  const float* bias;
  mat y;
  __device__ void operator()(std::size_t i) const {
    float* r = row(y, i);
    if (bias != nullptr)
      for (std::size_t j = 0; j < y.cols; ++j) r[j] += bias[j];
    kb::softmax_row(r, y.cols);
  }
};
struct softmax_backward_op {
  cmat y, dy;
  mat dz;
  __device__ void operator()(std::size_t i) const {
    kb::softmax_gradient_row(row(y, i), row(dy, i), row(dz, i), dz.cols);
  }
};
// out[j] = sum over rows of in[i, j], in row order; one thread per column.
struct column_sums_op {
  cmat in;
  float* out;
  __device__ void operator()(std::size_t j) const {
    float s;
    kb::column_sums(in.p + j, in.ld, in.rows, 1, &s);
    out[j] = s;
  }
};
// Layer normalization: one thread per run r of `n` values (a sample's last axis), `per_row` runs
// to a row.
struct layer_normalization_op {
  cmat x;
  std::size_t n, per_row;
  const float* gamma;
  const float* beta;
  float epsilon;
  mat xhat;
  float* inv;
  mat y;
  __device__ void operator()(std::size_t r) const {
    const std::size_t i = r / per_row, c0 = (r % per_row) * n;
    inv[r] = kb::layer_normalization_row(row(x, i) + c0, n, gamma, beta, epsilon, row(y, i) + c0,
                                         row(xhat, i) + c0);
  }
};
// Its variables' gradients: one thread per feature j, over the runs in order.
struct layer_normalization_variables_op {
  cmat dy, xhat;
  std::size_t n, per_row, runs;
  float* dgamma;
  float* dbeta;
  __device__ void operator()(std::size_t j) const {
    double sg = 0, sb = 0;
    for (std::size_t r = 0; r < runs; ++r) {
      const std::size_t i = r / per_row, c = (r % per_row) * n + j;
      kb::layer_normalization_variable_terms(at(dy, i, c), at(xhat, i, c), sg, sb);
    }
    if (dgamma != nullptr) dgamma[j] = static_cast<float>(sg);
    if (dbeta != nullptr) dbeta[j] = static_cast<float>(sb);
  }
};
struct layer_normalization_backward_op {
  cmat dy, xhat;
  const float* inv;
  std::size_t n, per_row;
  const float* gamma;
  mat dx;
  __device__ void operator()(std::size_t r) const {
    const std::size_t i = r / per_row, c0 = (r % per_row) * n;
    kb::layer_normalization_backward_row(row(dy, i) + c0, row(xhat, i) + c0, inv[r], gamma, n,
                                         row(dx, i) + c0);
  }
};

// ---- losses and metrics: each row's term, summed by block_sum ----------------------------------

struct xent_probabilities_op {
  cmat probs;
  kb::targets t;
  mat grad;
  float grad_scale, eps;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(
        kb::crossentropy_row(row(probs, i), probs.cols, t.row(i), eps, grad_scale, row(grad, i)));
  }
};
struct softmax_xent_op {
  cmat logits;
  kb::targets t;
  mat grad;
  float grad_scale;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(kb::softmax_crossentropy_row(row(logits, i), logits.cols, t.row(i),
                                                            grad_scale, row(grad, i)));
  }
};
struct mse_op {
  cmat pred, targets;
  mat grad;
  float grad_scale, inv_n;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(kb::squared_error_row(row(pred, i), row(targets, i), pred.cols,
                                                     grad_scale, inv_n, row(grad, i)));
  }
};
struct binary_crossentropy_op {
  cmat pred, targets;
  mat grad;
  float grad_scale;
  bool from_logits;
  float epsilon, inv_n;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(kb::binary_crossentropy_row(row(pred, i), row(targets, i),
                                                           pred.cols, from_logits, epsilon,
                                                           grad_scale, inv_n, row(grad, i)));
  }
};
struct mean_absolute_error_op {
  cmat pred, targets;
  float inv_n;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(
        kb::absolute_error_row(row(pred, i), row(targets, i), pred.cols, inv_n));
  }
};
// The same losses with the row's elements spread over a block (row_terms_sum): each element's
// term (and its gradient) by the body the row's loop calls.
struct squared_error_term {
  cmat pred, targets;
  mat grad;
  float grad_scale, inv_n;
  __device__ float operator()(std::size_t i, std::size_t j) const {
    return kb::squared_error(at(pred, i, j), at(targets, i, j), grad_scale, inv_n, at(grad, i, j));
  }
};
struct binary_crossentropy_term {
  cmat pred, targets;
  mat grad;
  float grad_scale;
  bool from_logits;
  float epsilon, inv_n;
  __device__ float operator()(std::size_t i, std::size_t j) const {
    return kb::binary_crossentropy(at(targets, i, j), at(pred, i, j), from_logits, epsilon,
                                   grad_scale, inv_n, at(grad, i, j));
  }
};
struct absolute_error_term {
  cmat pred, targets;
  __device__ float operator()(std::size_t i, std::size_t j) const {
    return kb::absolute_error(at(pred, i, j), at(targets, i, j));
  }
};
struct argmax_equal_op {
  cmat pred;
  kb::targets t;
  __device__ double operator()(std::size_t i) const {
    return kb::argmax_matches(row(pred, i), pred.cols, t.row(i)) ? 1.0 : 0.0;
  }
};

// ---- a class dimension split across devices: one thread per row -------------------------------

struct row_max_op {
  cmat m;
  mat out;
  __device__ void operator()(std::size_t i) const {
    at(out, i, 0) = kb::row_max(row(m, i), m.cols);
  }
};
struct row_dot_op {
  cmat a, b;
  mat out;
  __device__ void operator()(std::size_t i) const {
    at(out, i, 0) = b.p != nullptr ? kb::row_dot(row(a, i), row(b, i), a.cols)
                                   : kb::row_sum(row(a, i), a.cols);
  }
};
struct exp_rows_op {
  cmat src, mx;
  mat dst, sum;
  __device__ void operator()(std::size_t i) const {
    at(sum, i, 0) = kb::exp_row(row(src, i), at(mx, i, 0), row(dst, i), src.cols);
  }
};
struct divide_rows_op {
  mat m;
  cmat sum;
  __device__ void operator()(std::size_t i) const {
    kb::divide_row(row(m, i), at(sum, i, 0), m.cols);
  }
};
struct softmax_backward_rows_op {
  cmat y, dy, dot;
  mat dz;
  __device__ void operator()(std::size_t i) const {
    kb::softmax_gradient_given_dot(row(y, i), row(dy, i), at(dot, i, 0), row(dz, i), y.cols);
  }
};
struct target_terms_op {
  cmat z;
  kb::targets t;
  cmat mx;
  mat out;
  __device__ void operator()(std::size_t i) const {
    float tz = 0.0f, ts = 0.0f;
    kb::target_terms_row(row(z, i), z.cols, t.row(i), at(mx, i, 0), tz, ts);
    at(out, i, 0) = tz;
    at(out, i, 1) = ts;
  }
};
struct split_softmax_xent_op {
  mat grad;
  kb::targets t;
  cmat sum, terms;
  float grad_scale;
  __device__ double operator()(std::size_t i) const {
    return static_cast<double>(kb::split_softmax_crossentropy_row(
        row(grad, i), grad.cols, t.row(i), at(sum, i, 0), at(terms, i, 0), at(terms, i, 1),
        grad_scale));
  }
};
struct crossentropy_terms_op {
  cmat probs;
  kb::targets t;
  cmat sum;
  float eps;
  mat grad, out;
  __device__ void operator()(std::size_t i) const {
    float loss = 0.0f, dot = 0.0f;
    kb::crossentropy_terms_row(row(probs, i), probs.cols, t.row(i), at(sum, i, 0), eps,
                               row(grad, i), loss, dot);
    at(out, i, 0) = loss;
    at(out, i, 1) = dot;
  }
};
struct split_crossentropy_op {
  mat grad;
  cmat sum, terms;
  float grad_scale;
  __device__ double operator()(std::size_t i) const {
    kb::crossentropy_gradient_row(row(grad, i), grad.cols, at(terms, i, 1), at(sum, i, 0),
                                  grad_scale);
    return static_cast<double>(at(terms, i, 0));
  }
};
struct row_argmax_op {
  cmat m;
  std::size_t col0;
  mat out;
  __device__ void operator()(std::size_t i) const {
    const std::size_t best = kb::argmax_row(row(m, i), m.cols);
    at(out, i, 0) = at(m, i, best);
    at(out, i, 1) = static_cast<float>(col0 + best);
  }
};

// ---- optimizer updates: blockIdx.y picks the tensor, the x blocks stride over its elements ----

constexpr std::size_t tensors_per_launch = 32;
struct update_batch {
  update_ptrs t[tensors_per_launch];
};

template <class Update>
__global__ void multi_tensor_kernel(update_batch b, Update f) {
  const update_ptrs& t = b.t[blockIdx.y];
  TESSEL_GRID_STRIDE(k, t.n) f(t, k);
}

struct sgd_op {
  float lr, momentum;
  bool nesterov;
  __device__ void operator()(const update_ptrs& t, std::size_t k) const {
    kernel_bodies::sgd(t.value[k], t.gradient[k], t.slot_a == nullptr ? nullptr : &t.slot_a[k], lr,
                       momentum, nesterov);
  }
};
struct adam_op {
  float alpha, beta_1, beta_2, epsilon;
  __device__ void operator()(const update_ptrs& t, std::size_t k) const {
    float m = t.slot_a[k], v = t.slot_b[k];
    kernel_bodies::adam_moments(t.gradient[k], m, v, 1.0f - beta_1, 1.0f - beta_2);
    t.slot_a[k] = m;
    t.slot_b[k] = v;
    t.value[k] -= kernel_bodies::adam_step(m, v, alpha, epsilon);
  }
};
// slot_a the velocity, slot_b the momentum (or null), slot_c the average gradient (or null).
struct rmsprop_op {
  float lr, rho, momentum, epsilon;
  __device__ void operator()(const update_ptrs& t, std::size_t k) const {
    const float g = t.gradient[k];
    float* average = t.slot_c == nullptr ? nullptr : &t.slot_c[k];
    kernel_bodies::rmsprop_averages(g, t.slot_a[k], average, rho);
    const float increment = kernel_bodies::rmsprop_increment(g, t.slot_a[k], average, lr, epsilon);
    kernel_bodies::rmsprop_step(t.value[k], increment, t.slot_b == nullptr ? nullptr : &t.slot_b[k],
                                momentum);
  }
};

template <class Update>
void launch_updates(const update_ptrs* u, std::size_t count, Update f, cudaStream_t s) {
  tessel::backend::for_each_tensor_batch<tensors_per_launch>(
      count, [u](std::size_t i) { return u[i].n; },
      [&](const std::array<std::size_t, tensors_per_launch>& indices, std::size_t n) {
        update_batch b{};
        std::size_t longest = 0;
        for (std::size_t k = 0; k < n; ++k) {
          b.t[k] = u[indices[k]];
          longest = b.t[k].n > longest ? b.t[k].n : longest;
        }
        const unsigned x = blocks_for((longest + 3) / 4);  // about 4 elements per thread
        multi_tensor_kernel<<<dim3(x, static_cast<unsigned>(n)), threads, 0, s>>>(b, f);
      });
}

}  // namespace

// ---- the functions cuda_kernels.hpp declares ----------------------------------------------------

void fill(mat m, float v, cudaStream_t s) { for_each_element(m.rows, m.cols, fill_op{m, v}, s); }
void scale(mat c, float beta, cudaStream_t s) {
  for_each_element(c.rows, c.cols, scale_op{c, beta}, s);
}
void broadcast_rows(cmat row, mat out, cudaStream_t s) {
  for_each_element(out.rows, out.cols, broadcast_rows_op{row, out}, s);
}
void bias_activation(const float* bias, activation_kind a, mat y, cudaStream_t s) {
  if (y.cols == 0) return;
  if (a == activation_kind::softmax)
    for_each(y.rows, bias_softmax_op{bias, y}, s);
  else if (bias != nullptr || a != activation_kind::linear)
    for_each_element(y.rows, y.cols, bias_activation_op{bias, a, y}, s);
}
// A bias gradient: the rows split over the GPU (cuda_launch::reduce_columns), summed in double.
struct matrix_value {
  cmat in;
  __device__ double operator()(std::size_t i, std::size_t j) const { return at(in, i, j); }
};
struct store_column_sum {
  float* out;
  __device__ void operator()(std::size_t j, double v) const { out[j] = static_cast<float>(v); }
};
void column_sums(cmat in, float* out, cudaStream_t s) {
  if (!cuda_launch::reduce_columns<double>(in.rows, in.cols, matrix_value{in},
                                           store_column_sum{out}, s))
    for_each(in.cols, column_sums_op{in, out}, s);
}
void activation_backward_bias(activation_kind a, cmat y, cmat dy, mat dz, float* db,
                              cudaStream_t s) {
  if (dz.cols > 0) {
    if (a == activation_kind::softmax)
      for_each(dz.rows, softmax_backward_op{y, dy, dz}, s);
    else if (a != activation_kind::linear || dz.p != dy.p)
      for_each_element(dz.rows, dz.cols, activation_backward_op{a, y, dy, dz}, s);
  }
  if (db != nullptr) column_sums({dz.p, dz.rows, dz.cols, dz.ld}, db, s);
}
void scale_shift(cmat in, mat out, float scale, float offset, cudaStream_t s) {
  for_each_element(out.rows, out.cols, scale_shift_op{in, out, scale, offset}, s);
}
void add(cmat a, cmat b, mat out, cudaStream_t s) {
  for_each_element(out.rows, out.cols, add_op{a, b, out}, s);
}
void layer_normalization(cmat x, std::size_t n, const float* gamma, bool has_gamma,
                         const float* beta, bool has_beta, float epsilon, mat xhat, float* inv,
                         mat y, cudaStream_t s) {
  const std::size_t per_row = x.cols / n;
  for_each(x.rows * per_row,
           layer_normalization_op{x, n, per_row, has_gamma ? gamma : nullptr,
                                  has_beta ? beta : nullptr, epsilon, xhat, inv, y},
           s);
}
void layer_normalization_backward(cmat dy, cmat xhat, const float* inv, std::size_t n,
                                  const float* gamma, bool has_gamma, mat dx, bool want_dx,
                                  float* dgamma, bool want_dgamma, float* dbeta, bool want_dbeta,
                                  cudaStream_t s) {
  const std::size_t per_row = dy.cols / n, runs = dy.rows * per_row;
  if (runs == 0) return;
  if (want_dgamma || want_dbeta)
    for_each(n,
             layer_normalization_variables_op{dy, xhat, n, per_row, runs,
                                              want_dgamma ? dgamma : nullptr,
                                              want_dbeta ? dbeta : nullptr},
             s);
  if (want_dx)
    for_each(runs,
             layer_normalization_backward_op{dy, xhat, inv, n, per_row,
                                             has_gamma ? gamma : nullptr, dx},
             s);
}
void copy_columns(cmat src, std::size_t src_first, mat dst, std::size_t dst_first,
                  std::size_t count, cudaStream_t s) {
  for_each_element(dst.rows, count, copy_columns_op{src, src_first, dst, dst_first}, s);
}
void dropout(cmat in, mat out, const random::stream& st, float rate, std::uint64_t first_row,
             std::uint64_t first_col, std::uint64_t global_cols, cudaStream_t s) {
  for_each_element(out.rows, out.cols,
                   dropout_op{in, out, st, rate, kb::dropout_keep_scale(rate), first_row,
                              first_col, global_cols},
                   s);
}

void crossentropy_on_probabilities(cmat probs, const std::int32_t* labels, cmat targets,
                                   mat grad, float grad_scale, float eps, double* out,
                                   cudaStream_t s) {
  block_sum(probs.rows,
            xent_probabilities_op{probs, targets_of(labels, targets), grad, grad_scale, eps}, out,
            s);
}
void softmax_cross_entropy(cmat logits, const std::int32_t* labels, cmat targets, mat grad,
                           float grad_scale, double* out, cudaStream_t s) {
  block_sum(logits.rows, softmax_xent_op{logits, targets_of(labels, targets), grad, grad_scale},
            out, s);
}
void mean_squared_error(cmat pred, cmat targets, mat grad, float grad_scale, std::size_t classes,
                        double* out, cudaStream_t s) {
  const float inv_n = 1.0f / static_cast<float>(classes != 0 ? classes : pred.cols);
  if (!row_terms_sum(pred.rows, pred.cols, squared_error_term{pred, targets, grad, grad_scale,
                                                              inv_n},
                     inv_n, out, s))
    block_sum(pred.rows, mse_op{pred, targets, grad, grad_scale, inv_n}, out, s);
}
void binary_crossentropy(cmat pred, cmat targets, mat grad, float grad_scale, bool from_logits,
                         float epsilon, std::size_t classes, double* out, cudaStream_t s) {
  const float inv_n = 1.0f / static_cast<float>(classes != 0 ? classes : pred.cols);
  if (!row_terms_sum(pred.rows, pred.cols,
                     binary_crossentropy_term{pred, targets, grad, grad_scale, from_logits,
                                              epsilon, inv_n},
                     inv_n, out, s))
    block_sum(pred.rows,
              binary_crossentropy_op{pred, targets, grad, grad_scale, from_logits, epsilon,
                                     inv_n},
              out, s);
}
void mean_absolute_error(cmat pred, cmat targets, double* out, cudaStream_t s) {
  const float inv_n = 1.0f / static_cast<float>(pred.cols);
  if (!row_terms_sum(pred.rows, pred.cols, absolute_error_term{pred, targets}, inv_n, out, s))
    block_sum(pred.rows, mean_absolute_error_op{pred, targets, inv_n}, out, s);
}
void count_argmax_equal(cmat pred, const std::int32_t* labels, cmat targets, double* out,
                        cudaStream_t s) {
  block_sum(pred.rows, argmax_equal_op{pred, targets_of(labels, targets)}, out, s);
}

void row_max(cmat m, mat out, cudaStream_t s) { for_each(m.rows, row_max_op{m, out}, s); }
void row_dot(cmat a, cmat b, mat out, cudaStream_t s) {
  for_each(a.rows, row_dot_op{a, b, out}, s);
}
void exp_rows(cmat src, cmat mx, mat dst, mat sum, cudaStream_t s) {
  for_each(src.rows, exp_rows_op{src, mx, dst, sum}, s);
}
void divide_rows(mat m, cmat sum, cudaStream_t s) { for_each(m.rows, divide_rows_op{m, sum}, s); }
void softmax_backward_rows(cmat y, cmat dy, cmat dot, mat dz, cudaStream_t s) {
  for_each(y.rows, softmax_backward_rows_op{y, dy, dot, dz}, s);
}
void target_terms(cmat z, const std::int32_t* labels, std::size_t col0, cmat targets, cmat mx,
                  mat out, cudaStream_t s) {
  for_each(z.rows, target_terms_op{z, targets_of(labels, targets, col0), mx, out}, s);
}
void split_softmax_cross_entropy(mat grad, const std::int32_t* labels, std::size_t col0,
                                 cmat targets, cmat sum, cmat terms, float grad_scale,
                                 double* out, cudaStream_t s) {
  block_sum(grad.rows,
            split_softmax_xent_op{grad, targets_of(labels, targets, col0), sum, terms,
                                  grad_scale},
            out, s);
}
void crossentropy_terms(cmat probs, const std::int32_t* labels, std::size_t col0, cmat targets,
                        cmat sum, float eps, mat grad, mat out, cudaStream_t s) {
  for_each(probs.rows,
           crossentropy_terms_op{probs, targets_of(labels, targets, col0), sum, eps, grad, out},
           s);
}
void split_crossentropy(mat grad, cmat sum, cmat terms, float grad_scale, double* out,
                        cudaStream_t s) {
  block_sum(grad.rows, split_crossentropy_op{grad, sum, terms, grad_scale}, out, s);
}
void row_argmax(cmat m, std::size_t col0, mat out, cudaStream_t s) {
  for_each(m.rows, row_argmax_op{m, col0, out}, s);
}

void sgd_update(const update_ptrs* u, std::size_t count, float lr, float momentum, bool nesterov,
                cudaStream_t s) {
  launch_updates(u, count, sgd_op{lr, momentum, nesterov}, s);
}
void adam_update(const update_ptrs* u, std::size_t count, float alpha, float beta_1, float beta_2,
                 float epsilon, cudaStream_t s) {
  launch_updates(u, count, adam_op{alpha, beta_1, beta_2, epsilon}, s);
}
void rmsprop_update(const update_ptrs* u, std::size_t count, float lr, float rho, float momentum,
                    float epsilon, bool centered, cudaStream_t s) {
  (void)centered;  // slot_c is null unless centered
  launch_updates(u, count, rmsprop_op{lr, rho, momentum, epsilon}, s);
}

}  // namespace tessel::backend::cuda_kernels
