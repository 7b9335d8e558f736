#pragma once
// How tessel::ps's non-template code is compiled, as core/compilation.hpp does for the library:
// in every translation unit that uses it (headers only), or once, in the tessel::ps library
// (src/ps.cpp, which defines TESSEL_PS_SOURCE; its users compile with
// TESSEL_PS_SEPARATE_COMPILATION). A header declares such a function `TESSEL_PS_INLINE` and
// defines it in a block `#if TESSEL_PS_DEFINITIONS ... #endif` at its end.
#if defined(TESSEL_PS_SEPARATE_COMPILATION)
#define TESSEL_PS_INLINE
#if defined(TESSEL_PS_SOURCE)
#define TESSEL_PS_DEFINITIONS 1
#else
#define TESSEL_PS_DEFINITIONS 0
#endif
#else
#define TESSEL_PS_INLINE inline
#define TESSEL_PS_DEFINITIONS 1
#endif
