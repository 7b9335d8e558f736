// cuda_communicator: the CUDA backend's communicator (comm::communicator_of<backend::cuda>): collectives
// between processes whose data may be in GPU memory. Which path runs, per group of processes (the
// world, or the devices along one mesh axis), decided when the group is made:
// - NCCL (comm/nccl.hpp), on GPU memory, where every process of the group has a GPU of its own
//   and NCCL is built in (TESSEL_HAVE_NCCL), unless TESSEL_NCCL=0 is set;
// - otherwise MPI on host buffers: several processes sharing one GPU (NCCL refuses two ranks on
//   one device, "Duplicate GPU detected"), GPUs NCCL cannot reach, or TESSEL_NCCL=0. A span in
//   GPU memory is copied into page-locked host memory once the process's stream has computed it,
//   reduced or gathered there by MPI (comm::communicator, with its watchdog), and copied back
//   when the collective completes (at wait(), or at a test() that finds it done): comm/staging.hpp,
//   with page-locked buffers and cudaMemcpy as its memory (tested on host memory in
//   tests/mpi/staging_test.cpp).
// A span in host memory (the step's loss and metric sums) goes to MPI as it is on either path.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../backend/cuda_context.hpp"
#include "communicator.hpp"
#include "concept.hpp"
#include "nccl.hpp"
#include "staging.hpp"

namespace tessel::backend {
struct cuda;  // backend/cuda.hpp; named here for communicator_of alone
}  // namespace tessel::backend

namespace tessel::comm {

namespace cuda_staging {

// Whether p is in GPU memory (not host or managed memory; an unknown pointer, or a process with
// no driver, counts as host memory).
inline bool on_device(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // clears the error for the next CUDA call
    return false;
  }
  return a.type == cudaMemoryTypeDevice;
}

// Page-locked host buffers, reused: a collective in flight holds one until it is done.
class pinned_pool : public std::enable_shared_from_this<pinned_pool> {
 public:
  std::shared_ptr<void> acquire(std::size_t bytes) {
    void* p = nullptr;
    {
      const std::lock_guard lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->second >= bytes) {
          p = it->first;
          bytes = it->second;
          free_.erase(it);
          break;
        }
    }
    if (p == nullptr)
      backend::cuda_detail::check(cudaMallocHost(&p, bytes), "cudaMallocHost (staging buffer)");
    std::weak_ptr<pinned_pool> self = weak_from_this();
    return std::shared_ptr<void>(p, [self, bytes](void* q) {
      if (auto pool = self.lock()) {
        const std::lock_guard lock(pool->mutex_);
        pool->free_.emplace_back(q, bytes);
      } else {
        cudaFreeHost(q);
      }
    });
  }
  ~pinned_pool() {
    for (auto& [p, n] : free_) cudaFreeHost(p);
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<void*, std::size_t>> free_;
};

// The staged path's memory (comm/staging.hpp): GPU memory, page-locked host buffers, and copies
// on the process's stream once it has computed the data.
struct device_memory {
  std::shared_ptr<pinned_pool> pool = std::make_shared<pinned_pool>();
  bool on_device(const void* p) const { return cuda_staging::on_device(p); }
  std::shared_ptr<void> acquire(std::size_t bytes) { return pool->acquire(bytes); }
  void to_host(void* host, const void* device, std::size_t bytes) {
    copy(host, device, bytes, cudaMemcpyDeviceToHost,
         "cudaMemcpyAsync (collective input to the host)");
  }
  void to_device(void* device, const void* host, std::size_t bytes) {
    copy(device, host, bytes, cudaMemcpyHostToDevice,
         "cudaMemcpyAsync (collective result to the GPU)");
  }

 private:
  static void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                   const char* what) {
    const cudaStream_t s = backend::cuda_detail::stream();
    backend::cuda_detail::check(cudaMemcpyAsync(to, from, bytes, kind, s), what);
    backend::cuda_detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
};

}  // namespace cuda_staging

// A non-blocking collective of cuda_communicator: a staged MPI collective (comm/staging.hpp), or
// (NCCL) the event that ends the collective on NCCL's stream.
class cuda_request {
 public:
  cuda_request() = default;
  explicit cuda_request(staging::request<cuda_staging::device_memory> r) : r_(std::move(r)) {}
  cuda_request(const nccl_group* g, cudaEvent_t done, const char* op)
      : group_(g), done_(done), op_(op) {}
  cuda_request(cuda_request&& o) noexcept
      : r_(std::move(o.r_)),
        group_(std::exchange(o.group_, nullptr)),
        done_(std::exchange(o.done_, nullptr)),
        op_(o.op_) {}
  cuda_request& operator=(cuda_request&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      r_ = std::move(o.r_);
      group_ = std::exchange(o.group_, nullptr);
      done_ = std::exchange(o.done_, nullptr);
      op_ = o.op_;
    }
    return *this;
  }
  cuda_request(const cuda_request&) = delete;
  cuda_request& operator=(const cuda_request&) = delete;
  ~cuda_request() { finish_quietly(); }

  void wait() {
    if (done_ != nullptr) {
      group_->wait(std::exchange(done_, nullptr), op_);
      return;
    }
    r_.wait();
  }
  bool test() {
    if (done_ != nullptr) {
      if (cudaEventQuery(done_) == cudaErrorNotReady) return false;
      group_->wait(std::exchange(done_, nullptr), op_);  // complete: checks and orders the stream
      return true;
    }
    return r_.test();
  }
  [[nodiscard]] bool pending() const noexcept {
    return done_ != nullptr || r_.pending();
  }

 private:
  // A request dropped before it was waited for is waited for (its buffers may still be in use).
  void finish_quietly() noexcept {
    try {
      if (pending()) wait();
    } catch (...) {
    }
  }
  staging::request<cuda_staging::device_memory> r_;
  const nccl_group* group_ = nullptr;
  cudaEvent_t done_ = nullptr;
  const char* op_ = "";
};

