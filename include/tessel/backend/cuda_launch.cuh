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
}  // namespace detail

template <class F>
void for_each(std::size_t n, const F& f, cudaStream_t stream) {
  if (n == 0) return;
  const std::size_t b = (n + detail::threads - 1) / detail::threads;
  const auto blocks = static_cast<unsigned>(b < 65535u * 8 ? b : 65535u * 8);
  detail::for_each_kernel<<<blocks, detail::threads, 0, stream>>>(n, f);
}

}  // namespace tessel::backend::cuda_launch

// Instantiates the launcher for `Functor` (a type whose operator()(std::size_t) is a
// TESSEL_KERNEL_BODY), in a .cu file of the CUDA target.
#define TESSEL_CUDA_FOR_EACH(Functor)                                                     \
  template void tessel::backend::cuda_launch::for_each<Functor>(std::size_t, const Functor&, \
                                                                cudaStream_t)
