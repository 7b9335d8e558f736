// require_agreement: the check, before the first step of a distributed fit, evaluate or predict,
// that every process holds the same facts (core/agreement.hpp): one all_gather of a few words
// over every process of the job. What differs is an error on every process alike
// (collective_value_error) naming each fact, its values and the processes holding each, instead
// of a failure inside MPI or a hang a few steps later.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/agreement.hpp"
#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "world.hpp"

namespace tessel::runtime {

// Facts past this many are not compared (every caller has far fewer).
inline constexpr std::size_t max_facts = 60;

namespace detail {
TESSEL_INLINE std::string fact_value_text(const fact& f, std::uint64_t v);
TESSEL_INLINE std::string processes_text(const std::vector<int>& ranks);

// The message for the gathered words: `words` per process, each [the call's hash, the count of
// facts, the facts' values...]. Empty when every process holds the same.
TESSEL_INLINE std::string disagreement(std::string_view where, std::span<const fact> facts,
                                       std::span<const std::uint64_t> all, std::size_t words,
                                       int processes);
}  // namespace detail

// Collective over every process of the job (runtime::world()); nothing to do on one process.
// Throws collective_value_error on every process when a fact differs.
TESSEL_INLINE void require_agreement(std::string_view where, std::span<const fact> facts);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::string fact_value_text(const fact& f, std::uint64_t v) {
  switch (f.shown) {
    case fact::kind::number:
      return std::to_string(v);
    case fact::kind::signed_number:
      return std::to_string(static_cast<std::int64_t>(v));
    case fact::kind::fingerprint:
      return {};
  }
  return {};
}
TESSEL_INLINE std::string processes_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "process " : "processes ";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

TESSEL_INLINE std::string disagreement(std::string_view where, std::span<const fact> facts,
                                       std::span<const std::uint64_t> all, std::size_t words,
                                       int processes) {
  auto at = [&](int p, std::size_t i) { return all[static_cast<std::size_t>(p) * words + i]; };
  // Group the processes by what they hold at word i: value -> processes.
  auto groups = [&](std::size_t i) {
    std::map<std::uint64_t, std::vector<int>> g;
    for (int p = 0; p < processes; ++p) g[at(p, i)].push_back(p);
    return g;
  };
  if (groups(0).size() > 1) {
    std::string who;
    for (const auto& [v, ranks] : groups(0))
      if (v == at(0, 0)) who = processes_text(ranks);
    return std::string(where) + ": the processes are not at the same point of the program: " +
           who +
           " called this, the others something else. Under a distribution every process makes "
           "the same calls (fit, evaluate, predict, train_on_batch) in the same order, with the "
           "same data.";
  }
  // Processes that describe their data with a different number of facts built it differently;
  // the facts are compared up to the first that differs (the pipeline's stages come first).
  const bool same_count = groups(1).size() == 1;
  std::string msg;
  for (std::size_t f = 0; f < facts.size(); ++f) {
    if (!msg.empty() && !same_count) break;
    const auto g = groups(2 + f);
    if (g.size() == 1) continue;
    msg += msg.empty() ? "" : "; ";
    msg += facts[f].what + " differs: ";
    // Process 0's value first, then in the order of the processes that hold the others.
    std::vector<std::pair<std::uint64_t, std::vector<int>>> ordered(g.begin(), g.end());
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.second.front() < b.second.front(); });
    static constexpr const char* nth[] = {"one", "another", "a third", "a fourth"};
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      const auto& [v, ranks] = ordered[i];
      msg += i == 0 ? "" : i + 1 == ordered.size() ? " and " : ", ";
      if (facts[f].shown == fact::kind::fingerprint)  // a hash tells nothing but equality
        msg += processes_text(ranks) + (ranks.size() == 1 ? " has " : " have ") +
               nth[std::min<std::size_t>(i, 3)];
      else
        msg += fact_value_text(facts[f], v) + " on " + processes_text(ranks);
    }
  }
  if (msg.empty() && !same_count) msg = "the data and options are described differently";
  if (msg.empty()) return msg;
  return std::string(where) + ": the processes do not agree: " + msg +
         ". Under a distribution every process feeds the same global data stream (the same "
         "arrays, batch size, shuffle seed and options) and compiles the same model; each takes "
         "its block of every batch. Give every process the same data and arguments.";
}
}  // namespace detail

TESSEL_INLINE void require_agreement(std::string_view where, std::span<const fact> facts) {
  const comm::communicator& all = world();
  if (all.size() <= 1) return;
  const std::size_t n = std::min(facts.size(), max_facts);
  constexpr std::size_t words = 2 + max_facts;
  std::vector<std::uint64_t> mine(words, 0), gathered(words * static_cast<std::size_t>(all.size()));
  mine[0] = hasher().text(where).result();
  mine[1] = n;
  for (std::size_t i = 0; i < n; ++i) mine[2 + i] = facts[i].value;
  all.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(gathered));
  const std::string msg =
      detail::disagreement(where, facts.first(n), gathered, words, all.size());
  if (!msg.empty()) throw collective_value_error(msg);
}
#endif

}  // namespace tessel::runtime
