#pragma once
// What fit/evaluate hand to callbacks: metric names and values, in order (Keras 3's `logs` dict,
// whose values are Python floats by the time a callback sees them).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"

namespace tessel {

using logs = std::vector<std::pair<std::string, double>>;

// The value logged under `name`. A name given twice is looked up as a dict built from the list
// would hold it: the later value wins.
TESSEL_INLINE std::optional<double> find_log(const logs& entries, std::string_view name);

// Sets `name` in place if present (a dict keeps the first position of a key), else appends it.
TESSEL_INLINE void set_log(logs& entries, std::string_view name, double value);

// Keras 3's CallbackList passes every logs dict through pythonify_logs, which rebuilds it from
// sorted(logs.items()): callbacks, and so the progress bar, see the names in code point order
// ("accuracy" before "loss", "loss" before "val_loss"). Byte order of UTF-8 is code point order.
// Repeated names collapse to one entry holding the later value, as dict construction would.
TESSEL_INLINE logs sorted_logs(const logs& entries);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE std::optional<double> find_log(const logs& entries, std::string_view name) {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return std::nullopt;
}

TESSEL_INLINE void set_log(logs& entries, std::string_view name, double value) {
  for (auto& entry : entries) {
    if (entry.first == name) {
      entry.second = value;
      return;
    }
  }
  entries.emplace_back(std::string(name), value);
}

TESSEL_INLINE logs sorted_logs(const logs& entries) {
  logs result;
  result.reserve(entries.size());
  for (const auto& [name, value] : entries) set_log(result, name, value);
  std::sort(result.begin(), result.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return result;
}
#endif

}  // namespace tessel
