// The collective watchdog's diagnosis of a stall (comm/stall.hpp): from a snapshot of the
// processes of a machine, the processes the job really waits for, named in one message, and
// none of those that were only waiting. (The watchdog itself, on real stalled jobs: tests/mpi,
// mpi.watchdog_*.)
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <tessel/comm/stall.hpp>

namespace {
using Catch::Matchers::Contains;
namespace stall = tessel::comm::stall;

stall::process waiting(int channel, std::uint64_t seq, std::vector<std::uint64_t> entered) {
  stall::process p;
  p.known = true;
  p.wait_channel = channel;
  p.wait_seq = seq;
  p.entered = std::move(entered);
  return p;
}
// `p` ran `what` as collective `seq` of `channel` (replacing what it ran there as that number).
void ran(stall::process& p, int channel, std::uint64_t seq, stall::call what) {
  if (p.history.size() <= static_cast<std::size_t>(channel))
    p.history.resize(static_cast<std::size_t>(channel) + 1);
  auto& h = p.history[static_cast<std::size_t>(channel)];
  std::erase_if(h, [&](const stall::ran& r) { return r.seq == seq; });
  h.push_back({seq, what});
}
stall::process running(std::vector<std::uint64_t> entered) {
  stall::process p;
  p.known = true;
  p.entered = std::move(entered);
  return p;
}
}  // namespace

TEST_CASE("stall: a stopped process of 2, named; the waiting one is not blamed", "[comm][stall]") {
  stall::snapshot s{.reporter = 0,
                    .op = "all_reduce",
                    .channel = 0,
                    .seq = 12,
                    .waited = 5,
                    .timeout = 5,
                    .channels = {{"mesh axis 'batch'", {0, 1}}},
                    .processes = {}};
  stall::process stopped = running({11});
  stopped.stopped = true;
  s.processes = {waiting(0, 12, {12}), stopped};
  const std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("collective timeout: process 1 of 2 is stopped (SIGSTOP, or held by a "
                         "debugger) and did not arrive. Process 0 waited 5 s (timeout 5 s) in "
                         "all_reduce over mesh axis 'batch' (its collective number 12). Aborting"));
  CHECK_THAT(m, Contains("TESSEL_COLLECTIVE_TIMEOUT=<seconds>"));
  CHECK_THAT(m, !Contains("process 0 of 2"));
}

TEST_CASE("stall: on a 2x4 mesh, processes that wait for waiting processes lead to the stopped one",
          "[comm][stall]") {
  // Channels: 0 and 1 the "model" axis of data rows 0 and 1 ({0..3}, {4..7}); 2 to 5 the "data"
  // axis of model columns 0 to 3 ({0, 4}, {1, 5}, {2, 6}, {3, 7}). Process 7 stopped before its
  // 10th collective over "model"; 4, 5, 6 wait for it there; 0, 1, 2 wait over "data" for 4, 5,
  // 6; 3 (the reporter) waits over "data" for 7 itself.
  stall::snapshot s{.reporter = 3,
                    .op = "all_reduce",
                    .channel = 5,
                    .seq = 7,
                    .waited = 10,
                    .timeout = 10,
                    .channels = {},
                    .processes = {}};
  s.channels = {{"mesh axis 'model'", {0, 1, 2, 3}}, {"mesh axis 'model'", {4, 5, 6, 7}},
                {"mesh axis 'data'", {0, 4}},        {"mesh axis 'data'", {1, 5}},
                {"mesh axis 'data'", {2, 6}},        {"mesh axis 'data'", {3, 7}}};
  const std::vector<std::uint64_t> row0{10, 0, 7, 7, 7, 7}, row1{0, 10, 6, 6, 6, 6};
  s.processes = {waiting(2, 7, row0),  waiting(3, 7, row0),        waiting(4, 7, row0),
                 waiting(5, 7, row0),  waiting(1, 10, row1),       waiting(1, 10, row1),
                 waiting(1, 10, row1), running({0, 9, 6, 6, 6, 6})};
  s.processes[7].stopped = true;
  const std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("process 7 of 8 is stopped (SIGSTOP, or held by a debugger) and did not "
                         "arrive. Process 3 waited 10 s (timeout 10 s) in all_reduce over mesh "
                         "axis 'data' (its collective number 7); processes 0-6 wait in "
                         "collectives for it."));
  for (int r = 0; r < 7; ++r) CHECK_THAT(m, !Contains("process " + std::to_string(r) + " of 8"));
}

