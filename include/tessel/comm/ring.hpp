// ring: tessel's own reduce-scatter and all-reduce of sums, over point-to-point messages in a
// ring (the ring algorithms of NCCL and of Open MPI's coll/base). Each of a group's N processes
// sends a block to its right neighbour and receives one from its left, N - 1 times, adding each
// block it receives to its own; an all-reduce then passes the summed blocks round once more.
//
// Why not MPI's own: Open MPI 4.1 reduce-scatters (blocking coll/tuned and non-blocking libnbc
// alike) by reducing the whole buffer to one process and scattering it. For 2 processes over
// shared memory and 256 MiB of floats that takes 238 ms, where the ring takes 59 ms; the ring's
// all-reduce takes 81 ms where MPI's takes 138 (benchmarks/README.md, "The ring").
//
// Every process sums each block in one fixed order, the same in both collectives (block k:
// process k + 1's, then k + 2's, ... then k's own), so a result does not depend on timing, an
// all-reduce leaves the same bits on every process, and a reduce-scatter followed by an
// all-gather gives the all-reduce's bits. The messages go over a duplicate of the group's
// communicator (a `ring_channel`), so that no message of the program's own can match them.
//
// A collective in flight is a `schedule` that `request::test()` advances as its messages arrive
// and `request::wait()` runs to the end. While one waits, every other schedule of the process
// in flight is advanced too (as MPI progresses all its non-blocking collectives inside any of
// its calls), so processes may complete rings in different orders. A ring does not progress
// inside MPI's own calls: a process must not block in an MPI call that waits for another
// process while that process waits in a ring for it (tessel's own code never does).
// TESSEL_RING=0 (the same on every process: runtime::start_collectives takes the job's minimum
// and calls `set_ring`) leaves the sums to MPI's own collectives.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/environment.hpp"
#include "mpi_errors.hpp"

namespace tessel::comm::detail {

// A collective advanced by tessel rather than by MPI.
class schedule {
 public:
  schedule() = default;
  schedule(const schedule&) = delete;
  schedule& operator=(const schedule&) = delete;
  virtual ~schedule() = default;
  // Advances as far as the messages that have arrived allow (`blocking`: to the end); true once
  // the collective is complete.
  virtual bool advance(bool blocking) = 0;
};

// A private duplicate of a group's communicator for the ring's messages, with the tags of the
// collectives started on it. Shared by the communicator and its schedules in flight: freed when
// the last of them ends.
class ring_channel {
 public:
  // Collective over `group`'s processes (MPI_Comm_dup).
  TESSEL_INLINE explicit ring_channel(MPI_Comm group);
  TESSEL_INLINE ~ring_channel();
  ring_channel(const ring_channel&) = delete;
  ring_channel& operator=(const ring_channel&) = delete;
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }
  // The next collective's tag: every process starts a group's collectives in one order.
  int next_tag() noexcept { return static_cast<int>(seq_++ % 32768u); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  unsigned seq_ = 0;
};

// Whether the ring sums `type`: floats and doubles, unless TESSEL_RING=0 on any process of the
// job (core/environment.hpp). Other types, and maxima, use MPI's collectives.
TESSEL_INLINE bool ring_sums(MPI_Datatype type);
// Sets whether the ring runs: the job's agreement (runtime::start_collectives), before any
// collective.
TESSEL_INLINE void set_ring(bool on) noexcept;

// An all-reduce of fewer bytes than this uses MPI's (a loss, a metric: latency, not bandwidth).
inline constexpr std::size_t ring_all_reduce_min_bytes = std::size_t{1} << 20;

// Starts a reduce-scatter of sums over `channel`'s group: block `rank` of the sum of everyone's
// `in` (`size` blocks of `block` elements) into `out`. `out == in` runs in place, the rest of `in`
// left undefined.
TESSEL_INLINE std::unique_ptr<schedule> start_ring_reduce_scatter(
    std::shared_ptr<ring_channel> channel, const void* in, void* out, std::size_t block,
    MPI_Datatype type, std::size_t element_size);
// Starts an all-reduce of sums of `data` (n elements) in place.
TESSEL_INLINE std::unique_ptr<schedule> start_ring_all_reduce(std::shared_ptr<ring_channel> channel,
                                                              void* data, std::size_t n,
                                                              MPI_Datatype type,
                                                              std::size_t element_size);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace ring_detail {

// Blocks a ring receives into, kept for the next collective: a training step's buckets reuse
// the same few (one per collective in flight). Outside the backend's memory counters, as MPI's
// own temporaries are. A block is reused for a request of at least half its size.
class scratch_pool {
 public:
  static scratch_pool& instance() {
    // Never destroyed: a request held by a static object may end after the pool would have.
    static scratch_pool* pool = new scratch_pool;
    return *pool;
  }
  std::unique_ptr<std::byte[]> take(std::size_t bytes, std::size_t& capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i].bytes >= bytes && free_[i].bytes / 2 <= bytes &&
          (best == free_.size() || free_[i].bytes < free_[best].bytes))
        best = i;
    if (best == free_.size()) {
      capacity = bytes;
      return std::unique_ptr<std::byte[]>(new std::byte[bytes]);
    }
    capacity = free_[best].bytes;
    std::unique_ptr<std::byte[]> p = std::move(free_[best].data);
    free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
    return p;
  }
  // (Out of memory for the list: the block is freed instead of kept.)
  void give(std::unique_ptr<std::byte[]> p, std::size_t capacity) noexcept {
    if (!p) return;
    try {
      const std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back({std::move(p), capacity});
    } catch (...) {
    }
  }

