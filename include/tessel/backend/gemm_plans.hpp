// What the CUDA backend's fused dense GEMM (cuBLASLt, backend/cuda_context.hpp) decides on the
// host, without CUDA, so that the CPU test suite checks it (tests/unit/gemm_plans_test.cpp):
// - which epilogue runs in the GEMM and which activation after it: the bias in the epilogue, and
//   ReLU never there, since cuBLASLt's RELU epilogue makes NaN 0 where the host backend, Keras
//   and JAX keep NaN (max(NaN, 0) is NaN): the ReLU body runs after the GEMM instead;
// - the alignment of each pointer, which keys a plan and sets its MIN_ALIGNMENT preferences (as
//   PyTorch's cuBLASLt calls do): a row-range view starts at any row, and a plan chosen for
//   256-byte-aligned pointers may fault on others with a sticky "misaligned address". The bias
//   pointer's alignment keys the plan too (the plan is chosen with the bias pointer set);
// - cuBLAS's sizes: its classic GEMM takes int, so a size past 2^31 - 1 is an error naming it,
//   not a silent wrap.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/activations.hpp"
#include "../core/errors.hpp"

namespace tessel::backend::gemm_plans {

// The largest power of two, at most 256, that divides the pointer's address (256 for null).
constexpr std::uint32_t max_alignment = 256;
inline std::uint32_t alignment_of(const void* p) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 1;
  while (align < max_alignment && (a & (2u * align - 1)) == 0) align *= 2;
  return a == 0 ? max_alignment : align;
}

enum class epilogue : std::uint8_t { none, bias };

// How dense's y = activation(x w + bias) runs: fused (one cuBLASLt call with `epilogue`, then
// the activation's body when `activation_after`), or not (a GEMM, then the bias and activation
// kernel).
struct dense_choice {
  bool fused = false;
  epilogue gemm_epilogue = epilogue::none;
  bool activation_after = false;
};
constexpr dense_choice choose_dense(bool has_bias, activation_kind a) noexcept {
  if (a != activation_kind::linear && a != activation_kind::relu) return {};
  return {true, has_bias ? epilogue::bias : epilogue::none, a == activation_kind::relu};
}

// A plan's key: the shapes, the leading dimensions, the epilogue, TF32, and the alignment of
// x, w, y and the bias (the bias pointer itself is set per call; without the bias epilogue its
// alignment does not matter and keys as 256).
struct key {
  std::size_t m = 0, n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
  epilogue gemm_epilogue = epilogue::none;
  bool tf32 = false;
  std::uint32_t align_x = max_alignment, align_w = max_alignment, align_y = max_alignment,
                align_bias = max_alignment;
  bool operator==(const key&) const = default;
};
inline key make_key(const float* x, std::size_t ldx, const float* w, std::size_t ldw,
                    const float* bias, const float* y, std::size_t ldy, std::size_t m,
                    std::size_t n, std::size_t k, epilogue e, bool tf32) noexcept {
  return {m,
          n,
          k,
          ldx,
          ldw,
          ldy,
          e,
          tf32,
          alignment_of(x),
          alignment_of(w),
          alignment_of(y),
          e == epilogue::bias ? alignment_of(bias) : max_alignment};
}

// `v` as the int cuBLAS's GEMM takes (`what` names it: "m", "lda", ...), or a value_error.
inline int blas_int(std::size_t v, const char* what) {
  if (v > static_cast<std::size_t>(INT_MAX))
    throw value_error(std::string("tessel: cuBLAS's GEMM takes int sizes, and its ") + what +
                      " would be " + std::to_string(v) + ", past " + std::to_string(INT_MAX) +
                      ": split the matrix (a smaller batch, or the layer sharded over devices)");
  return static_cast<int>(v);
}

}  // namespace tessel::backend::gemm_plans
