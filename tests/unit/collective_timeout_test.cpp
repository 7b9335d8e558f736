// The collective watchdog's settings: TESSEL_COLLECTIVE_TIMEOUT's values and
// set_collective_timeout. (What it does when a process stops: tests/mpi,
// mpi.watchdog_ends_a_stalled_job.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <tuple>

#include "test_helpers.hpp"

#include <tessel/tessel.hpp>

using Catch::Matchers::Contains;
using tessel::testing::message_of;

TEST_CASE("collective timeout: TESSEL_COLLECTIVE_TIMEOUT takes seconds, and nothing else",
          "[comm][watchdog]") {
  using tessel::comm::parse_collective_timeout;
  CHECK(parse_collective_timeout("600") == 600.0);
  CHECK(parse_collective_timeout("2.5") == 2.5);
  CHECK(parse_collective_timeout("0") == 0.0);
  for (const char* bad : {"", "10min", "-1", "nan", "inf", "1e999", "5 s", " "}) {
    INFO(bad);
    CHECK_THAT(message_of([&] { parse_collective_timeout(bad); }),
               Contains("TESSEL_COLLECTIVE_TIMEOUT='" + std::string(bad) +
                        "' is not a number of seconds") &&
                   Contains("0 for no timeout"));
  }
}

TEST_CASE("collective timeout: set_collective_timeout overrides the default and refuses nonsense",
          "[comm][watchdog]") {
  CHECK(tessel::collective_timeout().count() == 600.0);  // NCCL's and PyTorch's default
  tessel::set_collective_timeout(std::chrono::seconds(90));
  CHECK(tessel::collective_timeout().count() == 90.0);
  CHECK_THAT(message_of([] { tessel::set_collective_timeout(std::chrono::duration<double>(-1)); }),
             Contains("non-negative number of seconds"));
  CHECK(tessel::collective_timeout().count() == 90.0);
  tessel::set_collective_timeout(std::chrono::duration<double>(0));
  CHECK(tessel::collective_timeout().count() == 0.0);
}

TEST_CASE("collective timeout: a collective's size, root, operation and form survive its word",
          "[comm][watchdog]") {
  using tessel::comm::watchdog;
  namespace stall = tessel::comm::stall;
  const std::uint64_t op = stall::op_key("broadcast");
  for (const auto& [bytes, root, max, nonblocking] :
       {std::tuple{std::uint64_t{0}, -1, false, false},
        std::tuple{std::uint64_t{4}, 0, false, true},
        std::tuple{std::uint64_t{1} << 40, 524286, true, true},
        std::tuple{std::uint64_t{123456789}, 7, true, false}}) {
    const stall::call c =
        watchdog::call_of(op, watchdog::shape_word(bytes, root, max, nonblocking));
    CHECK(c == stall::call{
                   .op = op, .bytes = bytes, .root = root, .max = max, .nonblocking = nonblocking});
  }
  // Two collectives that differ only in size, root, operation or form are told apart.
  CHECK(watchdog::shape_word(4, -1, false) != watchdog::shape_word(8, -1, false));
  CHECK(watchdog::shape_word(4, 0, false) != watchdog::shape_word(4, 1, false));
  CHECK(watchdog::shape_word(4, -1, false) != watchdog::shape_word(4, -1, true));
  CHECK(watchdog::shape_word(4, -1, false) != watchdog::shape_word(4, -1, false, true));
}
