// thread_pool: the host backend's threads — one budget per process for its GEMMs and its
// optimizer updates (PyTorch's intra-op pool), sized to the process's share of the machine's
// cores (cores / processes on the node, or TESSEL_NUM_THREADS). A job has one part per thread:
// the caller runs part 0, worker i part i, and each part is claimed once, so a thread that has
// finished its own part takes any part not yet begun. A worker that does not get a core (another
// process keeps it busy) therefore delays nothing: the caller runs its part, instead of spinning
// until the scheduler gives the worker a time slice (which made training 12x slower beside one
// busy core). The workers wait for the next job spinning briefly (consecutive kernels of a step
// follow each other within microseconds), then sleep on a futex (std::atomic::wait); the caller
// waits for a part begun elsewhere spinning briefly, then yielding its core. Each job carries the
// caller's floating-point mode (MXCSR: denormals flushed or not) to the workers.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "../core/compilation.hpp"
#include "../core/environment.hpp"
#include "../core/errors.hpp"

namespace tessel::backend {

class thread_pool {
 public:
  // A pool of `threads` (the caller included: threads - 1 workers).
  explicit thread_pool(std::size_t threads);
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool();

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // If set, called on the caller's thread after every job with the job's start and end: what
  // benchmarks/step_breakdown uses to show where a training step's time goes (one branch per job
  // when unset).
  using clock = std::chrono::steady_clock;
  using job_observer = void (*)(clock::time_point begin, clock::time_point end);
  static job_observer& observer() noexcept {
    static job_observer o = nullptr;
    return o;
  }

  // Runs f(part, parts) for every part in [0, parts), parts = size(), each exactly once: part 0
  // on the caller, part i on worker i unless a thread that is done with its own part has taken
  // it first; returns when all are done. Not reentrant: a part must not run a job.
  template <class F>
  void run(F&& f) {
    const job_observer observe = observer();
    if (observe == nullptr) return run_job(f);
    const clock::time_point begin = clock::now();
    run_job(f);
    observe(begin, clock::now());
  }

 private:
  template <class F>
  void run_job(F& f) {
    if (size_ == 1) return f(std::size_t{0}, std::size_t{1});
    job_ = [&f, this](std::size_t part) { f(part, size_); };
#if defined(__SSE2__)
    csr_ = _mm_getcsr();
#endif
    done_.store(0, std::memory_order_relaxed);
    // Every part was claimed in the last job: release them (after job_, csr_ and done_ are set,
    // so that a worker still looking for parts of the last job runs this one's).
    for (std::size_t i = 1; i < size_; ++i) claimed_[i].store(false, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    job_(0);
    std::size_t mine = 0;
    for (std::size_t i = 1; i < size_; ++i)
      if (claim(i)) {
        job_(i);
        ++mine;
      }
    // The parts the workers claimed: wait for them, spinning briefly, then giving the core to
    // them (they may be waiting for it).
    const std::size_t others = size_ - 1 - mine;
    for (int spins = 0; done_.load(std::memory_order_acquire) != others; ++spins) {
      if (spins < 2000) spin_pause();
      else std::this_thread::yield();
    }
  }

  static void spin_pause() noexcept {
#if defined(__SSE2__)
    _mm_pause();
#endif
  }
  bool claim(std::size_t part) {
    return !claimed_[part].load(std::memory_order_relaxed) &&
           !claimed_[part].exchange(true, std::memory_order_acq_rel);
  }
  // Runs `part` of the current job if no other thread has taken it; counts it for the caller.
  void run_part(std::size_t part);
  void work(std::size_t part);

  std::size_t size_;
  std::vector<std::thread> workers_;
  std::function<void(std::size_t)> job_;
  unsigned csr_ = 0;
  std::unique_ptr<std::atomic<bool>[]> claimed_;  // per part: taken in the current job
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> done_{0};  // parts the workers have finished in the current job
  std::atomic<bool> stop_{false};
};

namespace host_detail {
// The threads this process computes with: TESSEL_NUM_THREADS if set (a positive integer), else
// OMP_NUM_THREADS or OPENBLAS_NUM_THREADS if one is a positive integer (what a job script sets
// for the BLAS, as torchrun sets OMP_NUM_THREADS), else the cores of the machine divided among
// the processes on it (set by the runtime, which knows them; 1 process until then).
inline std::size_t& processes_on_node() {
  static std::size_t n = 1;
  return n;
}
TESSEL_INLINE std::size_t pool_threads();
}  // namespace host_detail

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE thread_pool::thread_pool(std::size_t threads)
    : size_(std::max<std::size_t>(threads, 1)),
      claimed_(std::make_unique<std::atomic<bool>[]>(size_)) {
  for (std::size_t i = 0; i < size_; ++i) claimed_[i].store(true);  // no job yet
  for (std::size_t i = 1; i < size_; ++i) workers_.emplace_back([this, i] { work(i); });
}

TESSEL_INLINE thread_pool::~thread_pool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

TESSEL_INLINE void thread_pool::run_part(std::size_t part) {
  if (!claim(part)) return;
#if defined(__SSE2__)
  if (_mm_getcsr() != csr_) _mm_setcsr(csr_);
#endif
  job_(part);
  done_.fetch_add(1, std::memory_order_acq_rel);
}

TESSEL_INLINE void thread_pool::work(std::size_t part) {
  std::uint64_t seen = 0;
  for (;;) {
    // Wait for the next job spinning for about 50 microseconds (the next kernel of a step
    // comes within that), yielding the core to any other runnable thread (the data prefetch)
    // between short spins, then sleep until it comes.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    std::uint64_t g = generation_.load(std::memory_order_acquire);
    while (g == seen && std::chrono::steady_clock::now() < until) {
      for (int i = 0; i < 32 && g == seen; ++i) {
        spin_pause();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) std::this_thread::yield();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    // Its own part first (the rows it wrote last time, still in its cache), then any other.
    run_part(part);
    for (std::size_t i = 1; i < size_; ++i) run_part(i);
  }
}

namespace host_detail {
TESSEL_INLINE std::size_t pool_threads() {
  if (const auto n = environment::num_threads()) return *n;
  if (const auto n = environment::blas_threads()) return *n;
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<std::size_t>(1, cores / std::max<std::size_t>(processes_on_node(), 1));
}
}  // namespace host_detail
#endif  // TESSEL_DEFINITIONS

}  // namespace tessel::backend
