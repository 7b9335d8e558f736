// Staged collectives: MPI on host copies of data that lives in device memory. A span in device
// memory is copied into a host buffer (once the device has computed it), reduced or gathered
// there by MPI, and copied back when the collective completes (at wait(), or at a test() that
// finds it done); a span in host memory goes to MPI as it is.
//
// Written against a `Memory` (the CUDA backend's page-locked buffers and cudaMemcpy in
// comm/cuda_communicator.hpp; host memory standing in for a device in tests/mpi/staging_test.cpp),
// so that the logic runs and is tested without a GPU:
//   bool on_device(const void*) const;        whether a pointer is in device memory
//   std::shared_ptr<void> acquire(size_t);    a host buffer, returned to its pool when released
//   void to_host(void* host, const void* device, size_t bytes);   after the device's work
//   void to_device(void* device, const void* host, size_t bytes);
//
// Every host buffer a collective uses (its staged input, which MPI reads, and its staged output,
// which MPI writes) is held by the collective's request until it completes: no bound on the
// collectives in flight, and no buffer goes back to the pool while MPI may still use it.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <utility>

#include "communicator.hpp"

namespace tessel::comm::staging {

// What a staged collective holds until it completes, and copies back to the device then.
template <class Memory>
struct copy_back {
  Memory* memory = nullptr;
  std::shared_ptr<void> input;  // the staged input, read by MPI until the collective completes
  std::shared_ptr<void> host;   // the staged output
  void* device = nullptr;       // where the output goes back
  std::size_t bytes = 0;

  void run() {
    if (device != nullptr && bytes != 0) memory->to_device(device, host.get(), bytes);
    device = nullptr;
    host.reset();
    input.reset();
  }
  [[nodiscard]] bool pending() const noexcept {
    return device != nullptr || host != nullptr || input != nullptr;
  }
};

// A staged collective in flight: the MPI request and what it holds.
template <class Memory>
class request {
 public:
  request() = default;
  request(comm::request r, copy_back<Memory> back) : r_(std::move(r)), back_(std::move(back)) {}
  request(request&& o) noexcept : r_(std::move(o.r_)), back_(std::exchange(o.back_, {})) {}
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      r_ = std::move(o.r_);
      back_ = std::exchange(o.back_, {});
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { finish_quietly(); }

  void wait() {
    r_.wait();
    back_.run();
  }
  bool test() {
    if (!r_.test()) return false;
    back_.run();
    return true;
  }
  [[nodiscard]] bool pending() const noexcept { return r_.pending() || back_.pending(); }

 private:
  // A request dropped before it was waited for is waited for (MPI may still use its buffers).
  void finish_quietly() noexcept {
    try {
      if (pending()) wait();
    } catch (...) {
    }
  }
  comm::request r_;
  copy_back<Memory> back_;
};

// MPI's collectives (comm::communicator) on spans that may be in `Memory`'s device memory.
template <class Memory>
class collectives {
 public:
  using request = staging::request<Memory>;

  collectives(const communicator& mpi, Memory& memory) : mpi_(&mpi), memory_(&memory) {}

  template <class T>
  void all_reduce(std::span<T> data, reduce_op op) const {
    output<T> out = stage_out(data, true);
    mpi_->all_reduce(out.host, op);
    out.back.run();
  }
  template <class T>
  [[nodiscard]] request iall_reduce(std::span<T> data) const {
    output<T> out = stage_out(data, true);
    comm::request r = mpi_->iall_reduce(out.host);
    return request(std::move(r), std::move(out.back));
  }
  template <class T>
  [[nodiscard]] request iall_gather(std::span<const T> in, std::span<T> out) const {
    return with_input(in, out, [&](std::span<const T> i, std::span<T> o) {
      return mpi_->iall_gather(i, o);
    });
  }
  template <class T>
  [[nodiscard]] request ireduce_scatter(std::span<const T> in, std::span<T> out) const {
    return with_input(in, out, [&](std::span<const T> i, std::span<T> o) {
      return mpi_->ireduce_scatter(i, o);
    });
  }
  template <class T>
  [[nodiscard]] request ibroadcast(std::span<T> data, int root) const {
    output<T> out = stage_out(data, true);
    comm::request r = mpi_->ibroadcast(out.host, root);
    return request(std::move(r), std::move(out.back));
  }
  template <class T>
  [[nodiscard]] request ireduce(std::span<T> data, int root) const {
    output<T> out = stage_out(data, true);
    comm::request r = mpi_->ireduce(out.host, root);
    return request(std::move(r), std::move(out.back));
  }
  template <class T>
  [[nodiscard]] request iall_to_all(std::span<const T> in, std::span<T> out) const {
    return with_input(in, out, [&](std::span<const T> i, std::span<T> o) {
      return mpi_->iall_to_all(i, o);
    });
  }

 private:
  // `data` as MPI sees it (`host`): itself, or a host buffer holding its values (`load`) that
  // back.run() copies to `data`.
  template <class T>
  struct output {
    std::span<T> host;
    copy_back<Memory> back;
  };
  template <class T>
  output<T> stage_out(std::span<T> data, bool load) const {
    output<T> out{data, {memory_, {}, {}, nullptr, 0}};
    if (data.empty() || !memory_->on_device(data.data())) return out;
    out.back.host = memory_->acquire(data.size_bytes());
    out.back.device = data.data();
    out.back.bytes = data.size_bytes();
    if (load) memory_->to_host(out.back.host.get(), data.data(), data.size_bytes());
    out.host = std::span<T>(static_cast<T*>(out.back.host.get()), data.size());
    return out;
  }
  // A collective that reads `in` and writes `out`: a device input is copied into a host buffer
  // that the request holds until the collective completes.
  template <class T, class Start>
  request with_input(std::span<const T> in, std::span<T> out, Start&& start) const {
    std::shared_ptr<void> staged_in;
    std::span<const T> host_in = in;
    if (!in.empty() && memory_->on_device(in.data())) {
      staged_in = memory_->acquire(in.size_bytes());
      memory_->to_host(staged_in.get(), in.data(), in.size_bytes());
      host_in = std::span<const T>(static_cast<const T*>(staged_in.get()), in.size());
    }
    output<T> o = stage_out(out, false);
    comm::request r = start(host_in, o.host);
    o.back.input = std::move(staged_in);
    return request(std::move(r), std::move(o.back));
  }

  const communicator* mpi_;
  Memory* memory_;
};

}  // namespace tessel::comm::staging