class cuda_communicator {
 public:
  using request = cuda_request;

  cuda_communicator() = default;
  // Collective over c's processes: they agree on NCCL or MPI (see the top of this file).
  cuda_communicator(MPI_Comm c, bool owned, std::string_view label = "the world")
      : mpi_(c, owned, label) {
#if defined(TESSEL_HAVE_NCCL)
    if (mpi_.uses_mpi() && every_process_has_its_own_gpu())
      state_->nccl = std::make_unique<nccl_group>(c, rank(), size(), std::string(label),
                                                  mpi_.tag("ncclCommInitRank"));
#endif
  }
  // Whether this group's collectives on GPU memory go through NCCL.
  [[nodiscard]] bool uses_nccl() const noexcept {
#if defined(TESSEL_HAVE_NCCL)
    return state_->nccl != nullptr;
#else
    return false;
#endif
  }

  [[nodiscard]] int rank() const noexcept { return mpi_.rank(); }
  [[nodiscard]] int size() const noexcept { return mpi_.size(); }
  [[nodiscard]] const communicator& mpi() const noexcept { return mpi_; }
  void barrier() const { mpi_.barrier(); }

  // ---- blocking: on NCCL too the host waits for the collective (polling its errors and the
  //      timeout), so that a failed process never leaves the others hanging later ----------------
  // all_reduce takes a reduction (the non-blocking one only sums).
  template <class T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) const {
    if (!mpi_.uses_mpi() || data.empty()) return;
    if (auto* g = nccl_for(data.data()))
      return g->wait(g->all_reduce(data.data(), data.data(), data.size(), op), "all_reduce");
    staged().all_reduce(data, op);
  }
  // The others are their non-blocking forms, waited for.
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) const {
    iall_gather(in, out).wait();
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) const {
    ireduce_scatter(in, out).wait();
  }
  template <class T>
  void broadcast(std::span<T> data, int root = 0) const {
    ibroadcast(data, root).wait();
  }
  template <class T>
  void reduce(std::span<T> data, int root = 0) const {
    ireduce(data, root).wait();
  }
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) const {
    iall_to_all(in, out).wait();
  }
  // out = in, on the GPU or the host alike (cudaMemcpyDefault), ordered after the compute
  // stream's work and waited for: a slice or an all_reduce into another buffer, as
  // runtime/collectives.hpp runs them, never touches GPU memory from the host.
  template <class T>
  void copy(std::span<const T> in, std::span<T> out) const {
    if (in.size() != out.size()) detail::copy_size_error(in.size(), out.size());
    const auto* from = reinterpret_cast<const std::byte*>(in.data());
    const auto* to = reinterpret_cast<const std::byte*>(out.data());
    if (from != to && from < to + out.size_bytes() && to < from + in.size_bytes()) {
      // Overlapping (a block moved within its buffer): cudaMemcpy's result would be undefined.
      std::vector<T> staged(in.size());
      local_copy(in, std::span<T>(staged));
      local_copy(std::span<const T>(staged), out);
      return;
    }
    local_copy(in, out);
  }

  // ---- non-blocking ---------------------------------------------------------------------------
  template <class T>
  [[nodiscard]] request iall_reduce(std::span<T> data) const {
    if (!mpi_.uses_mpi() || data.empty()) return {};
    if (auto* g = nccl_for(data.data()))
      return request(g, g->all_reduce(data.data(), data.data(), data.size(), reduce_op::sum),
                     "all_reduce");
    return request(staged().iall_reduce(data));
  }
  template <class T>
  [[nodiscard]] request iall_gather(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    if (auto* g = nccl_for(in.data(), out.data()); g && out.size() == in.size() * size())
      return request(g, g->all_gather(in.data(), out.data(), in.size()), "all_gather");
    return request(staged().iall_gather(in, out));
  }
  template <class T>
  [[nodiscard]] request ireduce_scatter(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    if (auto* g = nccl_for(in.data(), out.data()); g && in.size() == out.size() * size())
      return request(g, g->reduce_scatter(in.data(), out.data(), out.size()), "reduce_scatter");
    return request(staged().ireduce_scatter(in, out));
  }
  template <class T>
  [[nodiscard]] request ibroadcast(std::span<T> data, int root = 0) const {
    if (!mpi_.uses_mpi() || data.empty())
      return request(
          staging::request<cuda_staging::device_memory>(mpi_.ibroadcast(data, root), {}));
    if (auto* g = nccl_for(data.data()); g && root >= 0 && root < size())
      return request(g, g->broadcast(data.data(), data.size(), root), "broadcast");
    return request(staged().ibroadcast(data, root));
  }
  template <class T>
  [[nodiscard]] request ireduce(std::span<T> data, int root = 0) const {
    if (!mpi_.uses_mpi() || data.empty())
      return request(staging::request<cuda_staging::device_memory>(mpi_.ireduce(data, root), {}));
    if (auto* g = nccl_for(data.data()); g && root >= 0 && root < size())
      return request(g, g->reduce(data.data(), data.size(), root), "reduce");
    return request(staged().ireduce(data, root));
  }
  template <class T>
  [[nodiscard]] request iall_to_all(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    if (auto* g = nccl_for(in.data(), out.data());
        g && in.size() == out.size() && in.size() % static_cast<std::size_t>(size()) == 0)
      return request(g, g->all_to_all(in.data(), out.data(), in.size() / size()), "all_to_all");
    return request(staged().iall_to_all(in, out));
  }

 private:
  // The MPI path on host copies of GPU memory.
  staging::collectives<cuda_staging::device_memory> staged() const {
    return {mpi_, state_->memory};
  }
  // Host and device spans alike, without MPI (a group of one).
  template <class T>
  void local_copy(std::span<const T> in, std::span<T> out) const {
    if (in.data() == out.data() || in.empty()) return;
    backend::cuda_detail::check(
        cudaMemcpyAsync(out.data(), in.data(), in.size_bytes(), cudaMemcpyDefault,
                        backend::cuda_detail::stream()),
        "cudaMemcpyAsync (collective of one process)");
    wait_for_stream();
  }
  static void wait_for_stream() {
    backend::cuda_detail::check(cudaStreamSynchronize(backend::cuda_detail::stream()),
                                "cudaStreamSynchronize");
  }
