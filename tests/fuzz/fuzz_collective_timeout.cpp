// libFuzzer harness for tessel::comm::parse_collective_timeout (include/tessel/comm/watchdog.hpp),
// which reads the environment variable TESSEL_COLLECTIVE_TIMEOUT (seconds) when the watchdog
// starts. The input is the variable's value: an environment string ends at its first 0 byte, so
// the text is cut there, as getenv would give it.
//
// The documented error is tessel::value_error naming the variable. Any other exception, a crash or
// a sanitizer report is a finding, and so is an accepted value that is not a finite number >= 0,
// or one the watchdog's conversion to nanoseconds (min(seconds, 1e9) * 1e9 as int64) cannot hold.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tessel/comm/watchdog.hpp>
#include <tessel/core/errors.hpp>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* text = reinterpret_cast<const char*>(data);
  const void* zero = std::memchr(text, 0, size);
  const std::string_view value(text, zero ? static_cast<const char*>(zero) - text : size);
  try {
    const double seconds = tessel::comm::parse_collective_timeout(value);
    if (!std::isfinite(seconds) || seconds < 0)
      fail("parse_collective_timeout accepted a value that is not a finite number >= 0");
    if (!(std::min(seconds, 1e9) * 1e9 < 9.2e18))
      fail("an accepted timeout does not fit the watchdog's int64 nanoseconds");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find("TESSEL_COLLECTIVE_TIMEOUT") == std::string::npos)
      fail("a parse_collective_timeout error does not name TESSEL_COLLECTIVE_TIMEOUT");
  }
  return 0;
}
