// memory_counters: the bytes a backend's buffers hold now, and the most at once since the program
// started or since the last reset, as TensorFlow's tf.config.experimental.get_memory_info and
// reset_memory_stats report them per device. The host backend counts its buffers in one; the CUDA
// backend counts the device memory it takes from CUDA's stream-ordered pool in another
// (device_memory_counters), which it marks as in use once its context starts.
#pragma once

#include <atomic>
#include <cstddef>

namespace tessel {
// What get_memory_info returns: bytes allocated now, and the most at once (TensorFlow's
// 'current' and 'peak').
struct memory_info {
  std::size_t current = 0;
  std::size_t peak = 0;
};
}  // namespace tessel

namespace tessel::backend {

struct memory_counters {
  std::atomic<std::size_t> current{0}, peak{0};
  void add(std::size_t bytes) noexcept {
    const std::size_t now = current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t seen = peak.load(std::memory_order_relaxed);
    while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
    }
  }
  void remove(std::size_t bytes) noexcept { current.fetch_sub(bytes, std::memory_order_relaxed); }
  [[nodiscard]] memory_info info() const noexcept {
    return {current.load(std::memory_order_relaxed), peak.load(std::memory_order_relaxed)};
  }
  // The peak starts again from what is allocated now.
  void reset_peak() noexcept {
    peak.store(current.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
};

// The GPU's counters (the CUDA backend's pool), and whether a GPU backend counts in them: false
// in a program without one, or before its context starts.
inline memory_counters& device_memory_counters() noexcept {
  static memory_counters c;
  return c;
}
inline std::atomic<bool>& device_memory_counted() noexcept {
  static std::atomic<bool> counted{false};
  return counted;
}

}  // namespace tessel::backend
