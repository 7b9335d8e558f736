// nccl_group: one NCCL communicator over the processes of an MPI group, each process on its own
// GPU (NCCL refuses two ranks on one device), and the collectives on device memory that
// comm::cuda_communicator runs through it. NCCL runs on a stream of its own: a collective waits
// (with an event) for the compute stream's work that wrote its input, and the compute stream
// waits (with an event) for the collective before anything reads its output, so the host never
// blocks for it. Waiting for a collective from the host (a request's wait()) polls NCCL's
// asynchronous errors (comm/collective_poll.hpp): an error, or a wait longer than the collective
// timeout (TESSEL_COLLECTIVE_TIMEOUT, comm/watchdog.hpp), aborts the communicator (ncclCommAbort)
// and ends the job naming the process, as the MPI path's watchdog does; it never hangs.
// Built where NCCL is found (TESSEL_HAVE_NCCL, set by the tessel::cuda target).
#pragma once

#if defined(TESSEL_HAVE_NCCL)

#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

#include "../backend/cuda_context.hpp"
#include "../core/errors.hpp"
#include "collective_poll.hpp"
#include "concept.hpp"
#include "watchdog.hpp"

namespace tessel::comm {

namespace nccl_detail {
template <class T>
ncclDataType_t datatype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return ncclUint64;
  else static_assert(std::is_same_v<T, float>, "tessel::comm: unsupported element type for NCCL");
}
inline void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw runtime_error(std::string("NCCL: ") + what + " failed: " + ncclGetErrorString(r));
}
}  // namespace nccl_detail

class nccl_group {
 public:
  // What happens when a collective fails or outwaits the timeout, after the communicator is
  // aborted: by default the message goes to stderr and the job ends (MPI_Abort, or exit where
  // MPI is not running) with exit code 124 for a timeout and 1 for an error. Tests replace it.
  using failure_handler = std::function<void(const std::string& message, bool timeout)>;
  static failure_handler& on_failure() {
    static failure_handler h = [](const std::string& message, bool timeout) {
      std::fprintf(stderr, "%s\n", message.c_str());
      std::fflush(stderr);
      int up = 0;
      MPI_Initialized(&up);
      if (up != 0) MPI_Abort(MPI_COMM_WORLD, timeout ? 124 : 1);
      std::exit(timeout ? 124 : 1);
    };
    return h;
  }

