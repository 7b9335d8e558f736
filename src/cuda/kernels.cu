// The CUDA backend's kernels (declared in include/tessel/backend/cuda_kernels.hpp). Each one
// does what the host backend's function of the same name does (backend/host.hpp), in the same
// order wherever an order decides the bits: a column sum adds its rows in row order, a row's
// softmax and loss go along the row, and a sum over rows is reduced by one block in a fixed
// order, so that a step gives the same bits every time it runs.
#include <array>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <tessel/backend/cuda_kernels.hpp>
#include <tessel/backend/kernel_bodies.hpp>
#include <tessel/backend/tensor_batches.hpp>

namespace tessel::backend::cuda_kernels {
namespace {

constexpr int threads = 256;

// Blocks for n independent items, `threads` per block, at most 65535 x 8 (the loops stride).
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < 65535u * 8 ? b : 65535u * 8));
}

#define TESSEL_GRID_STRIDE(k, n)                                                               \
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < (n); \
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x)

using kernel_bodies::activate;

// Thread 0 of the block gets the sum of every thread's `v` (a fixed tree: the same bits each
// run), in shared memory of `threads` doubles.
__device__ double block_sum(double v) {
  __shared__ double part[threads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

__device__ float target_of(const std::int32_t* labels, cmat t, std::size_t i, std::size_t j,
                           std::size_t col0 = 0) {
  if (labels != nullptr) return static_cast<std::size_t>(labels[i]) == col0 + j ? 1.0f : 0.0f;
  return t.p[i * t.ld + j];
}

// One class of a cross-entropy on probabilities (the host backend's, written once).
using kernel_bodies::crossentropy_term;

// ---- memory and element-wise ------------------------------------------------------------------

__global__ void fill_kernel(mat m, float v) {
  TESSEL_GRID_STRIDE(k, m.rows * m.cols) m.p[k / m.cols * m.ld + k % m.cols] = v;
}
__global__ void scale_kernel(mat m, float beta) {
  TESSEL_GRID_STRIDE(k, m.rows * m.cols) m.p[k / m.cols * m.ld + k % m.cols] *= beta;
}
__global__ void broadcast_rows_kernel(cmat row, mat out) {
  TESSEL_GRID_STRIDE(k, out.rows * out.cols) out.p[k / out.cols * out.ld + k % out.cols] =
      row.p[k % out.cols];
}
__global__ void bias_activation_kernel(const float* bias, activation_kind a, mat y) {
  TESSEL_GRID_STRIDE(k, y.rows * y.cols) {
    float& v = y.p[k / y.cols * y.ld + k % y.cols];
    v = activate(a, bias != nullptr ? v + bias[k % y.cols] : v);
  }
}
// Softmax along each row, one thread per row (host_detail::apply_epilogue's order).
__global__ void bias_softmax_kernel(const float* bias, mat y) {
  TESSEL_GRID_STRIDE(i, y.rows) {
    float* r = y.p + i * y.ld;
    float mx = -INFINITY;
    for (std::size_t j = 0; j < y.cols; ++j) {
      if (bias != nullptr) r[j] += bias[j];
      mx = fmaxf(mx, r[j]);
    }
    float s = 0.0f;
    for (std::size_t j = 0; j < y.cols; ++j) s += (r[j] = expf(r[j] - mx));
    const float inv = 1.0f / s;
    for (std::size_t j = 0; j < y.cols; ++j) r[j] *= inv;
  }
}
__global__ void activation_backward_kernel(activation_kind a, cmat y, cmat dy, mat dz) {
  TESSEL_GRID_STRIDE(k, dz.rows * dz.cols) {
    const std::size_t i = k / dz.cols, j = k % dz.cols;
    dz.p[i * dz.ld + j] =
        kernel_bodies::activation_gradient(a, y.p[i * y.ld + j], dy.p[i * dy.ld + j]);
  }
}
__global__ void softmax_backward_kernel(cmat y, cmat dy, mat dz) {
  TESSEL_GRID_STRIDE(i, dz.rows) {
    kernel_bodies::softmax_gradient_row(y.p + i * y.ld, dy.p + i * dy.ld, dz.p + i * dz.ld,
                                        dz.cols);
  }
}
// out[j] = sum over rows of in[i, j], in row order; one thread per column.
__global__ void column_sums_kernel(cmat in, float* out) {
  TESSEL_GRID_STRIDE(j, in.cols) {
    float s = 0.0f;
    for (std::size_t i = 0; i < in.rows; ++i) s += in.p[i * in.ld + j];
    out[j] = s;
  }
}
__global__ void scale_shift_kernel(cmat in, mat out, float scale, float offset) {
  TESSEL_GRID_STRIDE(k, out.rows * out.cols) {
    const std::size_t i = k / out.cols, j = k % out.cols;
    out.p[i * out.ld + j] = in.p[i * in.ld + j] * scale + offset;
  }
}
__global__ void add_kernel(cmat a, cmat b, mat out) {
  TESSEL_GRID_STRIDE(k, out.rows * out.cols) {
    const std::size_t i = k / out.cols, j = k % out.cols;
    out.p[i * out.ld + j] = a.p[i * a.ld + j] + b.p[i * b.ld + j];
  }
}
// Layer normalization: one thread per run of `n` values (a sample's last axis), the host's body.
__global__ void layer_normalization_kernel(cmat x, std::size_t n, const float* gamma,
                                           bool has_gamma, const float* beta, bool has_beta,
                                           float epsilon, mat xhat, float* inv, mat y) {
  const std::size_t per_row = x.cols / n;
  TESSEL_GRID_STRIDE(r, x.rows * per_row) {
    const std::size_t i = r / per_row, c0 = (r % per_row) * n;
    inv[r] = kernel_bodies::layer_normalization_row(
        x.p + i * x.ld + c0, n, has_gamma ? gamma : nullptr, has_beta ? beta : nullptr, epsilon,
        y.p + i * y.ld + c0, xhat.p + i * xhat.ld + c0);
  }
}
__global__ void layer_normalization_variables_kernel(cmat dy, cmat xhat, std::size_t n,
                                                     float* dgamma, bool want_dgamma,
                                                     float* dbeta, bool want_dbeta) {
  const std::size_t per_row = dy.cols / n, runs = dy.rows * per_row;
  TESSEL_GRID_STRIDE(j, n) {
    double sg = 0, sb = 0;
    for (std::size_t r = 0; r < runs; ++r) {
      const std::size_t i = r / per_row, c = (r % per_row) * n + j;
      sg += static_cast<double>(dy.p[i * dy.ld + c]) * xhat.p[i * xhat.ld + c];
      sb += dy.p[i * dy.ld + c];
    }
    if (want_dgamma) dgamma[j] = static_cast<float>(sg);
    if (want_dbeta) dbeta[j] = static_cast<float>(sb);
  }
}
__global__ void layer_normalization_backward_kernel(cmat dy, cmat xhat, const float* inv,
                                                    std::size_t n, const float* gamma,
                                                    bool has_gamma, mat dx) {
  const std::size_t per_row = dy.cols / n;
  TESSEL_GRID_STRIDE(r, dy.rows * per_row) {
    const std::size_t i = r / per_row, c0 = (r % per_row) * n;
    double m1 = 0, m2 = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const float g = has_gamma ? dy.p[i * dy.ld + c0 + j] * gamma[j] : dy.p[i * dy.ld + c0 + j];
      m1 += g;
      m2 += static_cast<double>(g) * xhat.p[i * xhat.ld + c0 + j];
    }
    const auto mean_g = static_cast<float>(m1 / static_cast<double>(n));
    const auto mean_gh = static_cast<float>(m2 / static_cast<double>(n));
    for (std::size_t j = 0; j < n; ++j) {
      const float g = has_gamma ? dy.p[i * dy.ld + c0 + j] * gamma[j] : dy.p[i * dy.ld + c0 + j];
      dx.p[i * dx.ld + c0 + j] = inv[r] * (g - mean_g - xhat.p[i * xhat.ld + c0 + j] * mean_gh);
    }
  }
}
__global__ void copy_columns_kernel(cmat src, std::size_t src_first, mat dst,
                                    std::size_t dst_first, std::size_t count) {
  TESSEL_GRID_STRIDE(k, dst.rows * count) {
    const std::size_t i = k / count, j = k % count;
    dst.p[i * dst.ld + dst_first + j] = src.p[i * src.ld + src_first + j];
  }
}
__global__ void dropout_kernel(cmat in, mat out, random::stream st, float rate,
                               std::uint64_t first_row, std::uint64_t first_col,
                               std::uint64_t global_cols) {
  const float keep_scale = 1.0f / (1.0f - rate);
  TESSEL_GRID_STRIDE(k, out.rows * out.cols) {
    const std::size_t i = k / out.cols, j = k % out.cols;
    const std::uint64_t index = (first_row + i) * global_cols + first_col + j;
    out.p[i * out.ld + j] = st.uniform(index) >= rate ? in.p[i * in.ld + j] * keep_scale : 0.0f;
  }
}

// ---- losses and metrics: one block, each thread its rows, then the block's fixed-order sum ----

__global__ void xent_probabilities_kernel(cmat probs, const std::int32_t* labels, cmat targets,
                                          mat grad, float grad_scale, float eps, double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < probs.rows; i += blockDim.x) {
    const float* p = probs.p + i * probs.ld;
    float* g = grad.p + i * grad.ld;
    float s = 0.0f;
    for (std::size_t j = 0; j < probs.cols; ++j) s += p[j];
    float loss = 0.0f, dot = 0.0f;
    for (std::size_t j = 0; j < probs.cols; ++j)
      g[j] = crossentropy_term(target_of(labels, targets, i, j), p[j], s, eps, loss, dot);
    for (std::size_t j = 0; j < probs.cols; ++j) g[j] = grad_scale * (g[j] - dot) / s;
    acc += static_cast<double>(loss);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void softmax_xent_kernel(cmat logits, const std::int32_t* labels, cmat targets,
                                    mat grad, float grad_scale, double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < logits.rows; i += blockDim.x) {
    const float* z = logits.p + i * logits.ld;
    float* g = grad.p + i * grad.ld;
    float mx = -INFINITY;
    for (std::size_t j = 0; j < logits.cols; ++j) mx = fmaxf(mx, z[j]);
    float s = 0.0f, tsum = 0.0f;
    for (std::size_t j = 0; j < logits.cols; ++j) {
      s += expf(z[j] - mx);
      tsum += target_of(labels, targets, i, j);
    }
    const float log_s = logf(s);
    float loss = 0.0f;
    for (std::size_t j = 0; j < logits.cols; ++j) {
      const float t = target_of(labels, targets, i, j);
      loss -= t * (z[j] - mx - log_s);
      g[j] = grad_scale * (expf(z[j] - mx) / s * tsum - t);
    }
    acc += static_cast<double>(loss);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void mse_kernel(cmat pred, cmat targets, mat grad, float grad_scale, float inv_n,
                           double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < pred.rows; i += blockDim.x) {
    float s = 0.0f;
    for (std::size_t j = 0; j < pred.cols; ++j)
      s += kernel_bodies::squared_error(pred.p[i * pred.ld + j], targets.p[i * targets.ld + j],
                                        grad_scale, inv_n, grad.p[i * grad.ld + j]);
    acc += static_cast<double>(s * inv_n);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void binary_crossentropy_kernel(cmat pred, cmat targets, mat grad, float grad_scale,
                                           bool from_logits, float epsilon, float inv_n,
                                           double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < pred.rows; i += blockDim.x) {
    float s = 0.0f;
    for (std::size_t j = 0; j < pred.cols; ++j)
      s += kernel_bodies::binary_crossentropy(targets.p[i * targets.ld + j],
                                              pred.p[i * pred.ld + j], from_logits, epsilon,
                                              grad_scale, inv_n, grad.p[i * grad.ld + j]);
    acc += static_cast<double>(s * inv_n);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void mean_absolute_error_kernel(cmat pred, cmat targets, double* out) {
  const float inv_n = 1.0f / static_cast<float>(pred.cols);
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < pred.rows; i += blockDim.x) {
    float s = 0.0f;
    for (std::size_t j = 0; j < pred.cols; ++j)
      s += kernel_bodies::absolute_error(pred.p[i * pred.ld + j], targets.p[i * targets.ld + j]);
    acc += static_cast<double>(s * inv_n);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void argmax_equal_kernel(cmat pred, const std::int32_t* labels, cmat targets,
                                    double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < pred.rows; i += blockDim.x) {
    const float* p = pred.p + i * pred.ld;
    std::size_t best = 0, want = 0;
    for (std::size_t j = 1; j < pred.cols; ++j)
      if (p[j] > p[best]) best = j;
    if (labels != nullptr) {
      want = static_cast<std::size_t>(labels[i]);
    } else {
      const float* t = targets.p + i * targets.ld;
      for (std::size_t j = 1; j < targets.cols; ++j)
        if (t[j] > t[want]) want = j;
    }
    acc += best == want ? 1.0 : 0.0;
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}

// ---- a class dimension split across devices: one thread per row ------------------------------

__global__ void row_max_kernel(cmat m, mat out) {
  TESSEL_GRID_STRIDE(i, m.rows) {
    float mx = -INFINITY;
    for (std::size_t j = 0; j < m.cols; ++j) mx = fmaxf(mx, m.p[i * m.ld + j]);
    out.p[i * out.ld] = mx;
  }
}
__global__ void row_dot_kernel(cmat a, cmat b, mat out) {
  TESSEL_GRID_STRIDE(i, a.rows) {
    float s = 0.0f;
    for (std::size_t j = 0; j < a.cols; ++j)
      s += b.p != nullptr ? a.p[i * a.ld + j] * b.p[i * b.ld + j] : a.p[i * a.ld + j];
    out.p[i * out.ld] = s;
  }
}
__global__ void exp_rows_kernel(cmat src, cmat mx, mat dst, mat sum) {
  TESSEL_GRID_STRIDE(i, src.rows) {
    float s = 0.0f;
    for (std::size_t j = 0; j < src.cols; ++j)
      s += (dst.p[i * dst.ld + j] = expf(src.p[i * src.ld + j] - mx.p[i * mx.ld]));
    sum.p[i * sum.ld] = s;
  }
}
__global__ void divide_rows_kernel(mat m, cmat sum) {
  TESSEL_GRID_STRIDE(i, m.rows) {
    const float inv = 1.0f / sum.p[i * sum.ld];
    for (std::size_t j = 0; j < m.cols; ++j) m.p[i * m.ld + j] *= inv;
  }
}
__global__ void softmax_backward_rows_kernel(cmat y, cmat dy, cmat dot, mat dz) {
  TESSEL_GRID_STRIDE(i, y.rows) {
    for (std::size_t j = 0; j < y.cols; ++j)
      dz.p[i * dz.ld + j] = y.p[i * y.ld + j] * (dy.p[i * dy.ld + j] - dot.p[i * dot.ld]);
  }
}
__global__ void target_terms_kernel(cmat z, const std::int32_t* labels, std::size_t col0,
                                    cmat targets, cmat mx, mat out) {
  TESSEL_GRID_STRIDE(i, z.rows) {
    float tz = 0.0f, ts = 0.0f;
    const float m = mx.p[i * mx.ld];
    if (labels != nullptr) {
      const auto c = static_cast<std::size_t>(labels[i]);
      if (c >= col0 && c < col0 + z.cols) {
        tz = z.p[i * z.ld + (c - col0)] - m;
        ts = 1.0f;
      }
    } else {
      for (std::size_t j = 0; j < z.cols; ++j) {
        const float t = targets.p[i * targets.ld + j];
        tz += t * (z.p[i * z.ld + j] - m);
        ts += t;
      }
    }
    out.p[i * out.ld] = tz;
    out.p[i * out.ld + 1] = ts;
  }
}
__global__ void split_softmax_xent_kernel(mat grad, const std::int32_t* labels, std::size_t col0,
                                          cmat targets, cmat sum, cmat terms, float grad_scale,
                                          double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < grad.rows; i += blockDim.x) {
    const float tsum = terms.p[i * terms.ld + 1];
    const float inv = 1.0f / sum.p[i * sum.ld];
    for (std::size_t j = 0; j < grad.cols; ++j) {
      float& g = grad.p[i * grad.ld + j];
      g = grad_scale * (g * inv * tsum - target_of(labels, targets, i, j, col0));
    }
    acc += static_cast<double>(tsum * logf(sum.p[i * sum.ld]) - terms.p[i * terms.ld]);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void crossentropy_terms_kernel(cmat probs, const std::int32_t* labels,
                                          std::size_t col0, cmat targets, cmat sum, float eps,
                                          mat grad, mat out) {
  TESSEL_GRID_STRIDE(i, probs.rows) {
    float loss = 0.0f, dot = 0.0f;
    const float s = sum.p[i * sum.ld];
    for (std::size_t j = 0; j < probs.cols; ++j)
      grad.p[i * grad.ld + j] = crossentropy_term(target_of(labels, targets, i, j, col0),
                                                  probs.p[i * probs.ld + j], s, eps, loss, dot);
    out.p[i * out.ld] = loss;
    out.p[i * out.ld + 1] = dot;
  }
}
__global__ void split_crossentropy_kernel(mat grad, cmat sum, cmat terms, float grad_scale,
                                          double* out) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < grad.rows; i += blockDim.x) {
    for (std::size_t j = 0; j < grad.cols; ++j) {
      float& g = grad.p[i * grad.ld + j];
      g = grad_scale * (g - terms.p[i * terms.ld + 1]) / sum.p[i * sum.ld];
    }
    acc += static_cast<double>(terms.p[i * terms.ld]);
  }
  const double total = block_sum(acc);
  if (threadIdx.x == 0) *out = total;
}
__global__ void row_argmax_kernel(cmat m, std::size_t col0, mat out) {
  TESSEL_GRID_STRIDE(i, m.rows) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < m.cols; ++j)
      if (m.p[i * m.ld + j] > m.p[i * m.ld + best]) best = j;
    out.p[i * out.ld] = m.p[i * m.ld + best];
    out.p[i * out.ld + 1] = static_cast<float>(col0 + best);
  }
}

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
    if (t.slot_b != nullptr) {
      t.slot_b[k] = momentum * t.slot_b[k] + increment;
      t.value[k] -= t.slot_b[k];
    } else {
      t.value[k] -= increment;
    }
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

bool empty(std::size_t rows, std::size_t cols) { return rows == 0 || cols == 0; }

}  // namespace

// ---- the launchers ------------------------------------------------------------------------------

void fill(mat m, float v, cudaStream_t s) {
  if (empty(m.rows, m.cols)) return;
  fill_kernel<<<blocks_for(m.rows * m.cols), threads, 0, s>>>(m, v);
}
void scale(mat c, float beta, cudaStream_t s) {
  if (empty(c.rows, c.cols)) return;
  scale_kernel<<<blocks_for(c.rows * c.cols), threads, 0, s>>>(c, beta);
}
void broadcast_rows(cmat row, mat out, cudaStream_t s) {
  if (empty(out.rows, out.cols)) return;
  broadcast_rows_kernel<<<blocks_for(out.rows * out.cols), threads, 0, s>>>(row, out);
}
void bias_activation(const float* bias, activation_kind a, mat y, cudaStream_t s) {
  if (empty(y.rows, y.cols)) return;
  if (a == activation_kind::softmax)
    bias_softmax_kernel<<<blocks_for(y.rows), threads, 0, s>>>(bias, y);
  else if (bias != nullptr || a != activation_kind::linear)
    bias_activation_kernel<<<blocks_for(y.rows * y.cols), threads, 0, s>>>(bias, a, y);
}
void column_sums(cmat in, float* out, cudaStream_t s) {
  if (in.cols == 0) return;
  column_sums_kernel<<<blocks_for(in.cols), threads, 0, s>>>(in, out);
}
void activation_backward_bias(activation_kind a, cmat y, cmat dy, mat dz, float* db,
                              cudaStream_t s) {
  if (!empty(dz.rows, dz.cols)) {
    if (a == activation_kind::softmax)
      softmax_backward_kernel<<<blocks_for(dz.rows), threads, 0, s>>>(y, dy, dz);
    else if (a != activation_kind::linear || dz.p != dy.p)
      activation_backward_kernel<<<blocks_for(dz.rows * dz.cols), threads, 0, s>>>(a, y, dy,
                                                                                  dz);
  }
  if (db != nullptr) column_sums({dz.p, dz.rows, dz.cols, dz.ld}, db, s);
}
void scale_shift(cmat in, mat out, float scale, float offset, cudaStream_t s) {
  if (empty(out.rows, out.cols)) return;
  scale_shift_kernel<<<blocks_for(out.rows * out.cols), threads, 0, s>>>(in, out, scale, offset);
}
void add(cmat a, cmat b, mat out, cudaStream_t s) {
  if (empty(out.rows, out.cols)) return;
  add_kernel<<<blocks_for(out.rows * out.cols), threads, 0, s>>>(a, b, out);
}
void layer_normalization(cmat x, std::size_t n, const float* gamma, bool has_gamma,
                         const float* beta, bool has_beta, float epsilon, mat xhat, float* inv,
                         mat y, cudaStream_t s) {
  const std::size_t runs = x.rows * (x.cols / n);
  if (runs == 0) return;
  layer_normalization_kernel<<<blocks_for(runs), threads, 0, s>>>(x, n, gamma, has_gamma, beta,
                                                                  has_beta, epsilon, xhat, inv, y);
}
void layer_normalization_backward(cmat dy, cmat xhat, const float* inv, std::size_t n,
                                  const float* gamma, bool has_gamma, mat dx, bool want_dx,
                                  float* dgamma, bool want_dgamma, float* dbeta, bool want_dbeta,
                                  cudaStream_t s) {
  const std::size_t runs = dy.rows * (dy.cols / n);
  if (runs == 0) return;
  if (want_dgamma || want_dbeta)
    layer_normalization_variables_kernel<<<blocks_for(n), threads, 0, s>>>(
        dy, xhat, n, dgamma, want_dgamma, dbeta, want_dbeta);
  if (want_dx)
    layer_normalization_backward_kernel<<<blocks_for(runs), threads, 0, s>>>(dy, xhat, inv, n,
                                                                           gamma, has_gamma, dx);
}
void copy_columns(cmat src, std::size_t src_first, mat dst, std::size_t dst_first,
                  std::size_t count, cudaStream_t s) {
  if (empty(dst.rows, count)) return;
  copy_columns_kernel<<<blocks_for(dst.rows * count), threads, 0, s>>>(src, src_first, dst,
                                                                      dst_first, count);
}
void dropout(cmat in, mat out, const random::stream& st, float rate, std::uint64_t first_row,
             std::uint64_t first_col, std::uint64_t global_cols, cudaStream_t s) {
  if (empty(out.rows, out.cols)) return;
  dropout_kernel<<<blocks_for(out.rows * out.cols), threads, 0, s>>>(in, out, st, rate,
                                                                      first_row, first_col,
                                                                      global_cols);
}

void crossentropy_on_probabilities(cmat probs, const std::int32_t* labels, cmat targets,
                                   mat grad, float grad_scale, float eps, double* out,
                                   cudaStream_t s) {
  xent_probabilities_kernel<<<1, threads, 0, s>>>(probs, labels, targets, grad, grad_scale, eps,
                                                  out);
}
void softmax_cross_entropy(cmat logits, const std::int32_t* labels, cmat targets, mat grad,
                           float grad_scale, double* out, cudaStream_t s) {
  softmax_xent_kernel<<<1, threads, 0, s>>>(logits, labels, targets, grad, grad_scale, out);
}
void mean_squared_error(cmat pred, cmat targets, mat grad, float grad_scale, std::size_t classes,
                        double* out, cudaStream_t s) {
  const float inv_n = 1.0f / static_cast<float>(classes != 0 ? classes : pred.cols);
  mse_kernel<<<1, threads, 0, s>>>(pred, targets, grad, grad_scale, inv_n, out);
}
void binary_crossentropy(cmat pred, cmat targets, mat grad, float grad_scale, bool from_logits,
                         float epsilon, std::size_t classes, double* out, cudaStream_t s) {
  const float inv_n = 1.0f / static_cast<float>(classes != 0 ? classes : pred.cols);
  binary_crossentropy_kernel<<<1, threads, 0, s>>>(pred, targets, grad, grad_scale, from_logits,
                                                   epsilon, inv_n, out);
}
void mean_absolute_error(cmat pred, cmat targets, double* out, cudaStream_t s) {
  mean_absolute_error_kernel<<<1, threads, 0, s>>>(pred, targets, out);
}
void count_argmax_equal(cmat pred, const std::int32_t* labels, cmat targets, double* out,
                        cudaStream_t s) {
  argmax_equal_kernel<<<1, threads, 0, s>>>(pred, labels, targets, out);
}

void row_max(cmat m, mat out, cudaStream_t s) {
  if (m.rows > 0) row_max_kernel<<<blocks_for(m.rows), threads, 0, s>>>(m, out);
}
void row_dot(cmat a, cmat b, mat out, cudaStream_t s) {
  if (a.rows > 0) row_dot_kernel<<<blocks_for(a.rows), threads, 0, s>>>(a, b, out);
}
void exp_rows(cmat src, cmat mx, mat dst, mat sum, cudaStream_t s) {
  if (src.rows > 0) exp_rows_kernel<<<blocks_for(src.rows), threads, 0, s>>>(src, mx, dst, sum);
}
void divide_rows(mat m, cmat sum, cudaStream_t s) {
  if (m.rows > 0) divide_rows_kernel<<<blocks_for(m.rows), threads, 0, s>>>(m, sum);
}
void softmax_backward_rows(cmat y, cmat dy, cmat dot, mat dz, cudaStream_t s) {
  if (y.rows > 0)
    softmax_backward_rows_kernel<<<blocks_for(y.rows), threads, 0, s>>>(y, dy, dot, dz);
}
void target_terms(cmat z, const std::int32_t* labels, std::size_t col0, cmat targets, cmat mx,
                  mat out, cudaStream_t s) {
  if (z.rows > 0)
    target_terms_kernel<<<blocks_for(z.rows), threads, 0, s>>>(z, labels, col0, targets, mx, out);
}
void split_softmax_cross_entropy(mat grad, const std::int32_t* labels, std::size_t col0,
                                 cmat targets, cmat sum, cmat terms, float grad_scale,
                                 double* out, cudaStream_t s) {
  split_softmax_xent_kernel<<<1, threads, 0, s>>>(grad, labels, col0, targets, sum, terms,
                                                  grad_scale, out);
}
void crossentropy_terms(cmat probs, const std::int32_t* labels, std::size_t col0, cmat targets,
                        cmat sum, float eps, mat grad, mat out, cudaStream_t s) {
  if (probs.rows > 0)
    crossentropy_terms_kernel<<<blocks_for(probs.rows), threads, 0, s>>>(
        probs, labels, col0, targets, sum, eps, grad, out);
}
void split_crossentropy(mat grad, cmat sum, cmat terms, float grad_scale, double* out,
                        cudaStream_t s) {
  split_crossentropy_kernel<<<1, threads, 0, s>>>(grad, sum, terms, grad_scale, out);
}
void row_argmax(cmat m, std::size_t col0, mat out, cudaStream_t s) {
  if (m.rows > 0) row_argmax_kernel<<<blocks_for(m.rows), threads, 0, s>>>(m, col0, out);
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
