// communicator: one group of processes (the world, or the devices along one mesh axis) and the
// collectives on it, blocking and non-blocking, on MPI over host memory. A group of one process
// needs no MPI at all: every collective is then a local copy, so a program started without
// `mpiexec` runs the same code as a single-device world.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "concept.hpp"
#include "mpi_errors.hpp"
#include "ring.hpp"
#include "watchdog.hpp"

namespace tessel::comm {

namespace detail {
template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else static_assert(std::is_same_v<T, float>, "tessel::comm: unsupported element type");
}

// A communicator's copy (out = in) needs spans of one size; called where they differ.
// [[noreturn]], so that the compiler knows the copy after it has equal sizes (else GCC's
// -Warray-bounds sees a copy of 3 elements into 2 on the error path of a test).
[[noreturn]] inline void copy_size_error(std::size_t in, std::size_t out) {
  throw value_error("tessel: copy needs input and output of one size; got " +
                    std::to_string(in) + " and " + std::to_string(out) + " elements");
}
template <class T>
void copy(std::span<const T> in, std::span<T> out) {
  if (in.data() != out.data() && !in.empty()) std::memmove(out.data(), in.data(), in.size_bytes());
}
}  // namespace detail

// A non-blocking collective in flight: MPI's, or tessel's own ring (ring.hpp). wait() completes
// it; a request is waited for when it is destroyed, so that no buffer is released while MPI
// still writes to it. A wait longer than the collective timeout aborts the job (watchdog.hpp).
class request {
 public:
  request() = default;
  explicit request(MPI_Request r, collective_tag tag = {}) : r_(r), tag_(tag) {}
  explicit request(std::unique_ptr<detail::schedule> s, collective_tag tag = {})
      : s_(std::move(s)), tag_(tag) {}
  request(request&& o) noexcept
      : r_(std::exchange(o.r_, MPI_REQUEST_NULL)), s_(std::move(o.s_)), tag_(o.tag_) {}
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      wait_quietly();
      r_ = std::exchange(o.r_, MPI_REQUEST_NULL);
      s_ = std::move(o.s_);
      tag_ = o.tag_;
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { wait_quietly(); }

