#pragma once
// Where a parameter-server job's variables live: TensorFlow's variable partitioners
// (tf.distribute.experimental.partitioners), which split a large variable along its first
// dimension into shards, and the placement of the shards on the ps tasks, balanced by bytes.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "../core/errors.hpp"
#include "compilation.hpp"

namespace tessel::ps {

// FixedShardsPartitioner(num_shards): num_shards shards (fewer when the first dimension has
// fewer rows).
struct fixed_shards_partitioner {
  std::size_t num_shards = 1;
};
// MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=1, bytes_per_string=16): as many
// shards as keep each at least min_shard_bytes, at most max_shards.
struct min_size_partitioner {
  std::size_t min_shard_bytes = 256 << 10;
  std::size_t max_shards = 1;
  std::size_t bytes_per_string = 16;
};
// MaxSizePartitioner(max_shard_bytes, max_shards=None, bytes_per_string=16): as many shards as
// keep each at most max_shard_bytes (a row is never split), at most max_shards (0: no limit).
struct max_size_partitioner {
  std::size_t max_shard_bytes = 0;
  std::size_t max_shards = 0;
  std::size_t bytes_per_string = 16;
};
// No partitioner (std::monostate): every variable is one shard, as TensorFlow's default.
using variable_partitioner = std::variant<std::monostate, fixed_shards_partitioner,
                                          min_size_partitioner, max_size_partitioner>;

// The number of shards a partitioner gives a float32 variable of this shape (TensorFlow's
// formulas: min_max_variable_partitioner and variable_axis_size_partitioner along axis 0). A
// scalar is one shard.
TESSEL_PS_INLINE std::size_t num_shards(const variable_partitioner& p,
                                        const std::vector<std::size_t>& shape,
                                        std::size_t element_bytes = 4);

// The rows of each of n shards of `rows` rows: rows / n each, one more for the first rows % n
// (13 over 5: 3, 3, 3, 2, 2), as TensorFlow's ShardedVariable splits them.
inline std::vector<std::size_t> shard_rows(std::size_t rows, std::size_t n) {
  std::vector<std::size_t> out(n, rows / n);
  for (std::size_t i = 0; i < rows % n; ++i) ++out[i];
  return out;
}

// One shard of one variable, and the ps task that holds it.
struct shard_placement {
  std::size_t variable = 0, shard = 0;  // the variable's index, the shard's within it
  std::size_t first_row = 0, rows = 0;  // along the first dimension
  std::size_t offset = 0, values = 0;   // its first value in the variable's, and its count
  int ps = 0;
};

// A shard's values within its variable's (row-major) values.
template <class T>
std::span<T> shard_of(std::span<T> variable, const shard_placement& s) {
  return variable.subspan(s.offset, s.values);
}

// Every variable's shards and the ps task of each.
struct placement {
  std::vector<std::vector<std::size_t>> shapes;  // the variables' shapes
  std::vector<std::string> names;                // their paths
  std::vector<shard_placement> shards;           // variable by variable, shard by shard
  std::vector<std::size_t> bytes_per_ps;
  // The shards held by ps task p, in the order above (the order of its messages).
  [[nodiscard]] std::vector<std::size_t> shards_of(int p) const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < shards.size(); ++i)
      if (shards[i].ps == p) out.push_back(i);
    return out;
  }
  // What explain() prints: each variable's shards and their ps, then the bytes on each ps.
  [[nodiscard]] TESSEL_PS_INLINE std::string explain() const;
};

// The variables partitioned, and their shards placed on `num_ps` ps tasks balanced by bytes:
// the largest shard first, each to the ps holding the fewest bytes so far (the lowest index on a
// tie, so that equal shards go round-robin, as TensorFlow places variables).
TESSEL_PS_INLINE placement place(const std::vector<std::vector<std::size_t>>& shapes,
                                 const std::vector<std::string>& names,
                                 const variable_partitioner& p, int num_ps);