TEST_CASE("stall: the rows of a mesh axis share a channel number; each waits with its own row",
          "[comm][stall]") {
  // As the watchdog numbers them: channel 0 is the "model" axis, whose rows are {0..3} and
  // {4..7}; channel 1 the "data" axis, {0, 4}, {1, 5}, {2, 6}, {3, 7}. The reporter (2) knows
  // the members of its own rows only; 6, which it waits for, waits over "model" in the other
  // row, for the stopped 7.
  stall::snapshot s{.reporter = 2,
                    .op = "all_reduce",
                    .channel = 1,
                    .seq = 7,
                    .waited = 10,
                    .timeout = 10,
                    .channels = {},
                    .processes = {}};
  s.channels = {{"mesh axis 'model'", {0, 1, 2, 3}}, {"mesh axis 'data'", {2, 6}}};
  const std::vector<std::uint64_t> row0{10, 7}, row1{10, 6};
  s.processes = {waiting(1, 7, row0),  waiting(1, 7, row0),  waiting(1, 7, row0),
                 waiting(1, 7, row0),  waiting(0, 10, row1), waiting(0, 10, row1),
                 waiting(0, 10, row1), running({9, 6})};
  s.processes[7].stopped = true;
  for (int r = 0; r < 8; ++r)
    s.processes[static_cast<std::size_t>(r)].group = {stall::group_key(r < 4 ? 0 : 4, 4),
                                                      stall::group_key(r % 4, 2)};
  std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("collective timeout: process 7 of 8 is stopped (SIGSTOP, or held by a "
                         "debugger) and did not arrive. Process 2 waited 10 s"));
  CHECK_THAT(m, !Contains("different collectives"));

  // The row of 4..7 and another process, 7 and that one on another machine: counted once, though
  // 4, 5 and 6 all wait over it.
  s.processes[7] = stall::process{};
  for (int r = 0; r < 4; ++r) s.processes[static_cast<std::size_t>(r)].wait_channel = 0;
  s.processes[2].wait_channel = 1;
  for (auto& p : s.processes) p.entered = {9, 6};
  for (int r = 4; r < 7; ++r)
    s.processes[static_cast<std::size_t>(r)].group[0] = stall::group_key(4, 5);
  m = stall::describe(s);
  CHECK_THAT(m, Contains("the processes it waits for that are on other machines could not be "
                         "checked (2 of them)"));
}

TEST_CASE("stall: a process stopped inside the collective, after arriving", "[comm][stall]") {
  stall::snapshot s{.reporter = 0,
                    .op = "all_gather",
                    .channel = 0,
                    .seq = 4,
                    .waited = 7,
                    .timeout = 6,
                    .channels = {{"mesh axis 'model'", {0, 1, 2}}},
                    .processes = {}};
  stall::process inside = waiting(0, 4, {4});
  inside.stopped = true;
  s.processes = {waiting(0, 4, {4}), waiting(0, 4, {4}), inside};
  const std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("process 2 of 3 is stopped (SIGSTOP, or held by a debugger) inside its "
                         "collective number 4 over mesh axis 'model'"));
  CHECK_THAT(m, !Contains("every process arrived"));
}

TEST_CASE("stall: a process running outside any collective, one that has left, one gone",
          "[comm][stall]") {
  stall::snapshot s{.reporter = 0,
                    .op = "all_reduce",
                    .channel = 0,
                    .seq = 3,
                    .waited = 5,
                    .timeout = 5,
                    .channels = {{"mesh axis 'batch'", {0, 1, 2, 3}}},
                    .processes = {}};
  stall::process left = waiting(1, 1, {2, 1});
  left.leaving = true;
  stall::process gone = running({2});
  gone.exited = true;
  s.processes = {waiting(0, 3, {3}), running({2}), left, gone};
  const std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("process 1 of 4 did not arrive: it runs outside any collective"));
  CHECK_THAT(m, Contains("process 2 of 4 has left the job: its tessel::initialize guard ended"));
  CHECK_THAT(m, Contains("process 3 of 4 has exited"));
}