 private:
  struct entry {
    std::unique_ptr<std::byte[]> data;
    std::size_t bytes;
  };
  std::mutex mutex_;
  std::vector<entry> free_;
};

// A scratch block, given back to the pool when the collective ends.
class scratch {
 public:
  scratch() = default;
  explicit scratch(std::size_t bytes) {
    std::size_t capacity = 0;
    data_ = scratch_pool::instance().take(bytes, capacity);
    capacity_ = capacity;
  }
  scratch(scratch&&) noexcept = default;
  // The block held is given back (a defaulted assignment would delete it: the next collective
  // would then take fresh pages, zeroed by the kernel as they are first written).
  scratch& operator=(scratch&& o) noexcept {
    if (this != &o) {
      scratch_pool::instance().give(std::move(data_), capacity_);
      data_ = std::move(o.data_);
      capacity_ = o.capacity_;
    }
    return *this;
  }
  ~scratch() { scratch_pool::instance().give(std::move(data_), capacity_); }
  [[nodiscard]] std::byte* get() const noexcept { return data_.get(); }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
};

template <class T>
void add(void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}
// out = a + b, element-wise (out may be a or b).
inline void add(MPI_Datatype type, void* out, const void* a, const void* b, std::size_t n) {
  if (type == MPI_FLOAT) add<float>(out, a, b, n);
  else add<double>(out, a, b, n);
}

inline int left(int rank, int size) { return (rank + size - 1) % size; }
inline int right(int rank, int size) { return (rank + 1) % size; }
inline int block_at(int b, int size) { return ((b % size) + size) % size; }

class ring_schedule;
// The schedules of this process in flight, advanced by any of them that waits.
inline std::vector<ring_schedule*>& live() {
  static std::vector<ring_schedule*>* all = new std::vector<ring_schedule*>;
  return *all;
}

// The common part: one exchange with the neighbours in flight at a time, N - 1 or 2(N - 1) of
// them (`steps`), each completed by `arrive(step)`.
class ring_schedule : public schedule {
 public:
  bool advance(bool blocking) override {
    while (step_ < steps_) {
      if (!arrived(blocking)) return false;
      arrive(step_);
      if (++step_ < steps_) post(step_);
    }
    finish();
    return true;
  }