  // Blocks until the collective is complete.
  void wait() {
    if (!pending()) return;
    const watched_wait watch(tag_);
    if (s_) {
      s_->advance(true);
      s_.reset();
      return;
    }
    detail::check(MPI_Wait(&r_, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  // Lets the collective progress; true once it is complete.
  bool test() {
    if (s_) {
      if (s_->advance(false)) s_.reset();
      return !s_;
    }
    if (r_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    detail::check(MPI_Test(&r_, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  }
  [[nodiscard]] bool pending() const noexcept { return r_ != MPI_REQUEST_NULL || s_ != nullptr; }

 private:
  void wait_quietly() noexcept {
    if (!pending()) return;
    const watched_wait watch(tag_);
    if (s_) {
      try {
        s_->advance(true);
      } catch (...) {
      }
      s_.reset();
    }
    if (r_ != MPI_REQUEST_NULL) MPI_Wait(&r_, MPI_STATUS_IGNORE);
  }
  MPI_Request r_ = MPI_REQUEST_NULL;
  std::unique_ptr<detail::schedule> s_;
  collective_tag tag_;
};

// A group of processes.
class communicator {
 public:
  using request = comm::request;
  // The group of this process alone.
  communicator() = default;
  // Takes ownership of `c` (freed on destruction) when `owned`. Collective over `c`'s processes
  // (they register with the watchdog together); `label` names the group in the watchdog's
  // message ("mesh axis 'batch'").
  communicator(MPI_Comm c, bool owned, std::string_view label = "the world");
  communicator(communicator&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(o.owned_, false)),
        rank_(o.rank_),
        size_(o.size_),
        channel_(o.channel_),
        ring_(std::move(o.ring_)) {}
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(o.owned_, false);
      rank_ = o.rank_;
      size_ = o.size_;
      channel_ = o.channel_;
      ring_ = std::move(o.ring_);
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  ~communicator() { release(); }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm native() const noexcept { return comm_; }
  [[nodiscard]] bool uses_mpi() const noexcept { return size_ > 1; }

  // ---- blocking -------------------------------------------------------------------------------
  // Each collective is a thin template over the element type that calls its type-erased form
  // (addresses, counts and the MPI type), compiled once in tessel::tessel, as fmt's format
  // calls vformat: a translation unit compiles no MPI call of its own.
  // Every process ends with the sum (or the maximum) of everyone's `data`, element-wise.
  template <class T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) const {
    all_reduce_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T), op);
  }
  // out = every process's `in`, concatenated in rank order (out.size() == size() * in.size()).
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) const {
    all_gather_erased({in.data(), in.size(), out.data(), out.size(), detail::datatype<T>(),
                       sizeof(T)});
  }
  // out = block rank() of the sum of everyone's `in` (in.size() == size() * out.size()). With
  // `out` at the start of `in` (out.data() == in.data()) it runs in place (MPI_IN_PLACE), the
  // rest of `in` left undefined.
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) const {
    reduce_scatter_erased({in.data(), in.size(), out.data(), out.size(), detail::datatype<T>(),
                           sizeof(T)});
  }
  // Every process ends with `root`'s `data`.
  template <class T>
  void broadcast(std::span<T> data, int root = 0) const {
    broadcast_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T), root);
  }
  // `root` ends with the sum of everyone's `data`; the others' `data` is left as it was (MPI's
  // reduce, in place at the root).
  template <class T>
  void reduce(std::span<T> data, int root = 0) const {
    reduce_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T), root);
  }
  // Block j of `in` goes to process j; block i of `out` comes from process i.
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) const {
    all_to_all_erased({in.data(), in.size(), out.data(), out.size(), detail::datatype<T>(),
                       sizeof(T)});
  }
  // out = in (host memory; of one size): the copy the collectives above do on one process, and
  // runtime/collectives.hpp's steps (an all_reduce into another buffer, a slice) through the
  // communicator, so that one whose buffers live elsewhere copies there.
  template <class T>
  void copy(std::span<const T> in, std::span<T> out) const {
    if (in.size() != out.size()) detail::copy_size_error(in.size(), out.size());
    detail::copy(in, out);
  }
  // `what` names it in the watchdog's message; an untimed barrier is not ended by the collective
  // timeout on this process (the others' waits for it still are).
  void barrier(collective_name what = "barrier", bool timed = true) const {
    if (!uses_mpi()) return;
    const watched_wait watch(tag(what), timed);
    detail::check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  // ---- non-blocking ---------------------------------------------------------------------------
  template <class T>
  [[nodiscard]] request iall_reduce(std::span<T> data) const {
    return iall_reduce_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T));
  }
  template <class T>
  [[nodiscard]] request iall_gather(std::span<const T> in, std::span<T> out) const {
    return iall_gather_erased({in.data(), in.size(), out.data(), out.size(),
                               detail::datatype<T>(), sizeof(T)});
  }
  template <class T>
  [[nodiscard]] request ireduce_scatter(std::span<const T> in, std::span<T> out) const {
    return ireduce_scatter_erased({in.data(), in.size(), out.data(), out.size(),
                                   detail::datatype<T>(), sizeof(T)});
  }
  template <class T>
  [[nodiscard]] request ibroadcast(std::span<T> data, int root = 0) const {
    return ibroadcast_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T),
                             root);
  }
  template <class T>
  [[nodiscard]] request ireduce(std::span<T> data, int root = 0) const {
    return ireduce_erased(data.data(), data.size(), detail::datatype<T>(), sizeof(T), root);
  }
  template <class T>
  [[nodiscard]] request iall_to_all(std::span<const T> in, std::span<T> out) const {
    return iall_to_all_erased({in.data(), in.size(), out.data(), out.size(),
                               detail::datatype<T>(), sizeof(T)});
  }

  // Counts collective `op` on this group for the watchdog (it names the processes that did not
  // arrive, and those that ran another collective in its place): a collective run here, or one
  // another library runs over this group's processes (NCCL's communicator being made), watched
  // by holding a watched_wait with the tag. `bytes`: what each process contributes; `root`: a
  // broadcast's; `max`: an all_reduce of the maximum; `nonblocking`: started with MPI's
  // non-blocking call (MPI_Iallreduce, ...), which MPI never pairs with a blocking one (tessel's
  // ring pairs with itself either way, and is not marked).
  [[nodiscard]] collective_tag tag(collective_name op, std::uint64_t bytes = 0, int root = -1,
                                   bool max = false, bool nonblocking = false) const noexcept {
    auto& w = watchdog::instance();
    if (!w.running() || channel_ < 0) return {op.text, channel_, 0};
    return {op.text, channel_,
            w.enter(channel_, op.key, watchdog::shape_word(bytes, root, max, nonblocking))};
  }

 private:
  void check_root(int root) const;
  void check_blocks(const char* what, std::size_t whole, std::size_t block) const;
  void check_same(const char* what, std::size_t in, std::size_t out) const;
  // A collective's two buffers, their element type erased.
  struct buffers {
    const void* in;
    std::size_t in_count;
    void* out;
    std::size_t out_count;
    MPI_Datatype type;
    std::size_t element_size;
    // out = in, on a group of one process.
    void copy() const;
  };
  void all_reduce_erased(void* data, std::size_t n, MPI_Datatype type, std::size_t element_size,
                         reduce_op op) const;
  void all_gather_erased(const buffers& b) const;
  const void* gather_input(const buffers& b) const;
  void reduce_scatter_erased(const buffers& b) const;
  void broadcast_erased(void* data, std::size_t n, MPI_Datatype type, std::size_t element_size,
                        int root) const;
  void reduce_erased(void* data, std::size_t n, MPI_Datatype type, std::size_t element_size,
                     int root) const;
  void all_to_all_erased(const buffers& b) const;
  request iall_reduce_erased(void* data, std::size_t n, MPI_Datatype type,
                             std::size_t element_size) const;
  request iall_gather_erased(const buffers& b) const;
  request ireduce_scatter_erased(const buffers& b) const;
  request ibroadcast_erased(void* data, std::size_t n, MPI_Datatype type,
                            std::size_t element_size, int root) const;
  request ireduce_erased(void* data, std::size_t n, MPI_Datatype type, std::size_t element_size,
                         int root) const;
  request iall_to_all_erased(const buffers& b) const;
  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    ring_.reset();  // (freed when the last collective in flight on it ends)
    if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
  int channel_ = -1;  // the watchdog's
  // The ring's private channel (a duplicate of comm_), on a group of several processes.
  std::shared_ptr<detail::ring_channel> ring_;
  [[nodiscard]] bool ring_all_reduces(std::size_t n, MPI_Datatype type, std::size_t element_size,
                                      reduce_op op) const {
    return op == reduce_op::sum && detail::ring_sums(type) &&
           n * element_size >= detail::ring_all_reduce_min_bytes && n >= std::size_t(size_);
  }
};

