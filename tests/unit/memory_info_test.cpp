// get_memory_info and reset_memory_stats (TensorFlow's, by device name), and the counters behind
// them, which the host backend and the CUDA backend's pool share (backend/memory_counters.hpp):
// the host's buffers are counted as they are allocated and freed, the peak kept until a reset;
// a device this process does not have is refused, naming those it has.
#include <catch2/catch.hpp>
#include <string>
#include <tessel/tessel.hpp>

namespace {
std::string error_of(const char* device) {
  try {
    (void)tessel::get_memory_info(device);
  } catch (const tessel::value_error& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("memory_counters: current, peak and a reset", "[memory]") {
  tessel::backend::memory_counters c;
  c.add(100);
  c.add(50);
  c.remove(120);
  CHECK(c.info().current == 30);
  CHECK(c.info().peak == 150);
  c.reset_peak();
  CHECK(c.info().peak == 30);
  c.add(10);
  CHECK(c.info().peak == 40);
}

TEST_CASE("get_memory_info counts the host backend's buffers, by TensorFlow's device name",
          "[memory]") {
  using host = tessel::backend::host;
  tessel::reset_memory_stats("CPU:0");
  const tessel::memory_info before = tessel::get_memory_info("CPU:0");
  CHECK(before.current == tessel::get_memory_info().current);
  CHECK(before.peak == before.current);
  {
    const host::matrix m = host::make_zeros("counted", 10, 100);
    const tessel::memory_info held = tessel::get_memory_info("CPU");
    CHECK(held.current == before.current + 4000);
    CHECK(held.peak == before.current + 4000);
  }
  const tessel::memory_info after = tessel::get_memory_info("CPU:0");
  CHECK(after.current == before.current);
  CHECK(after.peak == before.current + 4000);
  tessel::reset_memory_stats("CPU");
  CHECK(tessel::get_memory_info().peak == before.current);
}

TEST_CASE("get_memory_info refuses a device the process does not have, naming those it has",
          "[memory]") {
  // (This program has no GPU backend: its counters are never in use.)
  const std::string gpu = error_of("GPU:0");
  CHECK(gpu.find("no device 'GPU:0' in this process") != std::string::npos);
  CHECK(gpu.find("'CPU:0' (the host backend's buffers) only") != std::string::npos);
  CHECK(gpu.find("link tessel::cuda") != std::string::npos);
  CHECK(error_of("TPU:0").find("no device 'TPU:0'") != std::string::npos);
  CHECK(error_of("CPU:1").find("no device 'CPU:1'") != std::string::npos);
  CHECK_THROWS_AS(tessel::reset_memory_stats("GPU:0"), tessel::value_error);
}
