// The CUDA backend's one generic launcher: f(i) for every i in [0, n), one GPU thread each, on a
// stream (backend::cuda::for_each calls it with the compute stream). Declared here for every
// translation unit; defined in cuda_launch.cuh, which only nvcc compiles: a family of layers
// lists its functors (their kernel bodies, e.g. backend/convolution_bodies.hpp) in a .cu file of
// the CUDA target (src/cuda/<family>.cu, TESSEL_CUDA_FOR_EACH), which instantiates the launcher
// for them, and g++ code links to those instantiations. A functor not listed there is a link
// error naming it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace tessel::backend::cuda_launch {

template <class F>
void for_each(std::size_t n, const F& f, cudaStream_t stream);

}  // namespace tessel::backend::cuda_launch