TEST_CASE("stall: every process arrived, processes on other machines, a wait cycle",
          "[comm][stall]") {
  stall::snapshot s{.reporter = 0,
                    .op = "all_reduce",
                    .channel = 0,
                    .seq = 3,
                    .waited = 5,
                    .timeout = 5,
                    .channels = {{"mesh axis 'batch'", {0, 1}}},
                    .processes = {}};
  s.processes = {waiting(0, 3, {3}), waiting(0, 3, {3})};
  CHECK_THAT(stall::describe(s),
             Contains("every process arrived, so the collective itself did not complete (an MPI "
                      "or network fault)"));

  s.processes[1] = stall::process{};  // on another machine
  CHECK_THAT(stall::describe(s), Contains("the processes it waits for that are on other machines "
                                          "could not be checked (1)"));

  // Two processes at the same number of one communicator, one in an all_reduce and the other in
  // a broadcast (they took different paths: one restored a backup, the other did not): every
  // counter says both arrived, but they ran different collectives. This was reported as an MPI
  // or network fault in about one run of six.
  s.processes = {waiting(0, 3, {3}), waiting(0, 3, {3})};
  ran(s.processes[0], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 40});
  ran(s.processes[1], 0, 3, {.op = stall::op_key("broadcast"), .bytes = 4, .root = 0});
  CHECK_THAT(stall::describe(s),
             Contains("collective timeout: the processes took different paths through the "
                      "program: as their collective number 3 over mesh axis 'batch', process 0 "
                      "of 2 ran all_reduce (sum) of 40 bytes and process 1 of 2 ran broadcast of "
                      "4 bytes from rank 0 (every process of a communicator must run the same "
                      "collectives in the same order") &&
                 !Contains("MPI or network fault"));
  // The same collective: a fault.
  ran(s.processes[1], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 40});
  CHECK_THAT(stall::describe(s), Contains("an MPI or network fault") && !Contains("paths"));
  // One name, another size or operation: different collectives.
  ran(s.processes[1], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 4});
  CHECK_THAT(stall::describe(s), Contains("process 1 of 2 ran all_reduce (sum) of 4 bytes"));
  ran(s.processes[1], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 40, .max = true});
  CHECK_THAT(stall::describe(s), Contains("process 1 of 2 ran all_reduce (maximum) of 40 bytes"));
  // The same collective, started non-blocking on one process and blocking on the other (as the
  // gradient buckets were, when a process without rows skipped part of its backward pass): MPI
  // never pairs the two, so they wait for ever, which is no fault of MPI or of the network.
  ran(s.processes[1], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 40, .nonblocking = true});
  CHECK_THAT(stall::describe(s),
             Contains("collective timeout: the processes called one collective in different "
                      "forms: as their collective number 3 over mesh axis 'batch', process 0 of 2 "
                      "ran all_reduce (sum) of 40 bytes and process 1 of 2 ran non-blocking "
                      "all_reduce (sum) of 40 bytes (MPI never pairs a blocking collective with a "
                      "non-blocking one") &&
                 Contains("if the program calls no collective itself, this is a bug of tessel: "
                          "report it with this message") &&
                 !Contains("MPI or network fault") && !Contains("different paths"));
  // Another difference besides the form: different paths.
  ran(s.processes[1], 0, 3, {.op = stall::op_key("all_reduce"), .bytes = 4, .nonblocking = true});
  CHECK_THAT(stall::describe(s), Contains("the processes took different paths through the "
                                          "program") &&
                                     Contains("process 1 of 2 ran non-blocking all_reduce (sum) "
                                              "of 4 bytes") &&
                                     !Contains("different forms"));

  // 0 waits over channel 0 for 1, which waits over channel 1 for 0.
  s.channels.push_back({"mesh axis 'model'", {0, 1}});
  s.processes = {waiting(0, 3, {3, 4}), waiting(1, 5, {2, 5})};
  CHECK_THAT(stall::describe(s), Contains("the processes wait in different collectives for each "
                                          "other (the program calls collectives in a different "
                                          "order on different processes)"));
}

