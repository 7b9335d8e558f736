// cuda_context: the CUDA backend's process-wide state (its GPU, its stream, its cuBLAS handle)
// and error checks, apart from backend/cuda.hpp so that the communicators of GPU memory
// (comm/cuda_communicator.hpp) and the backend can both use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../core/errors.hpp"
#include "gemm_plans.hpp"
#include "memory_counters.hpp"

namespace tessel::backend {

namespace cuda_detail {

// Throws a runtime_error naming the call that failed and what to do.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::string hint;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    hint = " (no usable NVIDIA GPU here: run on a machine with one and its driver, or train on "
           "the host backend: backend::host, or build with TESSEL_FORCE_HOST defined to make it "
           "the default)";
  else if (e == cudaErrorMemoryAllocation)
    hint = " (the GPU's memory is full: use a smaller batch or model, or shard it over more "
           "devices)";
  throw runtime_error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(e) + ": " +
                      cudaGetErrorString(e) + hint);
}
inline void check(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return;
  throw runtime_error(std::string("cuBLAS: ") + what + " failed with status " +
                      std::to_string(static_cast<int>(e)));
}

// Uploads go through a ring of page-locked buffers: a batch is copied into the next one and its
// transfer queued asynchronously (a copy from pageable memory makes the driver stage it, the
// host waiting), so the host goes on to queue the step while the batch crosses. A buffer is
// reused once the transfer queued from it is done (its event). Uploads larger than
// `max_bytes` (weights being set) go directly from pageable memory.
class upload_ring {
 public:
  static constexpr std::size_t slots = 4, max_bytes = std::size_t{8} << 20;
  upload_ring() = default;
  upload_ring(const upload_ring&) = delete;
  upload_ring& operator=(const upload_ring&) = delete;
  ~upload_ring() { release(); }
  // A page-locked copy of `bytes` bytes of src, valid until the transfer queued from it and
  // marked by done(stream) has run.
  void* stage(const void* src, std::size_t bytes) {
    slot& s = slots_[next_];
    if (s.event != nullptr) check(cudaEventSynchronize(s.event), "cudaEventSynchronize");
    if (s.bytes < bytes) {
      if (s.host != nullptr) cudaFreeHost(s.host);
      s.host = nullptr;
      s.bytes = 0;
      check(cudaMallocHost(&s.host, bytes), "cudaMallocHost (upload buffer)");
      s.bytes = bytes;
    }
    if (s.event == nullptr)
      check(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming), "cudaEventCreate");
    std::memcpy(s.host, src, bytes);
    return s.host;
  }
  // Marks the end of the transfer just queued from the buffer stage() returned.
  void done(cudaStream_t stream) {
    check(cudaEventRecord(slots_[next_].event, stream), "cudaEventRecord");
    next_ = (next_ + 1) % slots;
  }
  void release() noexcept {
    for (slot& s : slots_) {
      if (s.event != nullptr) {
        cudaEventSynchronize(s.event);
        cudaEventDestroy(s.event);
      }
      if (s.host != nullptr) cudaFreeHost(s.host);
      s = {};
    }
  }

 private:
  struct slot {
    void* host = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t event = nullptr;
  };
  slot slots_[slots];
  std::size_t next_ = 0;
};

// Dense's forward through cuBLASLt with the bias in the GEMM's epilogue (one kernel instead of a
// GEMM and a bias kernel; ReLU runs after it: backend/gemm_plans.hpp says why): row-major
// y (m x n) = x (m x k) w (k x n) is column-major y^T = w^T x^T, where the bias is a per-row
// vector of y^T, what cuBLASLt's bias epilogue adds. One plan (descriptors and the heuristic's
// algorithm, chosen for the pointers' alignment) per shape and alignment, kept; a shape cuBLASLt
// finds no algorithm for, or a call it fails, returns false for the caller's fallback
// (cublasSgemm, then the epilogue kernel).
class lt_dense {
 public:
  static constexpr std::size_t workspace_bytes = std::size_t{32} << 20;
  lt_dense() = default;
  lt_dense(const lt_dense&) = delete;
  lt_dense& operator=(const lt_dense&) = delete;
  ~lt_dense() { release(); }

