// ring: tessel's own reduce-scatter and all-reduce of sums, over point-to-point messages in a
// ring (the ring algorithms of NCCL and of Open MPI's coll/base). Each of a group's N processes
// sends a block to its right neighbour and receives one from its left, N - 1 times, adding each
// block it receives to its own; an all-reduce then passes the summed blocks round once more.
//
// Why not MPI's own: Open MPI 4.1 reduce-scatters (blocking coll/tuned and non-blocking libnbc
// alike) by reducing the whole buffer to one process and scattering it. For 2 processes over
// shared memory and 201 MB of floats that takes 165 ms, where the ring takes 40 ms; the ring's
// all-reduce takes 70 ms where MPI's takes 100 (benchmarks/README.md, "The ring").
//
// Every process sums each block in one fixed order (the ring's), so a result does not depend on
// timing, and an all-reduce leaves the same bits on every process. A collective in flight is a
// `schedule` that `request::test()` advances as its messages arrive and `request::wait()` runs
// to the end. TESSEL_RING=0 leaves the sums to MPI's own collectives.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/environment.hpp"

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

// Whether the ring sums `type`: floats and doubles, unless TESSEL_RING=0 (core/environment.hpp).
// Other types, and maxima, use MPI's collectives.
TESSEL_INLINE bool ring_sums(MPI_Datatype type);

// An all-reduce of fewer bytes than this uses MPI's (a loss, a metric: latency, not bandwidth).
inline constexpr std::size_t ring_all_reduce_min_bytes = std::size_t{1} << 20;

// The tags of the ring's messages: one per collective in flight on a communicator, taken in
// turn (every process starts a communicator's collectives in one order), above the tags a
// program's own messages would use first.
inline constexpr int ring_first_tag = 0x4000;
inline constexpr int ring_tags = 0x4000;

// Starts a reduce-scatter of sums over `comm`: block `rank` of the sum of everyone's `in`
// (`size` blocks of `block` elements) into `out`. `out == in` runs in place, the rest of `in`
// left undefined.
TESSEL_INLINE std::unique_ptr<schedule> start_ring_reduce_scatter(
    MPI_Comm comm, int tag, const void* in, void* out, std::size_t block, MPI_Datatype type,
    std::size_t element_size);
// Starts an all-reduce of sums of `data` (n elements) in place.
TESSEL_INLINE std::unique_ptr<schedule> start_ring_all_reduce(MPI_Comm comm, int tag, void* data,
                                                              std::size_t n, MPI_Datatype type,
                                                              std::size_t element_size);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace ring_detail {

// Blocks a ring receives into, kept for the next collective: a training step's buckets reuse
// the same few. Outside the backend's memory counters, as MPI's own temporaries are.
class scratch_pool {
 public:
  static scratch_pool& instance() {
    static scratch_pool pool;
    return pool;
  }
  std::unique_ptr<std::byte[]> take(std::size_t bytes, std::size_t& capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i].bytes >= bytes && (best == free_.size() || free_[i].bytes < free_[best].bytes))
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
  void give(std::unique_ptr<std::byte[]> p, std::size_t capacity) {
    if (!p) return;
    const std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back({std::move(p), capacity});
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

inline int count(std::size_t n) { return static_cast<int>(n); }
inline int left(int rank, int size) { return (rank + size - 1) % size; }
inline int right(int rank, int size) { return (rank + 1) % size; }
inline int block_at(int b, int size) { return ((b % size) + size) % size; }

// The common part: one exchange with the neighbours in flight at a time.
class ring_schedule : public schedule {
 protected:
  ring_schedule(MPI_Comm comm, int tag, MPI_Datatype type, std::size_t element_size)
      : comm_(comm), tag_(tag), type_(type), esize_(element_size) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &size_);
  }
  ~ring_schedule() override {
    // A schedule abandoned mid-way (its request destroyed on an error path) completes its
    // messages, so that MPI writes no freed buffer.
    MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
  }
  void exchange(const void* send, std::size_t send_n, void* receive, std::size_t receive_n) {
    MPI_Irecv(receive, count(receive_n), type_, left(rank_, size_), tag_, comm_, &requests_[0]);
    MPI_Isend(send, count(send_n), type_, right(rank_, size_), tag_, comm_, &requests_[1]);
  }
  // true once the exchange in flight is complete.
  bool arrived(bool blocking) {
    if (blocking) return MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE), true;
    int done = 0;
    MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE);
    return done != 0;
  }

  MPI_Comm comm_;
  int tag_;
  MPI_Datatype type_;
  std::size_t esize_;
  int rank_ = 0, size_ = 1;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

