// The definition of cuda_launch::for_each (cuda_launch.hpp): a grid-stride kernel over [0, n),
// 256 threads a block, at most 65535 x 8 blocks. Included only by the CUDA target's .cu files,
// which instantiate it for their functors with TESSEL_CUDA_FOR_EACH(functor).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda_launch.hpp"

namespace tessel::backend::cuda_launch {

namespace detail {
constexpr unsigned threads = 256;
template <class F>
__global__ void for_each_kernel(std::size_t n, F f) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    f(i);
}
template <class F>
void each(std::size_t n, const F& f, cudaStream_t stream) {
  if (n == 0) return;
  const std::size_t b = (n + threads - 1) / threads;
  const auto blocks = static_cast<unsigned>(b < 65535u * 8 ? b : 65535u * 8);
  for_each_kernel<<<blocks, threads, 0, stream>>>(n, f);
}
}  // namespace detail

// A .cu file may specialize it for a functor whose items are too few to fill the GPU (one per
// channel), running its work another way (reduce_columns below).
template <class F>
void for_each(std::size_t n, const F& f, cudaStream_t stream) {
  detail::each(n, f, stream);
}

// ---- sums over the rows of each column, in parallel and in a fixed order ----------------------
// out(c, sum over rows i of term(i, c)) for every column c in [0, cols), V a sum (double, or a
// struct of them with +=): what a functor with one thread per column (a batch normalization
// channel's statistics, a bias gradient) would compute, with the rows split over the GPU.
// Blocks of 32 columns x 8 row lanes (each row read by 32 threads at once): block (x, s) sums
// the rows of split s, lane y taking rows y, y + 8, ... in turn, and the 8 lanes' sums are added
// in lane order; then one block per column adds its splits' sums (column_totals). The order
// depends on the shape alone: every run gives the same bits. The splits' sums live in the
// stream-ordered pool.
namespace detail {
constexpr unsigned column_lanes = 32, row_lanes = 8;
template <class V, class Term>
__global__ void column_split_sums(std::size_t rows, std::size_t cols, std::size_t rows_per_split,
                                  Term term, V* partial) {
  __shared__ V part[row_lanes][column_lanes];
  const std::size_t c = blockIdx.x * static_cast<std::size_t>(column_lanes) + threadIdx.x;
  const std::size_t first = blockIdx.y * rows_per_split;
  const std::size_t last = first + rows_per_split < rows ? first + rows_per_split : rows;
  V acc{};
  if (c < cols)
    for (std::size_t i = first + threadIdx.y; i < last; i += row_lanes) acc += term(i, c);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    V total = part[0][threadIdx.x];
    for (unsigned y = 1; y < row_lanes; ++y) total += part[y][threadIdx.x];
    partial[blockIdx.y * cols + c] = total;
  }
}
// The sum of every thread's `v` over a block of `threads` threads, in a fixed tree (the same
// bits each run), returned to every thread. A block that calls it again must __syncthreads()
// first, once every thread has read the result.
template <class V>
__device__ V block_total(V v) {
  __shared__ V part[threads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}
// One block per column (grid-stride): thread t adds splits t, t + threads, ... in turn, then
// block_total adds the threads' sums.
template <class V, class Out>
__global__ void column_totals(std::size_t cols, std::size_t splits, const V* partial, Out out) {
  for (std::size_t c = blockIdx.x; c < cols; c += gridDim.x) {
    V acc{};
    for (std::size_t s = threadIdx.x; s < splits; s += threads) acc += partial[s * cols + c];
    const V total = block_total(acc);
    if (threadIdx.x == 0) out(c, total);
    __syncthreads();  // every thread has read the total before the next column's sums
  }
}
}  // namespace detail

// Returns false (nothing launched) where the pool cannot hold the splits' sums; the caller then
// runs its one-thread-per-column functor instead.
template <class V, class Term, class Out>
bool reduce_columns(std::size_t rows, std::size_t cols, const Term& term, const Out& out,
                    cudaStream_t stream) {
  if (cols == 0) return true;
  const std::size_t column_blocks = (cols + detail::column_lanes - 1) / detail::column_lanes;
  // About 1,024 blocks in all, each split at least 256 rows (32 per lane).
  std::size_t splits = (rows + 255) / 256;
  const std::size_t most = column_blocks >= 1024 ? 1 : 1024 / column_blocks;
  if (splits > most) splits = most;
  if (splits == 0) splits = 1;
  if (splits > 65535) splits = 65535;
  const std::size_t rows_per_split = (rows + splits - 1) / splits;
  V* partial = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&partial), splits * cols * sizeof(V), stream) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  detail::column_split_sums<V><<<dim3(static_cast<unsigned>(column_blocks),
                                      static_cast<unsigned>(splits)),
                                 dim3(detail::column_lanes, detail::row_lanes), 0, stream>>>(
      rows, cols, rows_per_split == 0 ? 1 : rows_per_split, term, partial);
  detail::column_totals<V><<<static_cast<unsigned>(cols < 65535u * 8 ? cols : 65535u * 8),
                             detail::threads, 0, stream>>>(cols, splits, partial, out);
  cudaFreeAsync(partial, stream);
  return true;
}

}  // namespace tessel::backend::cuda_launch

// Instantiates the launcher for `Functor` (a type whose operator()(std::size_t) is a
// TESSEL_KERNEL_BODY), in a .cu file of the CUDA target.
#define TESSEL_CUDA_FOR_EACH(Functor)                                                     \
  template void tessel::backend::cuda_launch::for_each<Functor>(std::size_t, const Functor&, \
                                                                cudaStream_t)
