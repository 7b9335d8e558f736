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

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../core/errors.hpp"

namespace tessel::backend {

namespace cuda_detail {

// Throws a runtime_error naming the call that failed and what to do.
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::string hint;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
    hint = " (no usable NVIDIA GPU here: run on a machine with one and its driver, or train on "
           "the host backend, backend::host)";
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

// The process's device, stream and cuBLAS handle, made on first use.
struct context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  bool allow_tf32 = false;
  upload_ring uploads;

  context() {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0) check(cudaErrorNoDevice, "cudaGetDeviceCount");
    device = local_rank() % count;
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Freed blocks stay in the pool for the next step's tensors instead of going back to the
    // driver at each synchronisation (the pool's default release threshold is 0).
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute");
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, stream), "cublasSetStream");
    check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() {
    uploads.release();
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  static int local_rank() {
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
// it goes.
template <class T>
std::shared_ptr<T> allocate(std::size_t n) {
  if (n == 0) return {};
  context& c = ctx();
  void* p = nullptr;
  check(cudaMallocAsync(&p, n * sizeof(T), c.stream), "cudaMallocAsync");
  cudaStream_t s = c.stream;
  return std::shared_ptr<T>(static_cast<T*>(p), [s](T* q) { cudaFreeAsync(q, s); });
}
// The process's stream: every kernel, copy and GEMM of the backend is queued on it.
inline cudaStream_t stream() { return ctx().stream; }

}  // namespace cuda_detail

}  // namespace tessel::backend
