// stall: what the collective watchdog says when a collective has waited past the timeout. From a
// snapshot of every process it can see (the processes of its machine, through shared memory:
// how many collectives each entered on each communicator, which one it waits in, whether it is
// stopped, has exited or has ended its initialize guard) it finds the processes the job really
// waits for, following processes that wait in another collective to the ones they wait for, and
// names them in one message. Pure: no MPI, no clock, so that each case is tested on its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"

namespace tessel::comm::stall {

// One process as the watchdog sees it.
struct process {
  bool known = false;                  // on this machine: the fields below are read from it
  bool stopped = false;                // its state is T (SIGSTOP, or held by a debugger)
  bool exited = false;                 // no longer runs (or a zombie)
  bool leaving = false;                // its tessel::initialize guard ended (main returned)
  int wait_channel = -1;               // the communicator of the collective it waits in, -1: none
  std::uint64_t wait_seq = 0;          // that collective's number there
  std::uint64_t wait_op = 0;           // which collective that is (op_key of its name), 0: unknown
  std::vector<std::uint64_t> entered;  // per channel: the collectives it has entered
  // Per channel: which communicator it belongs to there (group_key), 0 for none. Processes of
  // different rows of a mesh share a channel number (one per axis) but not its members: a
  // process whose key differs from the reporter's waits with the processes that share its key.
  // Empty: the reporter's members (one communicator per channel).
  std::vector<std::uint64_t> group;
};

// A collective's name as a number, to tell two processes waiting at the same place of one
// communicator in different collectives (a broadcast and an all_reduce) apart: FNV-1a, never 0.
constexpr std::uint64_t op_key(const char* op) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char* c = op; c != nullptr && *c != '\0'; ++c)
    h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
  return h == 0 ? 1 : h;
}

// A communicator as a number: its lowest world rank and its size.
constexpr std::uint64_t group_key(int lowest, int size) noexcept {
  return ((static_cast<std::uint64_t>(lowest) + 1) << 32) | static_cast<std::uint32_t>(size);
}

// A channel as the reporter knows it: how messages name it, and the processes (world ranks) of
// the reporter's communicator there.
struct channel {
  std::string label;
  std::vector<int> members;
};

struct snapshot {
  int reporter = 0;     // the process whose wait timed out (world rank)
  const char* op = "";  // what it waits in, on `channel` with number `seq`
  int channel = -1;
  std::uint64_t seq = 0;
  double waited = 0, timeout = 0;  // seconds
  std::vector<struct channel> channels;
  std::vector<process> processes;  // by world rank
};

namespace detail {
// "3", "0-6", "0, 2, 5-7": ranks in increasing order.
TESSEL_INLINE std::string ranks_text(const std::vector<int>& sorted);
TESSEL_INLINE std::string seconds_text(double s, const char* format);
}  // namespace detail

