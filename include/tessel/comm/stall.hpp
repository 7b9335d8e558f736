// stall: what the collective watchdog says when a collective has waited past the timeout. From a
// snapshot of every process it can see (the processes of its machine, through shared memory:
// how many collectives each entered on each communicator and what the last few were, which one it
// waits in, whether it is stopped, has exited or has ended its initialize guard) it finds the
// processes the job really waits for, following processes that wait in another collective to the
// ones they wait for, and names them in one message. Processes that ran different collectives as
// the same number of one communicator took different paths through the program: that is named
// first, as the cause. Pure: no MPI, no clock, so that each case is tested on its own.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"

namespace tessel::comm::stall {

// A collective's name as a number, as processes publish it: FNV-1a, never 0.
constexpr std::uint64_t op_key(const char* op) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char* c = op; c != nullptr && *c != '\0'; ++c)
    h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
  return h == 0 ? 1 : h;
}

// The barrier every process passes when its tessel::initialize guard ends.
inline constexpr const char* guard_barrier = "the barrier where every process's guard ends";
// The collectives a message can name from their op_key.
inline constexpr std::array<const char*, 9> known_ops{
    "all_reduce", "all_gather", "reduce_scatter",   "broadcast",    "reduce",
    "all_to_all", "barrier",    "ncclCommInitRank", guard_barrier};

// One collective as a process ran it. Every process of a communicator must run the same ones in
// the same order. Processes that ran different collectives as the same number of one
// communicator took different paths through the program (one restored a backup, the other did
// not), and MPI may then pair collectives of different kinds, complete one on one side only, or
// wait for ever: the counters alone may then say that every process arrived.
struct call {
  std::uint64_t op = 0;     // op_key of its name; 0: not known
  std::uint64_t bytes = 0;  // the bytes each process contributes (all_gather: its block)
  int root = -1;            // a broadcast's or a reduce's root, as a rank of its group; -1: none
  bool max = false;         // an all_reduce of the maximum, not the sum
  // Started with MPI's non-blocking call (MPI_Iallreduce, ...): MPI never pairs it with the
  // blocking one, so two processes that call the two forms wait for each other for ever.
  bool nonblocking = false;
  friend bool operator==(const call&, const call&) = default;
};
// Collective number `seq` of a channel, as a process ran it.
struct ran {
  std::uint64_t seq = 0;
  call what;
};

// One process as the watchdog sees it.
struct process {
  bool known = false;                  // on this machine: the fields below are read from it
  bool stopped = false;                // its state is T (SIGSTOP, or held by a debugger)
  bool exited = false;                 // no longer runs (or a zombie)
  bool leaving = false;                // its tessel::initialize guard ended (main returned)
  int wait_channel = -1;               // the communicator of the collective it waits in, -1: none
  std::uint64_t wait_seq = 0;          // that collective's number there
  std::vector<std::uint64_t> entered;  // per channel: the collectives it has entered
  // Per channel: the last collectives it ran there (the watchdog keeps a few); empty: unknown.
  std::vector<std::vector<ran>> history;
  // Per channel: which communicator it belongs to there (group_key), 0 for none. Processes of
  // different rows of a mesh share a channel number (one per axis) but not its members: a
  // process whose key differs from the reporter's waits with the processes that share its key.
  // Empty: the reporter's members (one communicator per channel).
  std::vector<std::uint64_t> group;
};

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
// "all_reduce (sum) of 40 bytes", "broadcast of 4 bytes from rank 0", "barrier",
// "non-blocking all_reduce (sum) of 40 bytes".
TESSEL_INLINE std::string call_text(const call& c);
// What process `p` ran as collective `seq` of `channel`, or null when it is not known.
TESSEL_INLINE const call* ran_at(const process& p, int channel, std::uint64_t seq);
// "process 3 of 8", "processes 0-2 of 8".
TESSEL_INLINE std::string who_text(const std::vector<int>& ranks, int n);
// "a", "a and b", "a, b and c".
TESSEL_INLINE std::string listed(const std::vector<std::string>& parts);
// Process `r` added to the group of `value` (groups kept in order of their first member).
template <class V>
void group_by(std::vector<std::pair<V, std::vector<int>>>& groups, const V& value, int r) {
  const auto g =
      std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == value; });
  if (g == groups.end()) groups.push_back({value, {r}});
  else g->second.push_back(r);
}
// Where to look when processes took different paths, in both messages that name them.
inline constexpr const char* parted_cause =
    "a branch that some processes take and others do not, such as a file found by one process "
    "only, a test of process_id, a step skipped on a replica that holds no rows of the batch, or "
    "an exception caught on one process";