#if defined(TESSEL_HAVE_NCCL)
  // The NCCL group when this group has one and every span is in GPU memory (sizes the MPI path
  // would refuse go there, for its error).
  const nccl_group* nccl_for(const void* a, const void* b = nullptr) const {
    const nccl_group* g = state_->nccl.get();
    if (g == nullptr || !cuda_staging::on_device(a)) return nullptr;
    return b == nullptr || cuda_staging::on_device(b) ? g : nullptr;
  }
  // Every process has a GPU and none shares it with another process of the group, and none set
  // TESSEL_NCCL=0: each sends its GPU's UUID and its two flags, and all decide alike.
  bool every_process_has_its_own_gpu() const {
    // This process's three words, then every process's, in one vector (GCC 12 took a stack
    // array here for a freed heap object: -Wfree-nonheap-object, a false positive).
    std::vector<std::uint64_t> words(3 * (static_cast<std::size_t>(size()) + 1), 0);
    std::uint64_t* mine = words.data();
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, backend::cuda_detail::ctx().device) == cudaSuccess) {
        std::memcpy(mine, p.uuid.bytes, 16);
        mine[2] |= 1u;
      }
    } else {
      (void)cudaGetLastError();
    }
    if (!environment::nccl().value_or(true))
      mine[2] |= 2u;
    const std::span<std::uint64_t> all(words.data() + 3, 3 * static_cast<std::size_t>(size()));
    mpi_.all_gather(std::span<const std::uint64_t>(mine, 3), all);
    for (int p = 0; p < size(); ++p) {
      const std::uint64_t* a = all.data() + 3 * static_cast<std::size_t>(p);
      if (a[2] != 1u) return false;  // no GPU, or NCCL turned off
      for (int q = 0; q < p; ++q) {
        const std::uint64_t* b = all.data() + 3 * static_cast<std::size_t>(q);
        if (a[0] == b[0] && a[1] == b[1]) return false;  // two processes on one GPU
      }
    }
    return true;
  }
#else
  static const nccl_group* nccl_for(const void*, const void* = nullptr) { return nullptr; }
#endif

  struct state {
    cuda_staging::device_memory memory;
#if defined(TESSEL_HAVE_NCCL)
    std::unique_ptr<nccl_group> nccl;
#endif
  };
  communicator mpi_;
  std::unique_ptr<state> state_ = std::make_unique<state>();
};

static_assert(communicator_like<cuda_communicator>);

// The mesh axes of a model on backend::cuda communicate through this communicator.
template <>
struct communicator_of<backend::cuda> {
  using type = cuda_communicator;
};

}  // namespace tessel::comm