static_assert(communicator_like<communicator>);

// The communicator of a backend's memory: the backend's own `communicator` type where it names
// one (a backend of tests: comm::local_communicator), else a specialization in the communicator's
// header (comm/cuda_communicator.hpp for backend::cuda, so that the backend's header includes no
// communicator), else MPI's over host memory.
template <class Backend>
struct communicator_of {
  using type = communicator;
};
template <class Backend>
  requires requires { typename Backend::communicator; }
struct communicator_of<Backend> {
  using type = typename Backend::communicator;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE communicator::communicator(MPI_Comm c, bool owned, std::string_view label)
    : comm_(c), owned_(owned) {
  if (c != MPI_COMM_NULL) {
    MPI_Comm_rank(c, &rank_);
    MPI_Comm_size(c, &size_);
    if (size_ > 1) channel_ = watchdog::instance().register_channel(c, std::string(label));
    if (size_ > 1) ring_ = std::make_shared<detail::ring_channel>(c);
  }
}
TESSEL_INLINE void communicator::check_root(int root) const {
  if (root < 0 || root >= size_)
    throw value_error("tessel: a broadcast or reduce rooted at process " + std::to_string(root) +
                      " of a group of " +
                      std::to_string(size_) + "; the root must be in [0, " +
                      std::to_string(size_) + ")");
}
// An all_gather whose input is already its own block of the output (the block at this
// process's rank) gathers in place (MPI_IN_PLACE): the parts of a state split over the processes
// are gathered where they lie.
TESSEL_INLINE const void* communicator::gather_input(const buffers& b) const {
  const auto* own = static_cast<const char*>(b.out) +
                    static_cast<std::size_t>(rank_) * b.in_count * b.element_size;
  return b.in == own && b.in_count != 0 ? MPI_IN_PLACE : b.in;
}
TESSEL_INLINE void communicator::check_blocks(const char* what, std::size_t whole,
                                              std::size_t block) const {
  if (whole != block * static_cast<std::size_t>(size_))
    throw value_error(std::string("tessel: ") + what + " over " + std::to_string(size_) +
                      " processes needs a buffer of " + std::to_string(size_) + " x " +
                      std::to_string(block) + " elements; got " + std::to_string(whole));
}
TESSEL_INLINE void communicator::check_same(const char* what, std::size_t in,
                                            std::size_t out) const {
  if (in != out || in % static_cast<std::size_t>(size_) != 0)
    throw value_error(std::string("tessel: ") + what + " over " + std::to_string(size_) +
                      " processes needs equal input and output sizes that divide by " +
                      std::to_string(size_) + "; got " + std::to_string(in) + " and " +
                      std::to_string(out));
}
TESSEL_INLINE void communicator::buffers::copy() const {
  if (in != out && in_count != 0) std::memmove(out, in, in_count * element_size);
}
TESSEL_INLINE void communicator::all_reduce_erased(void* data, std::size_t n, MPI_Datatype type,
                                                   std::size_t element_size, reduce_op op) const {
  if (!uses_mpi() || n == 0) return;
  const watched_wait watch(tag("all_reduce", n * element_size, -1, op == reduce_op::max));
  if (ring_all_reduces(n, type, element_size, op)) {
    (void)detail::count_of(n);
    detail::start_ring_all_reduce(ring_, data, n, type, element_size)->advance(true);
    return;
  }
  detail::check(MPI_Allreduce(MPI_IN_PLACE, data, detail::count_of(n), type,
                              op == reduce_op::max ? MPI_MAX : MPI_SUM, comm_),
                "MPI_Allreduce");
}
TESSEL_INLINE void communicator::all_gather_erased(const buffers& b) const {
  check_blocks("all_gather", b.out_count, b.in_count);
  if (!uses_mpi()) return b.copy();
  const watched_wait watch(tag("all_gather", b.in_count * b.element_size));
  detail::check(MPI_Allgather(gather_input(b), detail::count_of(b.in_count), b.type, b.out,
                              detail::count_of(b.in_count), b.type, comm_),
                "MPI_Allgather");
}
TESSEL_INLINE void communicator::reduce_scatter_erased(const buffers& b) const {
  check_blocks("reduce_scatter", b.in_count, b.out_count);
  if (!uses_mpi()) return b.copy();
  const watched_wait watch(tag("reduce_scatter", b.in_count * b.element_size));
  if (detail::ring_sums(b.type)) {
    (void)detail::count_of(b.out_count);
    detail::start_ring_reduce_scatter(ring_, b.in, b.out, b.out_count, b.type, b.element_size)
        ->advance(true);
    return;
  }
  detail::check(MPI_Reduce_scatter_block(b.in == b.out ? MPI_IN_PLACE : b.in, b.out,
                                         detail::count_of(b.out_count), b.type, MPI_SUM, comm_),
                "MPI_Reduce_scatter_block");
}
TESSEL_INLINE void communicator::broadcast_erased(void* data, std::size_t n, MPI_Datatype type,
                                                  std::size_t element_size, int root) const {
  check_root(root);
  if (!uses_mpi() || n == 0) return;
  const watched_wait watch(tag("broadcast", n * element_size, root));
  detail::check(MPI_Bcast(data, detail::count_of(n), type, root, comm_), "MPI_Bcast");
}
TESSEL_INLINE void communicator::reduce_erased(void* data, std::size_t n, MPI_Datatype type,
                                               std::size_t element_size, int root) const {
  check_root(root);
  if (!uses_mpi() || n == 0) return;
  const watched_wait watch(tag("reduce", n * element_size, root));
  detail::check(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : data, rank_ == root ? data : nullptr,
                           detail::count_of(n), type, MPI_SUM, root, comm_),
                "MPI_Reduce");
}
TESSEL_INLINE void communicator::all_to_all_erased(const buffers& b) const {
  check_same("all_to_all", b.in_count, b.out_count);
  if (!uses_mpi()) return b.copy();
  const int block = detail::count_of(b.in_count / static_cast<std::size_t>(size_));
  const watched_wait watch(tag("all_to_all", b.in_count * b.element_size));
  detail::check(MPI_Alltoall(b.in, block, b.type, b.out, block, b.type, comm_), "MPI_Alltoall");
}
TESSEL_INLINE request communicator::iall_reduce_erased(void* data, std::size_t n,
                                                       MPI_Datatype type,
                                                       std::size_t element_size) const {
  if (!uses_mpi() || n == 0) return {};
  if (ring_all_reduces(n, type, element_size, reduce_op::sum)) {
    (void)detail::count_of(n);
    const collective_tag t = tag("all_reduce", n * element_size);
    return request(detail::start_ring_all_reduce(ring_, data, n, type, element_size), t);
  }
  MPI_Request r{};
  detail::check(MPI_Iallreduce(MPI_IN_PLACE, data, detail::count_of(n), type, MPI_SUM, comm_, &r),
                "MPI_Iallreduce");
  return request(r, tag("all_reduce", n * element_size, -1, false, true));
}
TESSEL_INLINE request communicator::iall_gather_erased(const buffers& b) const {
  check_blocks("all_gather", b.out_count, b.in_count);
  if (!uses_mpi()) return b.copy(), request{};
  MPI_Request r{};
  detail::check(MPI_Iallgather(gather_input(b), detail::count_of(b.in_count), b.type, b.out,
                               detail::count_of(b.in_count), b.type, comm_, &r),
                "MPI_Iallgather");
  return request(r, tag("all_gather", b.in_count * b.element_size, -1, false, true));
}
TESSEL_INLINE request communicator::ireduce_scatter_erased(const buffers& b) const {
  check_blocks("reduce_scatter", b.in_count, b.out_count);
  if (!uses_mpi()) return b.copy(), request{};
  if (detail::ring_sums(b.type)) {
    (void)detail::count_of(b.out_count);
    const collective_tag t = tag("reduce_scatter", b.in_count * b.element_size);
    return request(detail::start_ring_reduce_scatter(ring_, b.in, b.out, b.out_count, b.type,
                                                     b.element_size),
                   t);
  }
  MPI_Request r{};
  detail::check(MPI_Ireduce_scatter_block(b.in == b.out ? MPI_IN_PLACE : b.in, b.out,
                                          detail::count_of(b.out_count), b.type, MPI_SUM, comm_,
                                          &r),
                "MPI_Ireduce_scatter_block");
  return request(r, tag("reduce_scatter", b.in_count * b.element_size, -1, false, true));
}
TESSEL_INLINE request communicator::ibroadcast_erased(void* data, std::size_t n,
                                                      MPI_Datatype type, std::size_t element_size,
                                                      int root) const {
  check_root(root);
  if (!uses_mpi() || n == 0) return {};
  MPI_Request r{};
  detail::check(MPI_Ibcast(data, detail::count_of(n), type, root, comm_, &r), "MPI_Ibcast");
  return request(r, tag("broadcast", n * element_size, root, false, true));
}
TESSEL_INLINE request communicator::ireduce_erased(void* data, std::size_t n, MPI_Datatype type,
                                                   std::size_t element_size, int root) const {
  check_root(root);
  if (!uses_mpi() || n == 0) return {};
  MPI_Request r{};
  detail::check(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : data, rank_ == root ? data : nullptr,
                            detail::count_of(n), type, MPI_SUM, root, comm_, &r),
                "MPI_Ireduce");
  return request(r, tag("reduce", n * element_size, root, false, true));
}
TESSEL_INLINE request communicator::iall_to_all_erased(const buffers& b) const {
  check_same("all_to_all", b.in_count, b.out_count);
  if (!uses_mpi()) return b.copy(), request{};
  const int block = detail::count_of(b.in_count / static_cast<std::size_t>(size_));
  MPI_Request r{};
  detail::check(MPI_Ialltoall(b.in, block, b.type, b.out, block, b.type, comm_, &r),
                "MPI_Ialltoall");
  return request(r, tag("all_to_all", b.in_count * b.element_size, -1, false, true));
}
#endif

}  // namespace tessel::comm