TEST_CASE("stall: processes that took different paths are named, even when all look arrived",
          "[comm][stall]") {
  const auto all_reduce = stall::call{.op = stall::op_key("all_reduce"), .bytes = 4};
  const auto broadcast = stall::call{.op = stall::op_key("broadcast"), .bytes = 4, .root = 0};
  const auto barrier = stall::call{.op = stall::op_key(stall::guard_barrier)};
  stall::snapshot s{.reporter = 1,
                    .op = "all_reduce",
                    .channel = 0,
                    .seq = 6,
                    .waited = 2,
                    .timeout = 2,
                    .channels = {{"the world", {0, 1}}},
                    .processes = {}};
  // Process 0 ran an extra broadcast as number 5 (as the root its broadcast completes without
  // the other); process 1's all_reduce 5 was paired by MPI with 0's all_reduce 6, and 1 now
  // waits in its all_reduce 6 while 0 waits in the barrier where the guards end, its number 7.
  // The counters say that 0 has passed 6: arrived. The histories say where the paths parted.
  s.processes = {waiting(0, 7, {7}), waiting(0, 6, {6})};
  for (std::uint64_t k = 1; k <= 4; ++k) {
    ran(s.processes[0], 0, k, all_reduce);
    ran(s.processes[1], 0, k, all_reduce);
  }
  ran(s.processes[0], 0, 5, broadcast);
  ran(s.processes[0], 0, 6, all_reduce);
  ran(s.processes[0], 0, 7, barrier);
  ran(s.processes[1], 0, 5, all_reduce);
  ran(s.processes[1], 0, 6, all_reduce);
  const std::string m = stall::describe(s);
  CHECK_THAT(m, Contains("collective timeout: the processes took different paths through the "
                         "program: as their collective number 5 over the world, process 0 of 2 "
                         "ran broadcast of 4 bytes from rank 0 and process 1 of 2 ran all_reduce "
                         "(sum) of 4 bytes"));
  CHECK_THAT(m, Contains("Process 1 waited 2 s (timeout 2 s) in all_reduce over the world (its "
                         "collective number 6)"));
  CHECK_THAT(m, !Contains("MPI or network fault") && !Contains("number 6 over the world, "));

  // Without the histories (older than what is kept), the counters' answer stands.
  s.processes[0].history.clear();
  s.processes[1].history.clear();
  CHECK_THAT(stall::describe(s), Contains("MPI or network fault"));

  // Four processes, grouped by what they ran; names not known are said so; the earliest number
  // at which they part is named.
  s.channels = {{"mesh axis 'batch'", {0, 1, 2, 3}}};
  s.processes = {waiting(0, 6, {6}), waiting(0, 6, {6}), waiting(0, 6, {6}), waiting(0, 6, {6})};
  for (int r = 0; r < 4; ++r) {
    ran(s.processes[static_cast<std::size_t>(r)], 0, 5, r == 2 ? broadcast : all_reduce);
    ran(s.processes[static_cast<std::size_t>(r)], 0, 6,
        r == 3 ? stall::call{.op = stall::op_key("my_collective")} : barrier);
  }
  CHECK_THAT(stall::describe(s),
             Contains("as their collective number 5 over mesh axis 'batch', processes 0, 1, 3 "
                      "of 4 ran all_reduce (sum) of 4 bytes and process 2 of 4 ran broadcast") &&
                 !Contains("number 6 over mesh axis 'batch', "));

  // Rows of a mesh share a channel number, not their members: rows that ran different things
  // (each row alike within itself) did not take different paths.
  s.channels = {{"mesh axis 'model'", {0, 1}}};
  s.processes = {waiting(0, 6, {6}), waiting(0, 6, {6}), waiting(0, 6, {6}), waiting(0, 6, {6})};
  for (int r = 0; r < 4; ++r) {
    auto& p = s.processes[static_cast<std::size_t>(r)];
    p.group = {stall::group_key(r < 2 ? 0 : 2, 2)};
    ran(p, 0, 6, r < 2 ? all_reduce : broadcast);
  }
  CHECK_THAT(stall::describe(s), !Contains("different paths"));
  ran(s.processes[3], 0, 6, all_reduce);  // row {2, 3} parts
  CHECK_THAT(stall::describe(s), Contains("as their collective number 6 over mesh axis 'model', "
                                          "process 2 of 4 ran broadcast of 4 bytes from rank 0 "
                                          "and process 3 of 4 ran all_reduce (sum)"));
}

