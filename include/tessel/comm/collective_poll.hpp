// collective_poll: how the host waits for a collective that a device runs (NCCL's, on its own
// stream), written without CUDA or NCCL so that the CPU test suite drives every way the wait can
// end: the collective completes; the device reports an error; the communicator reports an
// asynchronous error (a peer failed, a network fault); or the collective outwaits the collective
// timeout (TESSEL_COLLECTIVE_TIMEOUT, comm/watchdog.hpp). comm/nccl.hpp's nccl_group::wait calls
// it with cudaEventQuery and ncclCommGetAsyncError, and on a failure aborts the communicator and
// ends the job with the message failure_message() gives.
#pragma once

#include <cstdio>
#include <string>
#include <thread>

namespace tessel::comm::collective_poll {

// Seconds as the watchdog's messages print them (printf's `format`: "%.0f" waited, "%g" limits).
inline std::string seconds_text(double s, const char* format) {
  char b[32];
  std::snprintf(b, sizeof b, format, s);
  return b;
}

// What one look at the collective's end (its event) finds.
enum class progress { pending, done, failed };

struct outcome {
  bool failed = false;
  bool timeout = false;  // failed because it waited past the limit
  std::string why;       // what failed, for failure_message()
};

// Polls until the collective ends:
//   look(why) -> progress: done, pending, or failed (why set: the device's error);
//   async_error(why) -> bool: true (why set) when the communicator has an asynchronous error;
//   now() -> seconds on a steady clock;
//   limit: seconds the wait may take (0: no limit).
// The asynchronous error is read on every poll and once more after the collective ends: a
// collective whose peer failed can end early, its result incomplete.
template <class Look, class AsyncError, class Now>
outcome wait(Look&& look, AsyncError&& async_error, double limit, Now&& now) {
  const double start = now();
  for (long polls = 0;; ++polls) {
    std::string why;
    const progress p = look(why);
    if (p == progress::failed) return {true, false, why};
    if (async_error(why)) return {true, false, why};
    if (p == progress::done) return {};
    const double waited = now() - start;
    if (limit > 0 && waited > limit)
      return {true, true,
              "waited " + seconds_text(waited, "%.0f") + " s (timeout " +
                  seconds_text(limit, "%g") +
                  " s): a process stopped, hangs, or waits in another collective"};
    if (polls > 1000) std::this_thread::yield();
  }
}

// The message the job ends with: the collective, its group, this process, and what to do.
inline std::string failure_message(const char* op, const std::string& label, int rank, int size,
                                   const outcome& o) {
  std::string m = "tessel: NCCL " + std::string(op) + " over " + label + " on process " +
                  std::to_string(rank) + " of " + std::to_string(size) + ": " + o.why +
                  ". Aborting the job.";
  if (o.timeout)
    m += " If a step really takes this long, raise the timeout: "
         "TESSEL_COLLECTIVE_TIMEOUT=<seconds> or tessel::set_collective_timeout.";
  return m;
}

}  // namespace tessel::comm::collective_poll