// Reduce-scatter: at step s a process sends block (rank - s - 1) (its own at step 0, after that
// the sum it received and added to) and receives block (rank - s - 2), adding its own. After
// N - 1 steps it holds block `rank`, which the last step receives straight into `out` (unless
// in place).
class reduce_scatter_ring final : public ring_schedule {
 public:
  reduce_scatter_ring(MPI_Comm comm, int tag, const void* in, void* out, std::size_t block,
                      MPI_Datatype type, std::size_t element_size)
      : ring_schedule(comm, tag, type, element_size),
        in_(static_cast<const std::byte*>(in)),
        out_(static_cast<std::byte*>(out)),
        block_(block) {
    // Every step receives into scratch but the last out of place; two blocks take turns.
    const int receives = in == out ? size_ - 1 : size_ - 2;
    for (int i = 0; i < receives && i < 2; ++i) acc_[i] = scratch(block_ * esize_);
    post();
  }
  bool advance(bool blocking) override {
    while (step_ < size_ - 1) {
      if (!arrived(blocking)) return false;
      const bool last = step_ == size_ - 2;
      const std::byte* own = in_block(last ? rank_ : block_at(rank_ - step_ - 2, size_));
      if (last && in_ != out_) add(type_, out_, out_, own, block_);
      else add(type_, last ? out_ : receiving(), receiving(), own, block_);
      ++step_;
      if (step_ < size_ - 1) post();
    }
    acc_[0] = scratch();
    acc_[1] = scratch();
    return true;
  }

 private:
  [[nodiscard]] const std::byte* in_block(int b) const {
    return in_ + static_cast<std::size_t>(b) * block_ * esize_;
  }
  // Where step_ receives: its scratch block, the two taking turns (the last step: `out`).
  [[nodiscard]] std::byte* receiving() const {
    if (step_ == size_ - 2 && in_ != out_) return out_;
    return acc_[step_ % 2].get();
  }
  void post() {
    const void* send = step_ == 0 ? static_cast<const void*>(in_block(block_at(rank_ - 1, size_)))
                                  : acc_[(step_ - 1) % 2].get();
    exchange(send, block_, receiving(), block_);
  }

  const std::byte* in_;
  std::byte* out_;
  std::size_t block_;
  int step_ = 0;
  scratch acc_[2];
};

// All-reduce in place over blocks of n * b / N elements (any n): N - 1 steps that sum as the
// reduce-scatter's (block (rank - s) sent, block (rank - s - 1) received into scratch and added
// in place), after which a process holds block (rank + 1) summed; then N - 1 steps that pass the
// summed blocks round, each received in place.
class all_reduce_ring final : public ring_schedule {
 public:
  all_reduce_ring(MPI_Comm comm, int tag, void* data, std::size_t n, MPI_Datatype type,
                  std::size_t element_size)
      : ring_schedule(comm, tag, type, element_size), data_(static_cast<std::byte*>(data)), n_(n) {
    const auto parts = static_cast<std::size_t>(size_);
    receive_ = scratch((n + parts - 1) / parts * esize_);  // the largest block
    post();
  }
  bool advance(bool blocking) override {
    const int steps = 2 * (size_ - 1);
    while (step_ < steps) {
      if (!arrived(blocking)) return false;
      if (step_ < size_ - 1) {
        const int b = block_at(rank_ - step_ - 1, size_);
        add(type_, at(b), at(b), receive_.get(), elements(b));
      }
      ++step_;
      if (step_ < steps) post();
    }
    receive_ = scratch();
    return true;
  }

 private:
  // Block b: elements [n * b / N, n * (b + 1) / N); the first blocks are the smaller.
  [[nodiscard]] std::size_t first(int b) const {
    return n_ * static_cast<std::size_t>(b) / static_cast<std::size_t>(size_);
  }
  [[nodiscard]] std::size_t elements(int b) const { return first(b + 1) - first(b); }
  [[nodiscard]] std::byte* at(int b) const { return data_ + first(b) * esize_; }
  void post() {
    if (step_ < size_ - 1) {
      const int send = block_at(rank_ - step_, size_), receive = block_at(rank_ - step_ - 1, size_);
      exchange(at(send), elements(send), receive_.get(), elements(receive));
    } else {
      const int s = step_ - (size_ - 1);
      const int send = block_at(rank_ + 1 - s, size_), receive = block_at(rank_ - s, size_);
      exchange(at(send), elements(send), at(receive), elements(receive));
    }
  }

  std::byte* data_;
  std::size_t n_;
  int step_ = 0;
  scratch receive_;
};

}  // namespace ring_detail

TESSEL_INLINE bool ring_sums(MPI_Datatype type) {
  static const bool on = environment::ring().value_or(true);
  return on && (type == MPI_FLOAT || type == MPI_DOUBLE);
}
TESSEL_INLINE std::unique_ptr<schedule> start_ring_reduce_scatter(
    MPI_Comm comm, int tag, const void* in, void* out, std::size_t block, MPI_Datatype type,
    std::size_t element_size) {
  return std::make_unique<ring_detail::reduce_scatter_ring>(comm, tag, in, out, block, type,
                                                            element_size);
}
TESSEL_INLINE std::unique_ptr<schedule> start_ring_all_reduce(MPI_Comm comm, int tag, void* data,
                                                              std::size_t n, MPI_Datatype type,
                                                              std::size_t element_size) {
  return std::make_unique<ring_detail::all_reduce_ring>(comm, tag, data, n, type, element_size);
}
#endif

}  // namespace tessel::comm::detail