// Why the job waits, as one message (without a trailing newline).
TESSEL_INLINE std::string describe(const snapshot& s);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::string ranks_text(const std::vector<int>& sorted) {
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(sorted[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}
TESSEL_INLINE std::string seconds_text(double s, const char* format) {
  char b[32];
  std::snprintf(b, sizeof b, format, s);
  return b;
}
}  // namespace detail

TESSEL_INLINE std::string describe(const snapshot& s) {
  const int n = static_cast<int>(s.processes.size());
  enum class why { none, stopped_inside, stopped, exited, leaving, elsewhere };
  std::vector<why> cause(s.processes.size(), why::none);
  std::vector<int> cause_channel(s.processes.size(), -1);
  std::vector<std::uint64_t> cause_seq(s.processes.size(), 0);
  std::vector<bool> visited(s.processes.size(), false), unknown(s.processes.size(), false);
  bool missing = false;    // some process has not entered a collective others wait in
  const std::uint64_t reporter_op = op_key(s.op);
  std::size_t hidden = 0;  // members on other machines whose ranks are not known here
  std::vector<std::pair<int, std::uint64_t>> counted;  // the rows counted in `hidden`

  // The members of `via`'s communicator on channel `c`: the reporter's, or the processes that
  // share its key there (those on other machines are counted in `hidden`).
  const auto key = [&](int r, int c) -> std::uint64_t {
    if (r < 0 || r >= n) return 0;
    const auto& g = s.processes[static_cast<std::size_t>(r)].group;
    return static_cast<std::size_t>(c) < g.size() ? g[static_cast<std::size_t>(c)] : 0;
  };
  const auto members_of = [&](int c, int via) {
    const std::uint64_t k = key(via, c);
    if (k == 0 || k == key(s.reporter, c)) return s.channels[static_cast<std::size_t>(c)].members;
    std::vector<int> members;
    for (int r = 0; r < n; ++r)
      if (key(r, c) == k) members.push_back(r);
    const auto size = static_cast<std::size_t>(k & 0xffffffffu);
    const auto row = std::pair{c, k};
    if (size > members.size() && std::find(counted.begin(), counted.end(), row) == counted.end()) {
      counted.push_back(row);
      hidden += size - members.size();
    }
    return members;
  };
  // The members of collective `seq` on `c` (as `via` sees it) that the waiters wait for; a member
  // that waits in another collective is followed to those it waits for.
  auto walk = [&](auto& self, int c, std::uint64_t seq, int via) -> void {
    if (c < 0 || static_cast<std::size_t>(c) >= s.channels.size()) return;
    for (const int m : members_of(c, via)) {
      if (m < 0 || m >= n) continue;
      const auto i = static_cast<std::size_t>(m);
      const process& p = s.processes[i];
      if (!p.known) {
        unknown[i] = true;
        continue;
      }
      // A process that waits at this number of this communicator, but in another collective (it
      // took another path through the program), has not arrived at this one.
      const bool elsewhere_here = p.wait_channel == c && p.wait_seq == seq && p.wait_op != 0 &&
                                  p.wait_op != reporter_op;
      const bool arrived = static_cast<std::size_t>(c) < p.entered.size() &&
                           p.entered[static_cast<std::size_t>(c)] >= seq && !elsewhere_here;
      missing = missing || !arrived;
      if (cause[i] != why::none) continue;
      if (p.stopped) {
        cause[i] = arrived ? why::stopped_inside : why::stopped;
        cause_channel[i] = c;
        cause_seq[i] = seq;
      } else if (p.exited) {
        cause[i] = why::exited;
      } else if (arrived) {
        continue;
      } else if (p.leaving) {
        cause[i] = why::leaving;
      } else if (p.wait_channel >= 0) {
        if (!visited[i]) {
          visited[i] = true;
          self(self, p.wait_channel, p.wait_seq, m);
        }
      } else {
        cause[i] = why::elsewhere;
      }
    }
  };
  if (s.reporter >= 0 && s.reporter < n) visited[static_cast<std::size_t>(s.reporter)] = true;
  walk(walk, s.channel, s.seq, s.reporter);

  auto label = [&](int c) {
    return c >= 0 && static_cast<std::size_t>(c) < s.channels.size()
               ? s.channels[static_cast<std::size_t>(c)].label
               : std::string("an unknown communicator");
  };
  const std::string of = " of " + std::to_string(n);
  std::string msg = "tessel: collective timeout: ";
  std::vector<int> causes;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (cause[i] == why::none) continue;
    causes.push_back(r);
    if (causes.size() > 1) msg += "; ";
    const std::string who = "process " + std::to_string(r) + of;
    switch (cause[i]) {
      case why::stopped_inside:
        msg += who + " is stopped (SIGSTOP, or held by a debugger) inside its collective number " +
               std::to_string(cause_seq[i]) + " over " + label(cause_channel[i]);
        break;
      case why::stopped:
        msg += who + " is stopped (SIGSTOP, or held by a debugger) and did not arrive";
        break;
      case why::exited:
        msg += who + " has exited";
        break;
      case why::leaving:
        msg += who +
               " has left the job: its tessel::initialize guard ended (main returned) while the "
               "others still run collectives";
        break;
      case why::elsewhere:
        msg += who +
               " did not arrive: it runs outside any collective (still computing, or hung, or "
               "waiting in something that is not a tessel collective)";
        break;
      case why::none:
        break;
    }
  }
  std::vector<int> others, waiting;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (unknown[i])
      others.push_back(r);
    else if (cause[i] == why::none && s.processes[i].known && s.processes[i].wait_channel >= 0)
      waiting.push_back(r);
  }
  std::string others_text = detail::ranks_text(others);
  if (hidden > 0)
    others_text += (others.empty() ? "" : ", and ") + std::to_string(hidden) +
                   (others.empty() ? " of them" : " more");
  if (causes.empty()) {
    if (!others_text.empty())
      msg += "the processes it waits for that are on other machines could not be checked (" +
             others_text + ")";
    else if (missing)
      msg +=
          "the processes wait in different collectives for each other (the program calls "
          "collectives in a different order on different processes)";
    else
      msg +=
          "every process arrived, so the collective itself did not complete (an MPI or "
          "network fault)";
  } else if (!others_text.empty()) {
    msg += "; " +
           (others.empty() ? std::to_string(hidden) + " processes" : "processes " + others_text) +
           " are on other machines and could not be checked";
  }
  msg += ". Process " + std::to_string(s.reporter) + " waited " +
         detail::seconds_text(s.waited, "%.0f") + " s (timeout " +
         detail::seconds_text(s.timeout, "%g") + " s) in " + s.op + " over " + label(s.channel) +
         " (its collective number " + std::to_string(s.seq) + ")";
  if (waiting.size() > 1)
    msg += "; processes " + detail::ranks_text(waiting) + " wait in collectives " +
           (causes.size() == 1 ? "for it"
            : causes.empty()   ? "too"
                               : "for them");
  msg +=
      ". Aborting the job. If a step really takes this long, raise the timeout: "
      "TESSEL_COLLECTIVE_TIMEOUT=<seconds> or tessel::set_collective_timeout.";
  return msg;
}
#endif

}  // namespace tessel::comm::stall