 protected:
  // (Each ring sets steps_ from size_, known once its communicator is read here.)
  ring_schedule(std::shared_ptr<ring_channel> channel, MPI_Datatype type, std::size_t element_size)
      : channel_(std::move(channel)), type_(type), esize_(element_size) {
    comm_ = channel_->comm();
    tag_ = channel_->next_tag();
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    live().push_back(this);
  }
  ~ring_schedule() override {
    // A schedule abandoned mid-way (its request destroyed on an error path) completes the
    // messages in flight, so that MPI writes no freed buffer.
    MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
    unlist();
  }
  // Posts step s's exchange; completes it (adds what arrived).
  virtual void post(int s) = 0;
  virtual void arrive(int s) = 0;
  // The scratch block goes back to the pool, the schedule off the live list.
  void finish() {
    scratch_ = scratch();
    unlist();
  }

  void exchange(const void* send, std::size_t send_n, void* receive, std::size_t receive_n) {
    check(MPI_Irecv(receive, count_of(receive_n), type_, left(rank_, size_), tag_, comm_,
                    &requests_[0]),
          "MPI_Irecv");
    check(MPI_Isend(send, count_of(send_n), type_, right(rank_, size_), tag_, comm_,
                    &requests_[1]),
          "MPI_Isend");
  }

  std::shared_ptr<ring_channel> channel_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ = 0;
  MPI_Datatype type_;
  std::size_t esize_;
  int rank_ = 0, size_ = 1;
  int steps_ = 0, step_ = 0;
  // The block the exchanges receive into (a member of the base, so that it is given back only
  // after the destructor has completed the messages in flight).
  scratch scratch_;

