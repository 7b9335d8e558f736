// How tessel's non-template functions are compiled (the report texts, the data readers, the
// progress bar, the watchdog, the host kernels): in every translation unit that uses them, or
// once, in a library.
//
// - Headers only (target tessel::header_only): each is an inline function, defined in
//   its header.
// - Compiled once (target tessel::tessel, which defines TESSEL_SEPARATE_COMPILATION for its
//   users): each header declares them, and src/tessel.cpp defines them (TESSEL_SOURCE). A
//   program with one executable per mesh (examples/model_parallel) compiles them once instead of
//   once per executable. Templates and constexpr functions stay in the headers either way.
//
// A header writes such a function as a declaration, `TESSEL_INLINE std::string f(int x);`, and
// its definition in a block `#if TESSEL_DEFINITIONS ... #endif` at its end.
#pragma once

#if defined(TESSEL_SEPARATE_COMPILATION)
#define TESSEL_INLINE
#if defined(TESSEL_SOURCE)
#define TESSEL_DEFINITIONS 1
#else
#define TESSEL_DEFINITIONS 0
#endif
#else
#define TESSEL_INLINE inline
#define TESSEL_DEFINITIONS 1
#endif

// The library's templates over the host backend that do not depend on a model's type (saving,
// checkpoints, the optimizers): with separate compilation they are instantiated once, in
// src/tessel_templates.cpp, and declared `extern template` for everyone else (a header lists its
// own in a TESSEL_..._TEMPLATES(prefix, B) macro, used with `extern` under TESSEL_EXTERN_TEMPLATES
// and with nothing in src/tessel_templates.cpp). Headers only, each file instantiates what it uses.
#if defined(TESSEL_SEPARATE_COMPILATION) && !defined(TESSEL_SOURCE)
#define TESSEL_EXTERN_TEMPLATES 1
// The backend those declarations name (backend/host.hpp defines it).
namespace tessel::backend {
struct host;
}  // namespace tessel::backend
#else
#define TESSEL_EXTERN_TEMPLATES 0
#endif

// The same templates over the CUDA backend (its model and trainer parts, saving, the optimizer)
// are compiled once too in a program linked with tessel::cuda_compiled (src/tessel_cuda.cpp, which
// defines TESSEL_CUDA_SEPARATE_COMPILATION for its users): declared `extern template` for them.
#if TESSEL_EXTERN_TEMPLATES && defined(TESSEL_CUDA_SEPARATE_COMPILATION) && \
    !defined(TESSEL_CUDA_SOURCE)
#define TESSEL_EXTERN_CUDA_TEMPLATES 1
namespace tessel::backend {
struct cuda;
}  // namespace tessel::backend
namespace tessel::comm {
class cuda_communicator;
}  // namespace tessel::comm
#else
#define TESSEL_EXTERN_CUDA_TEMPLATES 0
#endif
