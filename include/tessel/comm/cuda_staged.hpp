// cuda_staged_communicator: the CUDA backend's communicator (backend::cuda::communicator) for
// collectives between processes whose data is in GPU memory, through MPI on host buffers: the
// path when several processes share one GPU (NCCL refuses two ranks on one device) and for GPUs
// NCCL cannot reach. A span in device memory is copied into page-locked host memory once the
// process's stream has computed it, reduced or gathered there by MPI (comm::communicator, with its
// watchdog), and copied back when the collective completes (at wait(), or at a test() that finds
// it done); a span in host memory (the step's loss and metric sums) goes to MPI as it is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
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

// What a staged collective copies back to the GPU when it completes.
struct copy_back {
  std::shared_ptr<void> host;  // the staging buffer (kept until the copy is done)
  void* device = nullptr;
  std::size_t bytes = 0;
  void run() {
    if (device == nullptr || bytes == 0) return;
    const cudaStream_t s = backend::cuda_detail::stream();
    backend::cuda_detail::check(
        cudaMemcpyAsync(device, host.get(), bytes, cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync (collective result to the GPU)");
    backend::cuda_detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    device = nullptr;
    host.reset();
  }
};

}  // namespace cuda_staging

// A non-blocking staged collective: the MPI request, then the copy back to the GPU.
class staged_request {
 public:
  staged_request() = default;
  staged_request(request r, cuda_staging::copy_back back)
      : r_(std::move(r)), back_(std::move(back)) {}
  void wait() {
    r_.wait();
    back_.run();
  }
  bool test() {
    if (!r_.test()) return false;
    back_.run();
    return true;
  }
  [[nodiscard]] bool pending() const noexcept { return r_.pending() || back_.device != nullptr; }

 private:
  request r_;
  cuda_staging::copy_back back_;
};

class cuda_staged_communicator {
 public:
  using request = staged_request;

  cuda_staged_communicator() = default;
  cuda_staged_communicator(MPI_Comm c, bool owned, std::string_view label = "the world")
      : mpi_(c, owned, label) {}

  [[nodiscard]] int rank() const noexcept { return mpi_.rank(); }
  [[nodiscard]] int size() const noexcept { return mpi_.size(); }
  [[nodiscard]] const communicator& mpi() const noexcept { return mpi_; }
  void barrier() const { mpi_.barrier(); }

  // ---- blocking -------------------------------------------------------------------------------
  template <class T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) const {
    if (!mpi_.uses_mpi() || data.empty()) return;
    staged<T> s(*this, data);
    mpi_.all_reduce(s.host(), op);
    s.back.run();
  }
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out);
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    mpi_.all_gather(hin, s.host());
    s.back.run();
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out);
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    mpi_.reduce_scatter(hin, s.host());
    s.back.run();
  }
  template <class T>
  void broadcast(std::span<T> data, int root = 0) const {
    if (!mpi_.uses_mpi() || data.empty()) return mpi_.broadcast(data, root);
    staged<T> s(*this, data);
    mpi_.broadcast(s.host(), root);
    s.back.run();
  }
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out);
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    mpi_.all_to_all(hin, s.host());
    s.back.run();
  }

  // ---- non-blocking ---------------------------------------------------------------------------
  template <class T>
  [[nodiscard]] request iall_reduce(std::span<T> data) const {
    if (!mpi_.uses_mpi() || data.empty()) return {};
    staged<T> s(*this, data);
    return request(mpi_.iall_reduce(s.host()), std::move(s.back));
  }
  template <class T>
  [[nodiscard]] request iall_gather(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    return request(mpi_.iall_gather(hin, s.host()), std::move(s.back));
  }
  template <class T>
  [[nodiscard]] request ireduce_scatter(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    return request(mpi_.ireduce_scatter(hin, s.host()), std::move(s.back));
  }
  template <class T>
  [[nodiscard]] request ibroadcast(std::span<T> data, int root = 0) const {
    if (!mpi_.uses_mpi() || data.empty()) return request(mpi_.ibroadcast(data, root), {});
    staged<T> s(*this, data);
    return request(mpi_.ibroadcast(s.host(), root), std::move(s.back));
  }
  template <class T>
  [[nodiscard]] request iall_to_all(std::span<const T> in, std::span<T> out) const {
    if (!mpi_.uses_mpi()) return local_copy(in, out), request{};
    const std::span<const T> hin = stage_in(in);
    staged<T> s(*this, out, false);
    return request(mpi_.iall_to_all(hin, s.host()), std::move(s.back));
  }

 private:
  // `data` on the host as MPI sees it: itself, or a staging buffer holding its values (`load`)
  // whose contents go back to `data` when back.run() is called.
  template <class T>
  struct staged {
    std::span<T> data;
    cuda_staging::copy_back back;
    staged(const cuda_staged_communicator& c, std::span<T> d, bool load = true) : data(d) {
      if (!cuda_staging::on_device(d.data())) return;
      back = {c.pool().acquire(d.size_bytes()), d.data(), d.size_bytes()};
      if (load) c.to_host(back.host.get(), d.data(), d.size_bytes());
    }
    std::span<T> host() const {
      return back.device == nullptr ? data
                                    : std::span<T>(static_cast<T*>(back.host.get()), data.size());
    }
  };
  // A device input copied into a staging buffer that lives until the next staged input; a host
  // input as it is. Held in `inputs_` because MPI reads it until the collective completes.
  template <class T>
  std::span<const T> stage_in(std::span<const T> in) const {
    if (!cuda_staging::on_device(in.data())) return in;
    std::shared_ptr<void> h = pool().acquire(in.size_bytes());
    to_host(h.get(), in.data(), in.size_bytes());
    const std::lock_guard lock(state_->mutex);
    state_->inputs.push_back(h);
    if (state_->inputs.size() > 64) state_->inputs.erase(state_->inputs.begin());
    return {static_cast<const T*>(h.get()), in.size()};
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
  // Waits for the kernels that compute the data, then copies it to the host.
  void to_host(void* host, const void* device, std::size_t bytes) const {
    const cudaStream_t s = backend::cuda_detail::stream();
    backend::cuda_detail::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s),
                                "cudaMemcpyAsync (collective input to the host)");
    backend::cuda_detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  static void wait_for_stream() {
    backend::cuda_detail::check(cudaStreamSynchronize(backend::cuda_detail::stream()),
                                "cudaStreamSynchronize");
  }
  cuda_staging::pinned_pool& pool() const { return *state_->pool; }

  struct state {
    std::shared_ptr<cuda_staging::pinned_pool> pool = std::make_shared<cuda_staging::pinned_pool>();
    std::mutex mutex;
    std::vector<std::shared_ptr<void>> inputs;
  };
  communicator mpi_;
  std::unique_ptr<state> state_ = std::make_unique<state>();
};

static_assert(communicator_like<cuda_staged_communicator>);

}  // namespace tessel::comm
