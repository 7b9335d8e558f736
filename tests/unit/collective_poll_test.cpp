// How the host waits for a NCCL collective (comm/collective_poll.hpp), driven here without a GPU:
// a fake event that completes after some polls, a fake communicator that reports an asynchronous
// error, and a fake clock, standing in for cudaEventQuery, ncclCommGetAsyncError and the steady
// clock that nccl_group::wait gives it.
#include <catch2/catch.hpp>

#include <string>
#include <tessel/comm/collective_poll.hpp>

namespace cp = tessel::comm::collective_poll;

namespace {
// A collective that ends after `polls_to_done` looks (never when negative), a communicator whose
// asynchronous error appears at look `error_at` (never when negative), and a clock that advances
// `tick` seconds at each reading.
struct fake {
  int polls_to_done = -1, error_at = -1, device_error_at = -1;
  double tick = 0.0;
  int looks = 0, async_reads = 0;
  double clock = 0.0;
  cp::outcome wait(double limit) {
    return cp::wait(
        [&](std::string& why) {
          const int k = looks++;
          if (device_error_at >= 0 && k >= device_error_at) {
            why = "CUDA: an illegal memory access was encountered";
            return cp::progress::failed;
          }
          return polls_to_done >= 0 && k >= polls_to_done ? cp::progress::done
                                                           : cp::progress::pending;
        },
        [&](std::string& why) {
          ++async_reads;
          if (error_at < 0 || looks <= error_at) return false;
          why = "remote process exited or there was a network error";
          return true;
        },
        limit, [&] { return clock += tick; });
  }
};
}  // namespace

TEST_CASE("collective_poll: a collective that completes ends the wait without a failure",
          "[collective_poll]") {
  fake f{.polls_to_done = 5, .tick = 0.001};
  const cp::outcome o = f.wait(600);
  CHECK_FALSE(o.failed);
  CHECK(f.looks == 6);
  // The communicator's error is read at every look, the last (done) one included.
  CHECK(f.async_reads == 6);
}

TEST_CASE("collective_poll: an asynchronous error while the collective waits fails it",
          "[collective_poll]") {
  fake f{.error_at = 3, .tick = 0.001};  // never completes by itself
  const cp::outcome o = f.wait(600);
  CHECK(o.failed);
  CHECK_FALSE(o.timeout);
  CHECK(o.why == "remote process exited or there was a network error");
  CHECK(f.looks == 4);
}

TEST_CASE("collective_poll: an asynchronous error is caught when the collective ends at once",
          "[collective_poll]") {
  // A peer's failure can end NCCL's kernel early: the event completes, the result is incomplete,
  // and only the communicator's error tells.
  fake f{.polls_to_done = 0, .error_at = 0};
  const cp::outcome o = f.wait(600);
  CHECK(o.failed);
  CHECK(o.why == "remote process exited or there was a network error");
}

TEST_CASE("collective_poll: a device error fails the collective with CUDA's message",
          "[collective_poll]") {
  fake f{.device_error_at = 2, .tick = 0.001};
  const cp::outcome o = f.wait(600);
  CHECK(o.failed);
  CHECK_FALSE(o.timeout);
  CHECK(o.why == "CUDA: an illegal memory access was encountered");
}

TEST_CASE("collective_poll: a collective that outwaits the timeout fails as a timeout",
          "[collective_poll]") {
  fake f{.tick = 0.9};  // never completes, no error
  const cp::outcome o = f.wait(2.0);
  CHECK(o.failed);
  CHECK(o.timeout);
  CHECK(o.why == "waited 3 s (timeout 2 s): a process stopped, hangs, or waits in another "
                 "collective");
  // It gave up at the first reading past the limit: 2.7 s after the start.
  CHECK(f.looks == 3);
  const std::string m = cp::failure_message("all_reduce", "the batch axis", 1, 2, o);
  CHECK(m ==
        "tessel: NCCL all_reduce over the batch axis on process 1 of 2: waited 3 s (timeout "
        "2 s): a process stopped, hangs, or waits in another collective. Aborting the job. If a "
        "step really takes this long, raise the timeout: TESSEL_COLLECTIVE_TIMEOUT=<seconds> or "
        "tessel::set_collective_timeout.");
}

TEST_CASE("collective_poll: a timeout of 0 waits as long as the collective takes",
          "[collective_poll]") {
  fake f{.polls_to_done = 3000, .tick = 3600.0};  // an hour a poll
  const cp::outcome o = f.wait(0);
  CHECK_FALSE(o.failed);
  CHECK(f.looks == 3001);
}

TEST_CASE("collective_poll: an error's message names the collective, the group and the process",
          "[collective_poll]") {
  const cp::outcome o{true, false, "unhandled cuda error"};
  CHECK(cp::failure_message("reduce_scatter", "model", 3, 4, o) ==
        "tessel: NCCL reduce_scatter over model on process 3 of 4: unhandled cuda error. "
        "Aborting the job.");
}
