// thread_pool: the host backend's threads — one budget per process for its GEMMs and its
// optimizer updates (PyTorch's intra-op pool), sized to the process's share of the machine's
// cores (cores / processes on the node, or TESSEL_NUM_THREADS). The caller runs the first part of
// every job itself; the workers wait for the next job spinning briefly (consecutive kernels of a
// step follow each other within microseconds), then sleep on a futex (std::atomic::wait), so that
// a core shared with other work is given back instead of spinning on sched_yield. Each job
// carries the caller's floating-point mode (MXCSR: denormals flushed or not) to the workers.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "../core/errors.hpp"

namespace tessel::backend {

class thread_pool {
 public:
  // A pool of `threads` (the caller included: threads - 1 workers).
  explicit thread_pool(std::size_t threads) : size_(std::max<std::size_t>(threads, 1)) {
    for (std::size_t i = 1; i < size_; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    stop_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  // Runs f(part, parts) for every part in [0, parts), parts = size(): part 0 on the caller, the
  // others on the workers; returns when all are done. Not reentrant: a part must not run a job.
  template <class F>
  void run(F&& f) {
    if (size_ == 1) return f(std::size_t{0}, std::size_t{1});
    job_ = [&f, this](std::size_t part) { f(part, size_); };
#if defined(__SSE2__)
    csr_ = _mm_getcsr();
#endif
    pending_.store(size_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    job_(0);
    // The workers' parts are about as long as this one: wait for them spinning.
    while (pending_.load(std::memory_order_acquire) != 0) spin_pause();
  }

 private:
  static void spin_pause() noexcept {
#if defined(__SSE2__)
    _mm_pause();
#endif
  }
  void work(std::size_t part) {
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
#if defined(__SSE2__)
      if (_mm_getcsr() != csr_) _mm_setcsr(csr_);
#endif
      job_(part);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::size_t size_;
  std::vector<std::thread> workers_;
  std::function<void(std::size_t)> job_;
  unsigned csr_ = 0;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
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
inline std::size_t pool_threads() {
  if (const char* v = std::getenv("TESSEL_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 1024)
      throw value_error(std::string("TESSEL_NUM_THREADS='") + v +
                        "' is not a number of threads; set it to a positive integer (the "
                        "threads each process computes with) or unset it to share the cores "
                        "among the processes on the machine");
    return static_cast<std::size_t>(n);
  }
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && n >= 1 && n <= 1024) return static_cast<std::size_t>(n);
    }
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max<std::size_t>(1, cores / std::max<std::size_t>(processes_on_node(), 1));
}
}  // namespace host_detail

}  // namespace tessel::backend
