// default_backend: the backend a program's models and tensors use unless told otherwise.
// In a program linked with tessel::cuda (TESSEL_HAVE_CUDA), the GPU, as Keras picks the GPU when
// there is one; TESSEL_FORCE_HOST defined keeps such a program on the host. Elsewhere, the host.
#pragma once

#if defined(TESSEL_HAVE_CUDA) && !defined(TESSEL_FORCE_HOST)
#include "cuda.hpp"
#endif
#include "host.hpp"
#include "interface.hpp"

namespace tessel {

#if defined(TESSEL_HAVE_CUDA) && !defined(TESSEL_FORCE_HOST)
using default_backend = backend::cuda;
#else
using default_backend = backend::host;
#endif
static_assert(backend::backend_interface<default_backend>);

}  // namespace tessel
