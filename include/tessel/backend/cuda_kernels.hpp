// cuda_kernels: the CUDA backend's kernels, as plain functions of device pointers, sizes and a
// stream. Declared here for the host compiler (backend/cuda.hpp calls them), defined in
// src/cuda/kernels.cu and compiled by nvcc into the `tessel::cuda` library: nvcc's front end
// cannot parse the rest of tessel (class types as template arguments, C++20), so the kernels
// live in their own translation unit and see only this header, the activation kinds and the
// Philox stream (the same code on both sides: dropout masks are equal on CPU and GPU).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "../core/activations.hpp"
#include "../random/philox.hpp"

namespace tessel::backend::cuda_kernels {

// A row-major matrix in device memory: rows x cols, rows `ld` floats apart.
struct mat {
  float* p;
  std::size_t rows, cols, ld;
};
struct cmat {
  const float* p;
  std::size_t rows, cols, ld;
};

// ---- memory
void fill(mat m, float v, cudaStream_t s);
// c = beta * c (an empty contraction's GEMM).
void scale(mat c, float beta, cudaStream_t s);

// ---- element-wise
void broadcast_rows(cmat row, mat out, cudaStream_t s);
// y = activation(y + bias) row by row (bias: one row, or null): dense's forward epilogue.
void bias_activation(const float* bias, activation_kind a, mat y, cudaStream_t s);
// dz = dy * f'(z) through y = f(z) (dz may be dy); db (null: none) = the column sums of dz,
// each column summed in row order.
void activation_backward_bias(activation_kind a, cmat y, cmat dy, mat dz, float* db,
                              cudaStream_t s);
void column_sums(cmat in, float* out, cudaStream_t s);
void scale_shift(cmat in, mat out, float scale, float offset, cudaStream_t s);
void add(cmat a, cmat b, mat out, cudaStream_t s);
void layer_normalization(cmat x, std::size_t n, const float* gamma, bool has_gamma,
                         const float* beta, bool has_beta, float epsilon, mat xhat, float* inv,
                         mat y, cudaStream_t s);
void layer_normalization_backward(cmat dy, cmat xhat, const float* inv, std::size_t n,
                                  const float* gamma, bool has_gamma, mat dx, bool want_dx,
                                  float* dgamma, bool want_dgamma, float* dbeta, bool want_dbeta,
                                  cudaStream_t s);
void copy_columns(cmat src, std::size_t src_first, mat dst, std::size_t dst_first,
                  std::size_t count, cudaStream_t s);
void dropout(cmat in, mat out, const random::stream& st, float rate, std::uint64_t first_row,
             std::uint64_t first_col, std::uint64_t global_cols, cudaStream_t s);

// ---- losses and metrics: the sum over rows into *out (device memory, float64), in a fixed
//      order (the same bits every run); labels null when the targets are given.
void crossentropy_on_probabilities(cmat probs, const std::int32_t* labels, cmat targets,
                                   mat grad, float grad_scale, float eps, double* out,
                                   cudaStream_t s);
void softmax_cross_entropy(cmat logits, const std::int32_t* labels, cmat targets, mat grad,
                           float grad_scale, double* out, cudaStream_t s);
void binary_crossentropy(cmat pred, cmat targets, mat grad, float grad_scale, bool from_logits,
                         float epsilon, std::size_t classes, double* out, cudaStream_t s);
void mean_absolute_error(cmat pred, cmat targets, double* out, cudaStream_t s);
void mean_squared_error(cmat pred, cmat targets, mat grad, float grad_scale, std::size_t classes,
                        double* out, cudaStream_t s);
void count_argmax_equal(cmat pred, const std::int32_t* labels, cmat targets, double* out,
                        cudaStream_t s);

// ---- a class dimension split across devices (backend_split_rows)
void row_max(cmat m, mat out, cudaStream_t s);
void row_dot(cmat a, cmat b, mat out, cudaStream_t s);  // b.p null: row sums of a
void exp_rows(cmat src, cmat mx, mat dst, mat sum, cudaStream_t s);
void divide_rows(mat m, cmat sum, cudaStream_t s);
void softmax_backward_rows(cmat y, cmat dy, cmat dot, mat dz, cudaStream_t s);
void target_terms(cmat z, const std::int32_t* labels, std::size_t col0, cmat targets, cmat mx,
                  mat out, cudaStream_t s);
void split_softmax_cross_entropy(mat grad, const std::int32_t* labels, std::size_t col0,
                                 cmat targets, cmat sum, cmat terms, float grad_scale,
                                 double* out, cudaStream_t s);
void crossentropy_terms(cmat probs, const std::int32_t* labels, std::size_t col0, cmat targets,
                        cmat sum, float eps, mat grad, mat out, cudaStream_t s);
void split_crossentropy(mat grad, cmat sum, cmat terms, float grad_scale, double* out,
                        cudaStream_t s);
void row_argmax(cmat m, std::size_t col0, mat out, cudaStream_t s);

// ---- optimizer updates over many variables in one launch (PyTorch's multi_tensor_apply): each
//      tensor's pointers and length; a slot an update does not use is null.
struct update_ptrs {
  float* value;
  const float* gradient;
  float* slot_a;
  float* slot_b;
  float* slot_c;
  std::size_t n;
};
void sgd_update(const update_ptrs* u, std::size_t count, float lr, float momentum, bool nesterov,
                cudaStream_t s);
void adam_update(const update_ptrs* u, std::size_t count, float alpha, float beta_1, float beta_2,
                 float epsilon, cudaStream_t s);
void rmsprop_update(const update_ptrs* u, std::size_t count, float lr, float rho, float momentum,
                    float epsilon, bool centered, cudaStream_t s);

}  // namespace tessel::backend::cuda_kernels