  // y = x w (+ bias, with epilogue::bias).
  bool run(const float* x, std::size_t ldx, const float* w, std::size_t ldw, const float* bias,
           gemm_plans::epilogue e, float* y, std::size_t ldy, std::size_t m, std::size_t n,
           std::size_t k, bool tf32, cudaStream_t stream) {
    if (disabled_) return false;
    if (handle_ == nullptr) {
      if (cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS ||
          cudaMalloc(&workspace_, workspace_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        disabled_ = true;
        return false;
      }
    }
    const key want = gemm_plans::make_key(x, ldx, w, ldw, bias, y, ldy, m, n, k, e, tf32);
    plan* p = nullptr;
    for (plan& q : plans_)
      if (q.k == want) p = &q;
    if (p == nullptr) {
      plans_.emplace_back();
      p = &plans_.back();
      p->k = want;
      if (!make(*p, bias)) {
        destroy(*p);
        plans_.pop_back();
        return false;
      }
    }
    if (e == gemm_plans::epilogue::bias &&
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                       sizeof bias) != CUBLAS_STATUS_SUCCESS)
      return false;
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(handle_, p->desc, &one, w, p->a, x, p->b, &zero, y, p->c, y, p->c,
                          &p->algo, workspace_, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
  }
  void release() noexcept {
    for (plan& p : plans_) destroy(p);
    plans_.clear();
    if (workspace_ != nullptr) cudaFree(workspace_);
    workspace_ = nullptr;
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = nullptr;
  }

 private:
  using key = gemm_plans::key;
  struct plan {
    key k{};
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // The algorithm is chosen with the bias pointer set (its alignment is in the key).
  bool make(plan& p, const float* bias) {
    const key& k = p.k;
    const cublasComputeType_t compute = k.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
      return false;
    const cublasLtEpilogue_t e = k.gemm_epilogue == gemm_plans::epilogue::bias
                                     ? CUBLASLT_EPILOGUE_BIAS
                                     : CUBLASLT_EPILOGUE_DEFAULT;
    // Column-major: A = w^T (n x k, ld ldw), B = x^T (k x m, ld ldx), C = y^T (n x m, ld ldy).
    if (cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e) !=
            CUBLAS_STATUS_SUCCESS ||
        (k.gemm_epilogue == gemm_plans::epilogue::bias &&
         cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias) != CUBLAS_STATUS_SUCCESS) ||
        cublasLtMatrixLayoutCreate(&p.a, CUDA_R_32F, k.n, k.k, static_cast<std::int64_t>(k.ldw)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p.b, CUDA_R_32F, k.k, k.m, static_cast<std::int64_t>(k.ldx)) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p.c, CUDA_R_32F, k.n, k.m, static_cast<std::int64_t>(k.ldy)) !=
            CUBLAS_STATUS_SUCCESS)
      return false;
    cublasLtMatmulPreference_t pref = nullptr;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return false;
    const std::size_t ws = workspace_bytes;
    cublasLtMatmulHeuristicResult_t found{};
    int count = 0;
    // The algorithm must work at the pointers' alignment (A = w, B = x, C = D = y).
    auto align = [&](cublasLtMatmulPreferenceAttributes_t attr, std::uint32_t bytes) {
      return cublasLtMatmulPreferenceSetAttribute(pref, attr, &bytes, sizeof bytes) ==
             CUBLAS_STATUS_SUCCESS;
    };
    const bool ok =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.align_w) &&
        align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.align_x) &&
        align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.align_y) &&
        align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.align_y) &&
        cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &found,
                                       &count) == CUBLAS_STATUS_SUCCESS &&
        count > 0;
    cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p.algo = found.algo;
    return ok;
  }
  static void destroy(plan& p) noexcept {
    if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c != nullptr) cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
    p = {};
  }
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::vector<plan> plans_;
  bool disabled_ = false;
};

// This process's index among the processes on its machine, set by tessel::initialize from MPI
// (backend::cuda::place_on_node); -1 until then.
inline int& node_rank() {
  static int r = -1;
  return r;
}

// The process's device, stream and cuBLAS handle, made on first use.
struct context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  bool allow_tf32 = false;
  upload_ring uploads;
  lt_dense dense;
  // Dense forwards run through cuBLASLt (fused) and through its fallback, a GEMM then the bias
  // and activation kernel (which a failing cuBLASLt plan would hide: the GPU tests check these).
  std::size_t fused_dense = 0, unfused_dense = 0;

  context() {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0) check(cudaErrorNoDevice, "cudaGetDeviceCount");
    device = (node_rank() >= 0 ? node_rank() : launcher_local_rank()) % count;
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Freed blocks stay in the pool for the next step's tensors instead of going back to the
    // driver at each synchronisation (the pool's default release threshold is 0).
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute");
    device_memory_counted().store(true, std::memory_order_relaxed);  // get_memory_info("GPU:0")
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, stream), "cublasSetStream");
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() {
    uploads.release();
    dense.release();
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  // Without tessel::initialize: the local rank the launcher exports (torchrun, Open MPI, MPICH).
  static int launcher_local_rank() {
    for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})
      if (const char* v = std::getenv(name)) {
        char* end = nullptr;
        const long r = std::strtol(v, &end, 10);
        if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
      }
    return 0;
  }
};
inline std::unique_ptr<context>& context_slot() {
  static std::unique_ptr<context> c;
  return c;
}
inline context& ctx() {
  auto& c = context_slot();
  if (!c) c = std::make_unique<context>();
  return *c;
}

// Device memory from the stream-ordered pool, given back in stream order when the last view of
// it goes: on the process's stream as it is then. One that outlives the context (a tensor kept
// past the initialize guard, whose end destroys the stream) is freed by cudaFree, which waits
// for the device, rather than queued on a destroyed stream.
inline void free_device(void* p) noexcept {
  if (const std::unique_ptr<context>& c = context_slot())
    cudaFreeAsync(p, c->stream);
  else
    cudaFree(p);
}
// Counted in device_memory_counters (get_memory_info("GPU:0")): the bytes asked of the pool.
template <class T>
std::shared_ptr<T> allocate(std::size_t n) {
  if (n == 0) return {};
  context& c = ctx();
  void* p = nullptr;
  check(cudaMallocAsync(&p, n * sizeof(T), c.stream), "cudaMallocAsync");
  device_memory_counters().add(n * sizeof(T));
  return std::shared_ptr<T>(static_cast<T*>(p), [n](T* q) {
    device_memory_counters().remove(n * sizeof(T));
    free_device(q);
  });
}
// The process's stream: every kernel, copy and GEMM of the backend is queued on it.
inline cudaStream_t stream() { return ctx().stream; }

}  // namespace cuda_detail

}  // namespace tessel::backend