TEST_CASE("stall: ranks are listed in ranges", "[comm][stall]") {
  using stall::detail::ranks_text;
  CHECK(ranks_text({3}) == "3");
  CHECK(ranks_text({0, 1}) == "0, 1");
  CHECK(ranks_text({0, 1, 2, 3, 4, 5, 6}) == "0-6");
  CHECK(ranks_text({0, 2, 5, 6, 7}) == "0, 2, 5-7");
}

TEST_CASE("stall: processes that ran different collectives are found when their guards end",
          "[comm][stall]") {
  using stall::path;
  const std::vector<std::string> labels{"the world", "mesh axis 'model'"};
  const auto fp = [](std::initializer_list<const char*> ops) {
    std::uint64_t f = 0;
    for (const char* op : ops) f = stall::next_fingerprint(f, stall::op_key(op), 64);
    return f;
  };
  const std::uint64_t world = stall::group_key(0, 2);
  const path same{world, 2, fp({"all_reduce", "all_reduce"})};
  CHECK(stall::parted_paths({{same}, {same}}, labels).empty());

  // One more collective on process 1 (a broadcast whose root completed it alone).
  const path more{world, 3, fp({"all_reduce", "broadcast", "all_reduce"})};
  CHECK(stall::parted_paths({{same}, {more}}, labels) ==
        "tessel: the processes took different paths through the program: over the world, "
        "process 0 of 2 ran 2 collectives and process 1 of 2 ran 3 collectives. Every process of "
        "a communicator must run the same collectives in the same order; MPI paired these as it "
        "could (a broadcast's root completes alone), so what was computed after the paths "
        "parted may be wrong. Look for a branch that some processes take and others do not, "
        "such as a file found by one process only, a test of process_id, a step skipped on a "
        "replica that holds no rows of the batch, or an exception caught on one process.");

  // As many, in another order: the fingerprint tells them apart.
  const path swapped{world, 2, fp({"broadcast", "all_reduce"})};
  const path other{world, 2, fp({"all_reduce", "broadcast"})};
  CHECK(other.fingerprint != swapped.fingerprint);
  CHECK_THAT(stall::parted_paths({{swapped}, {other}}, labels),
             Contains("process 0 of 2 ran 2 collectives (sequence 1) and process 1 of 2 ran 2 "
                      "collectives (sequence 2)"));

  // Rows of a mesh (two communicators on channel 1) may run different things; within a row they
  // may not. Processes not in a communicator of a channel (group 0) are left out.
  const std::uint64_t row0 = stall::group_key(0, 2), row1 = stall::group_key(2, 2);
  const path a{row0, 4, fp({"all_gather"})}, b{row1, 7, fp({"reduce_scatter"})};
  const path idle{};
  std::vector<std::vector<path>> rows{{same, a}, {same, a}, {same, b}, {same, b}, {same, idle}};
  for (auto& p : rows) p[0].group = stall::group_key(0, 5);
  CHECK(stall::parted_paths(rows, labels).empty());
  rows[3][1].count = 8;
  CHECK_THAT(stall::parted_paths(rows, labels),
             Contains("over mesh axis 'model', process 2 of 5 ran 7 collectives and process 3 "
                      "of 5 ran 8 collectives. Every") &&
                 !Contains("the world"));
}
