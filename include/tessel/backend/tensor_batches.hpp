// The launches of a multi-tensor kernel (the CUDA backend's optimizer updates, as PyTorch's
// multi_tensor_apply and apex batch them): the tensors in order, empty ones skipped, at most
// PerLaunch in each launch, every non-empty tensor in exactly one launch. Host code that nvcc and
// g++ both compile, so that the CPU test suite checks the batching the GPU runs.
#pragma once

#include <array>
#include <cstddef>

namespace tessel::backend {

// Calls launch(indices, n) for each batch: indices[0..n) are the tensors of one launch (n >= 1).
// size_of(i) is tensor i's element count.
template <std::size_t PerLaunch, class SizeOf, class Launch>
void for_each_tensor_batch(std::size_t count, SizeOf size_of, Launch launch) {
  static_assert(PerLaunch > 0, "a launch takes at least one tensor");
  std::size_t i = 0;
  while (i < count) {
    std::array<std::size_t, PerLaunch> indices{};
    std::size_t n = 0;
    // The next batch starts where this one stopped: past the empty tensors it skipped.
    for (; i < count && n < PerLaunch; ++i)
      if (size_of(i) != 0) indices[n++] = i;
    if (n != 0) launch(indices, n);
  }
}

}  // namespace tessel::backend