#if TESSEL_PS_DEFINITIONS
TESSEL_PS_INLINE std::size_t num_shards(const variable_partitioner& p,
                                        const std::vector<std::size_t>& shape,
                                        std::size_t element_bytes) {
  if (shape.empty() || shape[0] == 0) return 1;
  const std::size_t rows = shape[0];
  double bytes_per_row = static_cast<double>(element_bytes);
  for (std::size_t d = 1; d < shape.size(); ++d) bytes_per_row *= static_cast<double>(shape[d]);
  if (const auto* f = std::get_if<fixed_shards_partitioner>(&p)) {
    if (f->num_shards == 0)
      throw value_error("fixed_shards_partitioner: num_shards is 0; give at least 1");
    return std::min(f->num_shards, rows);
  }
  if (const auto* m = std::get_if<min_size_partitioner>(&p)) {
    if (m->max_shards == 0)
      throw value_error("min_size_partitioner: max_shards is 0; give at least 1");
    const double per_shard =
        std::max(1.0, std::floor(static_cast<double>(m->min_shard_bytes) / bytes_per_row));
    const auto n = static_cast<std::size_t>(std::ceil(static_cast<double>(rows) / per_shard));
    return std::max<std::size_t>(1, std::min(n, m->max_shards));
  }
  if (const auto* m = std::get_if<max_size_partitioner>(&p)) {
    if (m->max_shard_bytes == 0)
      throw value_error(
          "max_size_partitioner: max_shard_bytes is 0; give the largest shard's "
          "size in bytes");
    const double per_shard =
        std::max(1.0, std::floor(static_cast<double>(m->max_shard_bytes) / bytes_per_row));
    auto n = static_cast<std::size_t>(std::ceil(static_cast<double>(rows) / per_shard));
    if (m->max_shards > 0) n = std::min(n, m->max_shards);
    return std::max<std::size_t>(1, n);
  }
  return 1;
}

TESSEL_PS_INLINE std::string placement::explain() const {
  std::string out = "variables on " + std::to_string(bytes_per_ps.size()) + " ps tasks:\n";
  char line[256];
  for (const shard_placement& s : shards) {
    std::string shape = "(";
    for (std::size_t d = 0; d < shapes[s.variable].size(); ++d)
      shape += (d ? ", " : "") + std::to_string(d == 0 ? s.rows : shapes[s.variable][d]);
    shape += shapes[s.variable].size() == 1 ? ",)" : ")";
    std::snprintf(line, sizeof line, "  %-28s shard %zu rows %zu-%zu %-14s %9zu B  ps %d\n",
                  names[s.variable].c_str(), s.shard, s.first_row, s.first_row + s.rows,
                  shape.c_str(), s.values * 4, s.ps);
    out += line;
  }
  for (std::size_t p = 0; p < bytes_per_ps.size(); ++p) {
    std::snprintf(line, sizeof line, "  ps %zu holds %zu B\n", p, bytes_per_ps[p]);
    out += line;
  }
  return out;
}

TESSEL_PS_INLINE placement place(const std::vector<std::vector<std::size_t>>& shapes,
                                 const std::vector<std::string>& names,
                                 const variable_partitioner& p, int num_ps) {
  if (num_ps < 1) throw value_error("place: a parameter-server cluster needs a ps task");
  placement out{shapes, names, {}, std::vector<std::size_t>(static_cast<std::size_t>(num_ps), 0)};
  for (std::size_t v = 0; v < shapes.size(); ++v) {
    const std::size_t n = num_shards(p, shapes[v]);
    const std::size_t rows = shapes[v].empty() ? 1 : shapes[v][0];
    std::size_t per_row = 1;
    for (std::size_t d = 1; d < shapes[v].size(); ++d) per_row *= shapes[v][d];
    std::size_t first = 0, k = 0;
    for (const std::size_t r : shard_rows(rows, n)) {
      out.shards.push_back({v, k++, first, r, first * per_row, r * per_row, 0});
      first += r;
    }
  }
  std::vector<std::size_t> order(out.shards.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return out.shards[a].values > out.shards[b].values;
  });
  for (const std::size_t i : order) {
    const auto least = std::min_element(out.bytes_per_ps.begin(), out.bytes_per_ps.end());
    out.shards[i].ps = static_cast<int>(least - out.bytes_per_ps.begin());
    *least += out.shards[i].values * 4;
  }
  return out;
}

#endif

}  // namespace tessel::ps
