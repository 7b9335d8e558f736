// Raw OpenBLAS sgemm (through the Fortran BLAS interface) on row-major matrices, for the
// benchmarks that compare tessel's steps with the same GEMMs alone. Link BLAS::BLAS.
#pragma once

extern "C" void openblas_set_num_threads(int);
extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b,
                       const int* ldb, const float* beta, float* c, const int* ldc);

namespace bench {

// Row-major C(m x n) = op(A) op(B) through column-major sgemm: C^T = op(B)^T op(A)^T.
inline void row_major_sgemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b,
                            float* c) {
  const float one = 1.0f, zero = 0.0f;
  const int lda = ta ? m : k, ldb = tb ? k : n;
  sgemm_(tb ? "T" : "N", ta ? "T" : "N", &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &n);
}

}  // namespace bench
