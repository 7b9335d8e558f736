// tessel::cuda_compiled: the templates over the CUDA backend that do not depend on a model's type
// (its trainer's core and model parts, the executor's core, saving, the optimizer, the state
// checks, the metrics by name), compiled once by the host compiler, as src/tessel_templates.cpp
// compiles them for the host backend; a program linked with it declares them `extern template`
// (TESSEL_EXTERN_CUDA_TEMPLATES, core/compilation.hpp). The kernels are tessel::cuda's (nvcc).
#if !defined(TESSEL_SEPARATE_COMPILATION) || !defined(TESSEL_CUDA_SEPARATE_COMPILATION) || \
    !defined(TESSEL_CUDA_SOURCE) || !defined(TESSEL_HAVE_CUDA)
#error \
    "compile src/tessel_cuda.cpp as CMake's tessel::cuda_compiled does (TESSEL_CUDA_SOURCE, linked with tessel::tessel and tessel::cuda)"
#endif

#include <tessel/backend/cuda.hpp>
#include <tessel/comm/cuda_communicator.hpp>
#include <tessel/tessel.hpp>

#include "backend_templates.hpp"

namespace tessel {
TESSEL_BACKEND_TEMPLATES(backend::cuda, comm::cuda_communicator)
}  // namespace tessel