  // Collective over the `size` processes of `c` (MPI is not called for a group of one). This
  // process's GPU is selected first: ncclGetUniqueId and ncclCommInitRank use the current
  // device. The broadcast of the id and ncclCommInitRank, which waits for every process of the
  // group, are watched as one collective (`tag`, from the group's MPI communicator): a process
  // that never arrives ends the job after the collective timeout, naming it, instead of leaving
  // the others blocked in NCCL's initialization.
  nccl_group(MPI_Comm c, int rank, int size, std::string label,
             collective_tag tag = {"ncclCommInitRank"})
      : rank_(rank), size_(size), label_(std::move(label)) {
    backend::cuda_detail::ctx();  // this process's GPU, selected
    ncclUniqueId id{};
    if (rank == 0) nccl_detail::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const watched_wait watch(tag);
    if (size > 1) MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, c);
    nccl_detail::check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    backend::cuda_detail::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                                "cudaStreamCreate (NCCL's stream)");
  }
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;
  ~nccl_group() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }

  // Each queues the collective on NCCL's stream after the compute stream's work so far and
  // returns the event that marks its end (for wait() or finish()).
  template <class T>
  cudaEvent_t all_reduce(const T* in, T* out, std::size_t n, reduce_op op) const {
    return run("all_reduce", [&] {
      return ncclAllReduce(in, out, n, nccl_detail::datatype<T>(),
                           op == reduce_op::max ? ncclMax : ncclSum, comm_, stream_);
    });
  }
  template <class T>
  cudaEvent_t all_gather(const T* in, T* out, std::size_t block) const {
    return run("all_gather", [&] {
      return ncclAllGather(in, out, block, nccl_detail::datatype<T>(), comm_, stream_);
    });
  }
  template <class T>
  cudaEvent_t reduce_scatter(const T* in, T* out, std::size_t block) const {
    return run("reduce_scatter", [&] {
      return ncclReduceScatter(in, out, block, nccl_detail::datatype<T>(), ncclSum, comm_,
                               stream_);
    });
  }
  template <class T>
  cudaEvent_t broadcast(T* data, std::size_t n, int root) const {
    return run("broadcast", [&] {
      return ncclBroadcast(data, data, n, nccl_detail::datatype<T>(), root, comm_, stream_);
    });
  }
  // In place: `root` ends with the sum.
  template <class T>
  cudaEvent_t reduce(T* data, std::size_t n, int root) const {
    return run("reduce", [&] {
      return ncclReduce(data, data, n, nccl_detail::datatype<T>(), ncclSum, root, comm_, stream_);
    });
  }
  // Block p of `in` to process p, block p of `out` from it: one send and one receive per peer,
  // grouped.
  template <class T>
  cudaEvent_t all_to_all(const T* in, T* out, std::size_t block) const {
    return run("all_to_all", [&] {
      ncclResult_t r = ncclGroupStart();
      for (int p = 0; p < size_ && r == ncclSuccess; ++p) {
        r = ncclSend(in + static_cast<std::size_t>(p) * block, block, nccl_detail::datatype<T>(),
                     p, comm_, stream_);
        if (r == ncclSuccess)
          r = ncclRecv(out + static_cast<std::size_t>(p) * block, block,
                       nccl_detail::datatype<T>(), p, comm_, stream_);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }

  // Orders the compute stream after the collective that `done` ends (no host wait), and
  // releases the event.
  void finish(cudaEvent_t done) const {
    backend::cuda_detail::check(cudaStreamWaitEvent(backend::cuda_detail::stream(), done, 0),
                                "cudaStreamWaitEvent");
    cudaEventDestroy(done);
  }
  // Waits on the host until the collective that `done` ends is complete, polling the event,
  // NCCL's asynchronous errors and the collective timeout (comm/collective_poll.hpp); then
  // finish(done). A failure aborts the communicator and ends the job (fail()).
  void wait(cudaEvent_t done, const char* op) const {
    const collective_poll::outcome o = collective_poll::wait(
        [done](std::string& why) {
          const cudaError_t e = cudaEventQuery(done);
          if (e == cudaSuccess) return collective_poll::progress::done;
          if (e == cudaErrorNotReady) return collective_poll::progress::pending;
          why = std::string("CUDA: ") + cudaGetErrorString(e);
          return collective_poll::progress::failed;
        },
        [this](std::string& why) {
          ncclResult_t async = ncclSuccess;
          const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
          if (r != ncclSuccess) async = r;
          if (async == ncclSuccess || async == ncclInProgress) return false;
          why = ncclGetErrorString(async);
          return true;
        },
        watchdog::instance().timeout(),
        [start = std::chrono::steady_clock::now()] {
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        });
    if (o.failed) {
      cudaEventDestroy(done);
      fail(op, o);
    }
    finish(done);
  }
  // Aborts the communicator and hands the message to on_failure() (which ends the job unless a
  // test replaced it; then the group is unusable).
  void fail(const char* op, const collective_poll::outcome& o) const {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    on_failure()(collective_poll::failure_message(op, label_, rank_, size_, o), o.timeout);
    throw runtime_error("tessel: NCCL " + std::string(op) + " over " + label_ + " failed: " +
                        o.why);
  }

 private:
  template <class F>
  cudaEvent_t run(const char* op, F&& launch) const {
    if (comm_ == nullptr)
      throw runtime_error("tessel: NCCL " + std::string(op) + " over " + label_ +
                          ": the communicator was aborted after an earlier failure");
    cudaEvent_t ready = nullptr, done = nullptr;
    backend::cuda_detail::check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                                "cudaEventCreate");
    backend::cuda_detail::check(cudaEventRecord(ready, backend::cuda_detail::stream()),
                                "cudaEventRecord");
    backend::cuda_detail::check(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    const ncclResult_t r = launch();
    if (r != ncclSuccess && r != ncclInProgress) fail(op, {true, false, ncclGetErrorString(r)});
    backend::cuda_detail::check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                                "cudaEventCreate");
    backend::cuda_detail::check(cudaEventRecord(done, stream_), "cudaEventRecord");
    return done;
  }

  mutable ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::string label_;
};

}  // namespace tessel::comm

#else  // no NCCL

#include <cuda_runtime_api.h>

#include <cstddef>

#include "concept.hpp"

namespace tessel::comm {

// Without NCCL, a stand-in that no group ever has: cuda_communicator's NCCL branches compile
// and never run.
class nccl_group {
 public:
  template <class T>
  cudaEvent_t all_reduce(const T*, T*, std::size_t, reduce_op) const { return nullptr; }
  template <class T>
  cudaEvent_t all_gather(const T*, T*, std::size_t) const { return nullptr; }
  template <class T>
  cudaEvent_t reduce_scatter(const T*, T*, std::size_t) const { return nullptr; }
  template <class T>
  cudaEvent_t broadcast(T*, std::size_t, int) const { return nullptr; }
  template <class T>
  cudaEvent_t reduce(T*, std::size_t, int) const { return nullptr; }
  template <class T>
  cudaEvent_t all_to_all(const T*, T*, std::size_t) const { return nullptr; }
  void finish(cudaEvent_t) const {}
  void wait(cudaEvent_t, const char*) const {}
};

}  // namespace tessel::comm

#endif  // TESSEL_HAVE_NCCL