// What to do when the processes ran one collective in its two forms, blocking and non-blocking.
inline constexpr const char* forms_cause =
    "MPI never pairs a blocking collective with a non-blocking one, so each waits for the other "
    "for ever: every process must call a collective in the same form. tessel's training steps "
    "do so whatever rows each process holds; if the program calls no collective itself, this is "
    "a bug of tessel: report it with this message";
}  // namespace detail

// Why the job waits, as one message (without a trailing newline).
TESSEL_INLINE std::string describe(const snapshot& s);

// What a process ran on one channel, as the processes compare it when their guards end: its
// communicator there (group_key; 0: none), how many collectives it ran, and a fingerprint of
// them in order (each one's name, bytes, root and operation).
struct path {
  std::uint64_t group = 0, count = 0, fingerprint = 0;
  friend bool operator==(const path&, const path&) = default;
};
// The fingerprint after one more collective (op_key of its name, `shape`: its bytes, root and
// operation as one word).
constexpr std::uint64_t next_fingerprint(std::uint64_t fingerprint, std::uint64_t op,
                                         std::uint64_t shape) noexcept {
  return (fingerprint ^ op ^ (shape * 0x9e3779b97f4a7c15ULL)) * 0x100000001b3ULL + 1;
}
// Whether the processes of each communicator ran the same collectives in the same order, from
// every process's paths (by world rank, then by channel; `labels` names the channels): empty
// when they did, else one message naming the communicators where they parted and what each
// process ran there. Collectives run on a path that parted were paired by MPI as it could (a
// broadcast's root completes alone), so a job may end without waiting yet have computed wrong
// values after that point.
TESSEL_INLINE std::string parted_paths(const std::vector<std::vector<path>>& by_process,
                                       const std::vector<std::string>& labels);

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
TESSEL_INLINE std::string call_text(const call& c) {
  const auto name = std::find_if(known_ops.begin(), known_ops.end(),
                                 [&](const char* op) { return op_key(op) == c.op; });
  std::string out = c.nonblocking ? "non-blocking " : "";
  out += name != known_ops.end() ? *name : "a collective of a name not known here";
  if (c.op == op_key("all_reduce")) out += c.max ? " (maximum)" : " (sum)";
  if (c.bytes != 0) out += " of " + std::to_string(c.bytes) + (c.bytes == 1 ? " byte" : " bytes");
  if (c.root >= 0)
    out += (c.op == op_key("reduce") ? " to rank " : " from rank ") + std::to_string(c.root);
  return out;
}
TESSEL_INLINE const call* ran_at(const process& p, int channel, std::uint64_t seq) {
  if (channel < 0 || static_cast<std::size_t>(channel) >= p.history.size()) return nullptr;
  for (const ran& r : p.history[static_cast<std::size_t>(channel)])
    if (r.seq == seq && r.what.op != 0) return &r.what;
  return nullptr;
}
TESSEL_INLINE std::string who_text(const std::vector<int>& ranks, int n) {
  return (ranks.size() == 1 ? "process " : "processes ") + ranks_text(ranks) + " of " +
         std::to_string(n);
}
TESSEL_INLINE std::string listed(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
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
      // A process that ran another collective as this number of this communicator (it took
      // another path through the program) has not arrived at this one.
      const call* theirs = detail::ran_at(p, c, seq);
      const call* ours = via >= 0 && via < n
                             ? detail::ran_at(s.processes[static_cast<std::size_t>(via)], c, seq)
                             : nullptr;
      const bool other_call = theirs != nullptr && ours != nullptr && !(*theirs == *ours);
      const bool arrived = static_cast<std::size_t>(c) < p.entered.size() &&
                           p.entered[static_cast<std::size_t>(c)] >= seq && !other_call;
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

  // Processes of one communicator that ran different collectives as one number: for each
  // communicator, the first such number, the processes grouped by what they ran there. `forms`:
  // everywhere they differ, they ran one collective in its blocking and its non-blocking form.
  std::string paths;
  bool forms = true;
  for (int c = 0; c < static_cast<int>(s.channels.size()); ++c) {
    const auto& members = s.channels[static_cast<std::size_t>(c)].members;
    std::vector<std::pair<std::uint64_t, std::vector<int>>> groups;  // by key (0: reporter's)
    for (int r = 0; r < n; ++r) {
      if (!s.processes[static_cast<std::size_t>(r)].known) continue;
      std::uint64_t k = key(r, c);
      if (k == 0) {
        if (std::find(members.begin(), members.end(), r) == members.end()) continue;
        k = key(s.reporter, c);
      }
      detail::group_by(groups, k, r);
    }
    for (const auto& group : groups) {
      std::vector<std::uint64_t> seqs;
      for (const int r : group.second) {
        const process& p = s.processes[static_cast<std::size_t>(r)];
        if (static_cast<std::size_t>(c) < p.history.size())
          for (const ran& x : p.history[static_cast<std::size_t>(c)]) seqs.push_back(x.seq);
      }
      std::sort(seqs.begin(), seqs.end());
      seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
      for (const std::uint64_t seq : seqs) {
        std::vector<std::pair<call, std::vector<int>>> by_call;
        for (const int r : group.second) {
          if (const call* w = detail::ran_at(s.processes[static_cast<std::size_t>(r)], c, seq))
            detail::group_by(by_call, *w, r);
        }
        if (by_call.size() < 2) continue;
        for (const auto& [what, ranks] : by_call) {
          call other = what;
          other.nonblocking = by_call.front().first.nonblocking;
          forms = forms && other == by_call.front().first;
        }
        std::vector<std::string> ran_what;
        for (const auto& [what, ranks] : by_call)
          ran_what.push_back(detail::who_text(ranks, n) + " ran " + detail::call_text(what));
        paths += (paths.empty() ? "" : "; ") + std::string("as their collective number ") +
                 std::to_string(seq) + " over " + label(c) + ", " + detail::listed(ran_what);
        break;
      }
    }
  }

  std::string msg = "tessel: collective timeout: ";
  if (!paths.empty() && forms)
    msg += "the processes called one collective in different forms: " + paths + " (" +
           detail::forms_cause + ")";
  else if (!paths.empty())
    msg += "the processes took different paths through the program: " + paths +
           " (every process of a communicator must run the same collectives in the same order: "
           "look for " +
           detail::parted_cause + ")";
  std::vector<int> causes;
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (cause[i] == why::none) continue;
    causes.push_back(r);
    if (causes.size() > 1 || !paths.empty()) msg += "; ";
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
  if (causes.empty() && paths.empty()) {
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

TESSEL_INLINE std::string parted_paths(const std::vector<std::vector<path>>& by_process,
                                       const std::vector<std::string>& labels) {
  const int n = static_cast<int>(by_process.size());
  std::size_t channels = 0;
  for (const auto& p : by_process) channels = std::max(channels, p.size());
  std::string parts;
  for (std::size_t c = 0; c < channels; ++c) {
    // The communicators on this channel (rows of a mesh share it), in order of their first rank.
    std::vector<std::uint64_t> groups;
    for (const auto& p : by_process)
      if (c < p.size() && p[c].group != 0 &&
          std::find(groups.begin(), groups.end(), p[c].group) == groups.end())
        groups.push_back(p[c].group);
    for (const std::uint64_t g : groups) {
      std::vector<std::pair<path, std::vector<int>>> variants;
      for (int r = 0; r < n; ++r) {
        const auto& p = by_process[static_cast<std::size_t>(r)];
        if (c < p.size() && p[c].group == g) detail::group_by(variants, p[c], r);
      }
      if (variants.size() < 2) continue;
      std::vector<std::string> ran_what;
      for (std::size_t i = 0; i < variants.size(); ++i) {
        const path& p = variants[i].first;
        const bool same_count = std::any_of(variants.begin(), variants.end(), [&](auto& x) {
          return x.first.count == p.count && !(x.first == p);
        });
        ran_what.push_back(detail::who_text(variants[i].second, n) + " ran " +
                           std::to_string(p.count) +
                           (p.count == 1 ? " collective" : " collectives") +
                           (same_count ? " (sequence " + std::to_string(i + 1) + ")" : ""));
      }
      parts += (parts.empty() ? "" : "; ") + std::string("over ") +
               (c < labels.size() ? labels[c] : std::string("a communicator of another process")) +
               ", " + detail::listed(ran_what);
    }
  }
  if (parts.empty()) return {};
  return "tessel: the processes took different paths through the program: " + parts +
         ". Every process of a communicator must run the same collectives in the same order; "
         "MPI paired these as it could (a broadcast's root completes alone), so what was "
         "computed after the paths parted may be wrong. Look for " +
         detail::parted_cause + ".";
}
#endif

}  // namespace tessel::comm::stall