 private:
  // true once the exchange in flight is complete. Blocking: every other schedule in flight is
  // advanced while this one waits, so that a neighbour waiting for one of them gets its messages.
  bool arrived(bool blocking) {
    int done = 0;
    check(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    while (blocking && done == 0) {
      for (std::size_t i = 0; i < live().size(); ++i)
        if (live()[i] != this) live()[i]->advance(false);
      check(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
    return done != 0;
  }
  void unlist() noexcept {
    auto& all = live();
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i] == this) {
        all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// Reduce-scatter: at step s a process sends block (rank - s - 1) (its own at step 0, after that
// the sum it received and added to) and receives block (rank - s - 2), adding its own. After
// N - 1 steps it holds block `rank`. In place, the sums are kept in `in` itself (the rest of it
// is left undefined) and one scratch block receives; out of place, the scratch block and `out`
// take turns, the last step receiving into `out`.
class reduce_scatter_ring final : public ring_schedule {
 public:
  reduce_scatter_ring(std::shared_ptr<ring_channel> channel, const void* in, void* out,
                      std::size_t block, MPI_Datatype type, std::size_t element_size)
      : ring_schedule(std::move(channel), type, element_size),
        in_(static_cast<std::byte*>(const_cast<void*>(in))),
        out_(static_cast<std::byte*>(out)),
        block_(block),
        in_place_(in == out) {
    steps_ = size_ - 1;
    if (steps_ == 0) {  // one process: out = in
      if (!in_place_ && block_ != 0) std::memmove(out_, in_, block_ * esize_);
      return;
    }
    if (in_place_ || steps_ > 1) scratch_ = scratch(block_ * esize_);
    post(0);
  }

 private:
  [[nodiscard]] std::byte* in_block(int b) const {
    return in_ + static_cast<std::size_t>(b) * block_ * esize_;
  }
  // Where step s receives: in place, the scratch block; out of place, `out` at the last step and
  // every other step before it, the scratch block between.
  [[nodiscard]] std::byte* receiving(int s) const {
    if (in_place_) return scratch_.get();
    return (steps_ - 1 - s) % 2 == 0 ? out_ : scratch_.get();
  }
  // Where step s's sum is: in place, in `in` (block rank - s - 2); out of place, where it arrived.
  [[nodiscard]] std::byte* sum_of(int s) const {
    if (in_place_) return s == steps_ - 1 ? out_ : in_block(block_at(rank_ - s - 2, size_));
    return receiving(s);
  }
  void post(int s) override {
    const void* send = s == 0 ? static_cast<const void*>(in_block(block_at(rank_ - 1, size_)))
                              : sum_of(s - 1);
    exchange(send, block_, receiving(s), block_);
  }
  void arrive(int s) override {
    const std::byte* own = in_block(block_at(rank_ - s - 2, size_));
    add(type_, sum_of(s), receiving(s), own, block_);
  }
  std::byte* in_;
  std::byte* out_;
  std::size_t block_;
  bool in_place_;
};

// All-reduce in place over blocks of n * b / N elements (any n): N - 1 steps that sum as the
// reduce-scatter's (block (rank - s - 1) sent, block (rank - s - 2) received into scratch and
// added in place), after which a process holds block `rank` summed; then N - 1 steps that pass
// the summed blocks round (block (rank - s) sent, block (rank - s - 1) received in place).
class all_reduce_ring final : public ring_schedule {
 public:
  all_reduce_ring(std::shared_ptr<ring_channel> channel, void* data, std::size_t n,
                  MPI_Datatype type, std::size_t element_size)
      : ring_schedule(std::move(channel), type, element_size),
        data_(static_cast<std::byte*>(data)),
        n_(n) {
    steps_ = 2 * (size_ - 1);
    if (steps_ == 0) return;  // one process: nothing to add
    const auto parts = static_cast<std::size_t>(size_);
    scratch_ = scratch((n + parts - 1) / parts * esize_);  // the largest block
    post(0);
  }

 private:
  // Block b: elements [n * b / N, n * (b + 1) / N); the first blocks are the smaller.
  [[nodiscard]] std::size_t first(int b) const {
    return n_ * static_cast<std::size_t>(b) / static_cast<std::size_t>(size_);
  }
  [[nodiscard]] std::size_t elements(int b) const { return first(b + 1) - first(b); }
  [[nodiscard]] std::byte* at(int b) const { return data_ + first(b) * esize_; }
  void post(int s) override {
    if (s < size_ - 1) {
      const int send = block_at(rank_ - s - 1, size_), receive = block_at(rank_ - s - 2, size_);
      exchange(at(send), elements(send), scratch_.get(), elements(receive));
    } else {
      const int g = s - (size_ - 1);
      const int send = block_at(rank_ - g, size_), receive = block_at(rank_ - g - 1, size_);
      exchange(at(send), elements(send), at(receive), elements(receive));
    }
  }
  void arrive(int s) override {
    if (s >= size_ - 1) return;  // (passed round: received in place)
    const int b = block_at(rank_ - s - 2, size_);
    add(type_, at(b), scratch_.get(), at(b), elements(b));
  }

  std::byte* data_;
  std::size_t n_;
};

inline bool& ring_on() {
  static bool on = environment::ring().value_or(true);
  return on;
}

}  // namespace ring_detail

TESSEL_INLINE ring_channel::ring_channel(MPI_Comm group) {
  check(MPI_Comm_dup(group, &comm_), "MPI_Comm_dup (the ring's channel)");
}
TESSEL_INLINE ring_channel::~ring_channel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}
TESSEL_INLINE bool ring_sums(MPI_Datatype type) {
  return ring_detail::ring_on() && (type == MPI_FLOAT || type == MPI_DOUBLE);
}
TESSEL_INLINE void set_ring(bool on) noexcept { ring_detail::ring_on() = on; }
TESSEL_INLINE std::unique_ptr<schedule> start_ring_reduce_scatter(
    std::shared_ptr<ring_channel> channel, const void* in, void* out, std::size_t block,
    MPI_Datatype type, std::size_t element_size) {
  return std::make_unique<ring_detail::reduce_scatter_ring>(std::move(channel), in, out, block,
                                                            type, element_size);
}
TESSEL_INLINE std::unique_ptr<schedule> start_ring_all_reduce(std::shared_ptr<ring_channel> channel,
                                                              void* data, std::size_t n,
                                                              MPI_Datatype type,
                                                              std::size_t element_size) {
  return std::make_unique<ring_detail::all_reduce_ring>(std::move(channel), data, n, type,
                                                        element_size);
}
#endif

}  // namespace tessel::comm::detail

namespace tessel::comm {
// Whether this job's sums of floats run in tessel's ring: false where TESSEL_RING=0 on any of
// its processes (the same answer on every process once tessel::initialize has started).
inline bool uses_ring() { return detail::ring_sums(MPI_FLOAT); }
}  // namespace tessel::comm
