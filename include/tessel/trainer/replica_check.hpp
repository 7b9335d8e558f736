// replica_check: after a load, the check that every process holds the same values where the
// layouts say they hold copies of one value (every variable under data_parallel; under
// model_parallel the blocks of processes with the same coordinates on the axes a variable is
// split over). Processes that each load another (valid) file, or pass other values to
// set_state_tree, would otherwise train apart without a word. One all_gather of two words per
// state variable over every process of the job; what differs is an error on every process
// alike, naming the variable and the processes.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/agreement.hpp"
#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../runtime/process_mesh.hpp"
#include "../state.hpp"

namespace tessel::detail {

// A checksum of a block of values, eight bytes at a time (FNV-1a's step on 64-bit words, then
// splitmix64's finalizer): equal blocks give equal sums; a block that differs in any bit gives
// another, but for a chance of 2^-64.
TESSEL_INLINE std::uint64_t block_checksum(std::span<const float> values);

// One state variable as the processes compare it: the replica group this process's block
// belongs to (its coordinates on the axes the variable is split over), and the block's checksum.
struct replica_words {
  std::uint64_t group = 0, checksum = 0;
};

// Gathers every process's words (one per state variable, `paths` naming them) and throws
// collective_value_error on every process when two processes of one group differ.
TESSEL_INLINE void require_same_replicas(std::string_view where,
                                         const std::vector<std::string>& paths,
                                         const std::vector<replica_words>& mine);
// The message for the gathered words (empty when every group agrees), `words` per process.
TESSEL_INLINE std::string replica_disagreement(std::string_view where,
                                               const std::vector<std::string>& paths,
                                               std::span<const std::uint64_t> all,
                                               std::size_t words, int processes);

// The check over a model's state (its variables, the optimizer's and the metrics' state), on the
// mesh `pm`; nothing to do on one process.
template <class B, class C>
void require_same_replicas(const state_tree<B>& state, const bound_mesh<C>& pm,
                           std::string_view where) {
  if (pm.size() <= 1) return;
  std::vector<std::string> paths;
  std::vector<replica_words> mine;
  std::vector<float> host;
  auto add = [&](const state_list<B>& list) {
    for (const auto& v : list) {
      replica_words w;
      if (v.is_tensor()) {
        const basic_dtensor<B>& t = v.tensor();
        hasher group;
        const std::uint32_t split = t.layout().sharded_axes();
        for (std::size_t a = 0; a < pm.axis_count(); ++a)
          if (split & (1u << a)) group.value(a).value(pm.coordinate(a));
        w.group = group.result();
        host.resize(t.local().size());
        B::download(t.local(), std::span<float>(host));
        w.checksum = block_checksum(host);
      } else if (v.dtype() == "int64") {
        w.checksum = static_cast<std::uint64_t>(v.integer());
      } else {
        const double r = v.real();
        std::memcpy(&w.checksum, &r, sizeof r);
      }
      paths.push_back(v.path);
      mine.push_back(w);
    }
  };
  add(state.trainable_variables);
  add(state.non_trainable_variables);
  add(state.optimizer_variables);
  add(state.metrics_variables);
  require_same_replicas(where, paths, mine);
}

}  // namespace tessel::detail

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include <algorithm>
#include <map>
#include <utility>

#include "../runtime/agreement.hpp"
#include "../runtime/world.hpp"

namespace tessel::detail {

TESSEL_INLINE std::uint64_t block_checksum(std::span<const float> values) {
  std::uint64_t h = 0xcbf29ce484222325ULL ^ values.size();
  const std::size_t n = values.size();
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    std::uint64_t word;
    std::memcpy(&word, values.data() + i, sizeof word);
    h = (h ^ word) * 0x100000001b3ULL;
  }
  if (i < n) {
    std::uint32_t last;
    std::memcpy(&last, values.data() + i, sizeof last);
    h = (h ^ last) * 0x100000001b3ULL;
  }
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

TESSEL_INLINE std::string replica_disagreement(std::string_view where,
                                               const std::vector<std::string>& paths,
                                               std::span<const std::uint64_t> all,
                                               std::size_t words, int processes) {
  auto at = [&](int p, std::size_t i) { return all[static_cast<std::size_t>(p) * words + i]; };
  for (int p = 1; p < processes; ++p)
    if (at(p, 0) != at(0, 0) || at(p, 1) != at(0, 1))
      return std::string(where) +
             ": the processes are not at the same point of the program, or hold models of "
             "another state: every process loads the same model's state in the same call";
  std::string msg;
  std::size_t differing = 0;
  for (std::size_t v = 0; v < paths.size(); ++v) {
    // group -> checksum -> processes
    std::map<std::uint64_t, std::map<std::uint64_t, std::vector<int>>> groups;
    for (int p = 0; p < processes; ++p)
      groups[at(p, 2 + 2 * v)][at(p, 3 + 2 * v)].push_back(p);
    for (const auto& [group, sums] : groups) {
      if (sums.size() == 1) continue;
      if (++differing > 3) break;  // the first few name the problem
      std::vector<std::vector<int>> holders;
      for (const auto& [sum, ranks] : sums) holders.push_back(ranks);
      std::sort(holders.begin(), holders.end());
      msg += msg.empty() ? "" : "; ";
      msg += "'" + paths[v] + "': ";
      static constexpr const char* nth[] = {"one value", "another", "a third", "a fourth"};
      for (std::size_t i = 0; i < holders.size(); ++i) {
        msg += i == 0 ? "" : i + 1 == holders.size() ? " and " : ", ";
        msg += runtime::detail::processes_text(holders[i]) +
               (holders[i].size() == 1 ? " has " : " have ") + nth[std::min<std::size_t>(i, 3)];
      }
      break;  // one group per variable is enough to name it
    }
  }
  if (msg.empty()) return msg;
  return std::string(where) + ": the processes hold different values where they must hold "
         "copies of one value: " + msg +
         (differing > 3 ? "; and more" : "") +
         ". Each process loaded other values (another file, or other arrays), so the replicas "
         "would train apart. Load the same file on every process (a path each of them reads, "
         "with the same contents), or pass every process the same values.";
}

TESSEL_INLINE void require_same_replicas(std::string_view where,
                                         const std::vector<std::string>& paths,
                                         const std::vector<replica_words>& mine) {
  const comm::communicator& all = runtime::world();
  if (all.size() <= 1) return;
  const std::size_t words = 2 + 2 * paths.size();
  // The first two words: where and how many variables (the same on every process of one call).
  std::vector<std::uint64_t> own(words), gathered(words * static_cast<std::size_t>(all.size()));
  own[0] = hasher().text(where).result();
  own[1] = paths.size();
  for (std::size_t v = 0; v < mine.size(); ++v) {
    own[2 + 2 * v] = mine[v].group;
    own[3 + 2 * v] = mine[v].checksum;
  }
  all.all_gather(std::span<const std::uint64_t>(own), std::span<std::uint64_t>(gathered));
  const std::string msg = replica_disagreement(where, paths, gathered, words, all.size());
  if (!msg.empty()) throw collective_value_error(msg);
}

}  // namespace tessel::detail
#endif  // TESSEL_DEFINITIONS
