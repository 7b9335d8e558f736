#pragma once
// tessel::dataset: tf.data's input pipeline over host arrays (from_tensor_slices, batch, shuffle,
// cache, prefetch, repeat, take), iterated with a range-for. prefetch runs a thread: link with
// -pthread.
//
// A dataset is an immutable chain of stages over one pair of source arrays; copies share the
// chain, so copying is cheap. Samples travel as row indices into the sources until an element
// must hold values (at the consumer, in a prefetch thread, or when batching already-copied
// elements), so shuffling 60000 samples moves indices, not 60000 x 784 floats.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "../core/agreement.hpp"
#include "../core/errors.hpp"
#include "../core/shard.hpp"
#include "../random/shared_seed.hpp"
#include "array.hpp"
#include "array_ops.hpp"

namespace tessel {

namespace data {

// tf.data.INFINITE_CARDINALITY: what cardinality() gives for a dataset that never ends (repeat()).
// Where tf.data gives UNKNOWN_CARDINALITY, cardinality() gives std::nullopt (no stage here
// makes the count unknown yet; a filter would).
inline constexpr std::size_t infinite_cardinality = std::numeric_limits<std::size_t>::max();

// tf.data.AUTOTUNE as prefetch's buffer size: tessel keeps autotune_prefetch elements ready.
inline constexpr std::int64_t autotune = -1;
inline constexpr std::size_t autotune_prefetch = 2;

// The shape of a's samples (its rows) and a checksum of the values of up to 64 of them, spread
// over the array (reading them all would cost as much as an epoch's input), as facts named after
// `name`: what processes of a distributed job compare.
template <class T>
void describe_samples(const array<T>& a, std::string_view name, std::vector<fact>& out) {
  const std::string n(name);
  const std::span<const std::size_t> sample =
      a.shape.empty() ? std::span<const std::size_t>{}
                      : std::span<const std::size_t>(a.shape).subspan(1);
  out.push_back(fact::fingerprint("the shape of " + n + "'s samples", shape_fingerprint(sample)));
  hasher values;
  const std::size_t rows = a.rows(), row = a.row_size();
  const std::size_t spread = std::min<std::size_t>(rows, 64);
  for (std::size_t i = 0; i < spread && a.values.size() >= rows * row; ++i) {
    const std::size_t r = spread == rows ? i : i * (rows / spread);
    values.values(std::span<const T>(a.values).subspan(r * row, row));
  }
  out.push_back(
      fact::fingerprint("the values of " + n + " (a checksum of 64 samples)", values.result()));
}

// auto_shard_policy file on a dataset whose source is arrays (from_tensor_slices): a value_error
// saying what to use instead.
[[noreturn]] TESSEL_INLINE void unshardable_by_file();

// Dataset.from_files's reader: the samples of one file, x and y with equal first dimensions.
template <class X, class Y>
using file_reader = std::function<std::pair<array<X>, array<Y>>(const std::filesystem::path&)>;

}  // namespace data

namespace detail::pipeline {

using cardinality_t = std::optional<std::size_t>;

// The arrays from_tensor_slices sliced, with the per-sample shapes worked out once.
template <class X, class Y>
struct source {
  array<X> x;
  array<Y> y;
  std::size_t rows = 0;
  std::vector<std::size_t> x_sample_shape, y_sample_shape;
  std::size_t x_row = 0, y_row = 0;  // values per sample

  // The number of samples, their shapes, and a checksum of some of their values.
  void describe(std::vector<fact>& out) const {
    out.push_back(fact::number("the number of samples", rows));
    data::describe_samples(x, "x", out);
    data::describe_samples(y, "y", out);
  }

  source(array<X> xs, array<Y> ys) : x(std::move(xs)), y(std::move(ys)) {
    data::check_shape(x, "from_tensor_slices: x");
    data::check_shape(y, "from_tensor_slices: y");
    if (x.shape.empty() || y.shape.empty()) {
      throw value_error(
          std::string("from_tensor_slices: ") + (x.shape.empty() ? "x" : "y") +
          " has rank 0 (shape ()); slicing needs a first dimension (one entry per sample)");
    }
    if (x.shape[0] != y.shape[0]) {
      throw value_error("from_tensor_slices: x has " + std::to_string(x.shape[0]) +
                        " samples (shape " + shape_to_string(x.shape) + ") but y has " +
                        std::to_string(y.shape[0]) + " (shape " + shape_to_string(y.shape) +
                        "); their first dimensions must be equal (one label per sample)");
    }
    rows = x.shape[0];
    x_sample_shape = data::detail::row_shape(x.shape);
    y_sample_shape = data::detail::row_shape(y.shape);
    x_row = array<X>::element_count(x_sample_shape);
    y_row = array<Y>::element_count(y_sample_shape);
  }
};

// An element before it holds values: one source row (a sample) ...
struct one_row {
  std::size_t row = 0;
};
// ... or a batch of rows: leading is the batch dimensions ({32}, or {4, 32} for a batch of
// batches), rows the source rows in row-major order over them.
struct many_rows {
  std::vector<std::size_t> leading;
  std::vector<std::size_t> rows;
};
template <class X, class Y>
using values = std::pair<array<X>, array<Y>>;
template <class X, class Y>
using element = std::variant<one_row, many_rows, values<X, Y>>;

template <class T>
void fill_rows(const array<T>& src, std::size_t row_size,
               const std::vector<std::size_t>& sample_shape, std::span<const std::size_t> leading,
               std::span<const std::size_t> rows, array<T>& out) {
  out.shape.assign(leading.begin(), leading.end());
  out.shape.insert(out.shape.end(), sample_shape.begin(), sample_shape.end());
  out.values.resize(element_count(out.shape, "batch"));
  data::detail::gather_rows(src.values.data(), row_size, rows, out.values.data());
}

// Gives e its values in out; out's buffers are reused, so the consumer's element does not
// reallocate each step.
template <class X, class Y>
void materialize(const source<X, Y>& s, element<X, Y>& e, values<X, Y>& out) {
  if (const auto* r = std::get_if<one_row>(&e)) {
    const std::size_t row[1] = {r->row};
    fill_rows(s.x, s.x_row, s.x_sample_shape, {}, row, out.first);
    fill_rows(s.y, s.y_row, s.y_sample_shape, {}, row, out.second);
  } else if (const auto* m = std::get_if<many_rows>(&e)) {
    fill_rows(s.x, s.x_row, s.x_sample_shape, m->leading, m->rows, out.first);
    fill_rows(s.y, s.y_row, s.y_sample_shape, m->leading, m->rows, out.second);
  } else {
    out = std::move(std::get<values<X, Y>>(e));
  }
}

// One pass over a stage's elements (one epoch, as far as that stage knows).
template <class X, class Y>
struct pass {
  virtual ~pass() = default;
  // Writes the next element to out and returns true, or returns false at the end, and again on
  // every later call.
  virtual bool next(element<X, Y>& out) = 0;
};

// One shard of the files a dataset reads (auto_shard_policy file): files index, index + shards,
// ...; `rebatch` until the last batch() of the pipeline (the global batch, met first on the way
// down from the top) has taken this shard's part of its size.
struct file_shard {
  std::size_t shards = 1, index = 0;
  bool rebatch = true;
};

template <class X, class Y>
struct node {
  virtual ~node() = default;
  // key numbers the pass: the dataset's iteration count, mixed with the repetition index under a
  // repeat. shuffle derives its order from it, so orders are reproducible from the seed.
  virtual std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const = 0;
  virtual cardinality_t cardinality() const = 0;
  // What this stage and those before it make of the data, as facts every process of a
  // distributed job must hold alike (the source's first, then each stage's).
  virtual void describe(std::vector<fact>& out) const = 0;
  // This stage rebuilt over one shard of the files its source reads: a file source keeps the
  // shard's files, the global batch becomes the shard's part of it, and every other stage is
  // built again as it was (a cache starts empty). A source of arrays throws.
  virtual std::shared_ptr<const node> shard_files(file_shard s) const = 0;
};
template <class X, class Y>
using node_ptr = std::shared_ptr<const node<X, Y>>;
template <class X, class Y>
using source_ptr = std::shared_ptr<const source<X, Y>>;

// splitmix64's finalizer: spreads keys and seeds so that neighbouring ones give unrelated orders.
inline std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return mix(mix(a + 0x9e3779b97f4a7c15ULL) + b);
}

// splitmix64 with an unbiased bounded draw: unlike std::uniform_int_distribution its output is
// the same with every standard library, so a seed gives one order everywhere.
class rng {
 public:
  explicit rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return mix(state_ += 0x9e3779b97f4a7c15ULL); }
  std::size_t below(std::size_t n) {
    const std::uint64_t threshold = (0 - static_cast<std::uint64_t>(n)) % n;
    for (;;) {
      const std::uint64_t r = next();
      if (r >= threshold) return static_cast<std::size_t>(r % n);
    }
  }

 private:
  std::uint64_t state_;
};

// ---- from_tensor_slices

template <class X, class Y>
class slices_node final : public node<X, Y> {
 public:
  explicit slices_node(source_ptr<X, Y> s) : source_(std::move(s)) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t) const override {
    return std::make_unique<slices_pass>(source_->rows);
  }
  cardinality_t cardinality() const override { return source_->rows; }
  void describe(std::vector<fact>& out) const override { source_->describe(out); }
  node_ptr<X, Y> shard_files(file_shard) const override { data::unshardable_by_file(); }

 private:
  struct slices_pass final : pass<X, Y> {
    explicit slices_pass(std::size_t n) : rows(n) {}
    bool next(element<X, Y>& out) override {
      if (row >= rows) return false;
      out = one_row{row++};
      return true;
    }
    std::size_t rows, row = 0;
  };
  source_ptr<X, Y> source_;
};

// ---- from_files

// The files a dataset reads and how to read one. A pass opens its files in order, one at a time,
// and yields their samples one by one (each a copy: a file's arrays live only while it is read).
template <class X, class Y>
struct file_list {
  std::vector<std::filesystem::path> files;
  data::file_reader<X, Y> read;
};

template <class X, class Y>
class files_node final : public node<X, Y> {
 public:
  files_node(std::shared_ptr<const file_list<X, Y>> list, std::vector<std::size_t> chosen)
      : list_(std::move(list)), chosen_(std::move(chosen)) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t) const override {
    return std::make_unique<files_pass>(*this);
  }
  // Unknown until the files are read (tf.data's UNKNOWN_CARDINALITY for a file reader).
  cardinality_t cardinality() const override { return std::nullopt; }
  void describe(std::vector<fact>& out) const override {
    out.push_back(fact::number("the number of files", chosen_.size()));
    hasher names;
    for (std::size_t i : chosen_) names.text(list_->files[i].string());
    out.push_back(fact::fingerprint("the files' names", names.result()));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    if (chosen_.size() < s.shards)
      throw value_error("auto_shard_policy file: the dataset reads " +
                        std::to_string(chosen_.size()) + " files, fewer than the " +
                        std::to_string(s.shards) +
                        " replicas that would each read their own; give it at least one file per "
                        "replica, or use auto_shard_policy data (every replica reads every file "
                        "and takes its rows of each global batch)");
    std::vector<std::size_t> mine;
    for (std::size_t k = s.index; k < chosen_.size(); k += s.shards) mine.push_back(chosen_[k]);
    return std::make_shared<const files_node>(list_, std::move(mine));
  }

 private:
  struct files_pass final : pass<X, Y> {
    explicit files_pass(const files_node& n) : self(n) {}
    bool next(element<X, Y>& out) override {
      while (row >= rows) {
        if (file >= self.chosen_.size()) return false;
        open(self.list_->files[self.chosen_[file++]]);
      }
      values<X, Y> v;
      take_row(current.first, v.first);
      take_row(current.second, v.second);
      ++row;
      out = std::move(v);
      return true;
    }
    void open(const std::filesystem::path& path) {
      try {
        current = self.list_->read(path);
      } catch (const std::exception& e) {
        throw value_error("from_files: reading '" + path.string() + "' failed: " + e.what());
      }
      auto& [x, y] = current;
      data::check_shape(x, "from_files: x of '" + path.string() + "'");
      data::check_shape(y, "from_files: y of '" + path.string() + "'");
      if (x.shape.empty() || y.shape.empty() || x.shape[0] != y.shape[0])
        throw value_error("from_files: the reader gave x of shape " + shape_to_string(x.shape) +
                          " and y of shape " + shape_to_string(y.shape) + " for '" + path.string() +
                          "'; both need a first dimension, the file's samples, and it must be "
                          "equal (one label per sample)");
      rows = x.shape[0];
      row = 0;
    }
    void take_row(const auto& a, auto& sample) const {
      sample.shape.assign(a.shape.begin() + 1, a.shape.end());
      const std::size_t n = a.row_size();
      sample.values.assign(a.values.begin() + static_cast<std::ptrdiff_t>(row * n),
                           a.values.begin() + static_cast<std::ptrdiff_t>((row + 1) * n));
    }
    const files_node& self;
    std::pair<array<X>, array<Y>> current;
    std::size_t file = 0, rows = 0, row = 0;
  };
  std::shared_ptr<const file_list<X, Y>> list_;
  std::vector<std::size_t> chosen_;
};

// ---- batch

template <class X, class Y>
class batch_node final : public node<X, Y> {
 public:
  batch_node(node_ptr<X, Y> input, source_ptr<X, Y> s, std::size_t size, bool drop_remainder)
      : input_(std::move(input)), source_(std::move(s)), size_(size), drop_(drop_remainder) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    return std::make_unique<batch_pass>(*this, input_->start(key));
  }
  cardinality_t cardinality() const override {
    const cardinality_t n = input_->cardinality();
    if (!n || *n == data::infinite_cardinality) return n;
    return drop_ ? *n / size_ : *n / size_ + (*n % size_ != 0);
  }
  void describe(std::vector<fact>& out) const override {
    input_->describe(out);
    out.push_back(fact::number("the batch size", size_));
    out.push_back(fact::number("batch's drop_remainder", drop_ ? 1 : 0));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    std::size_t size = size_;
    if (s.rebatch) {
      size = split_batch_rows(size_, s.shards, s.index).count;
      if (size == 0)
        throw value_error("auto_shard_policy file: the global batch size " + std::to_string(size_) +
                          " is smaller than the " + std::to_string(s.shards) +
                          " replicas it is split over; give each replica at least one sample");
      s.rebatch = false;
    }
    return std::make_shared<const batch_node>(input_->shard_files(s), source_, size, drop_);
  }

 private:
  struct batch_pass final : pass<X, Y> {
    batch_pass(const batch_node& n, std::unique_ptr<pass<X, Y>> in)
        : self(n), input(std::move(in)) {}
    bool next(element<X, Y>& out) override {
      items.clear();
      element<X, Y> e;
      while (items.size() < self.size_ && !input_done) {
        if (input->next(e)) {
          items.push_back(std::move(e));
        } else {
          input_done = true;
        }
      }
      if (items.empty() || (self.drop_ && items.size() < self.size_)) return false;
      out = combine(*self.source_, items);
      return true;
    }
    const batch_node& self;
    std::unique_ptr<pass<X, Y>> input;
    std::vector<element<X, Y>> items;
    bool input_done = false;
  };

  [[noreturn]] static void shape_error(std::size_t i, const char* part,
                                       const std::vector<std::size_t>& first,
                                       const std::vector<std::size_t>& other) {
    throw value_error(
        "batch: cannot batch elements of different shapes: element 0 of the batch has " +
        std::string(part) + " shape " + shape_to_string(first) + " and element " +
        std::to_string(i) + " has " + part + " shape " + shape_to_string(other) +
        " (to batch a batched dataset, give the inner batch drop_remainder=true)");
  }

  static std::vector<std::size_t> full_shape(const many_rows& m,
                                             const std::vector<std::size_t>& sample) {
    std::vector<std::size_t> s = m.leading;
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
  }

  // Rows stay rows (a batch of samples, or a batch of equal batches); elements that already hold
  // values are stacked.
  static element<X, Y> combine(const source<X, Y>& s, std::vector<element<X, Y>>& items) {
    const std::size_t k = items.size();
    auto all_are = [&]<class Kind>(std::type_identity<Kind>) {
      for (const auto& e : items) {
        if (!std::holds_alternative<Kind>(e)) return false;
      }
      return true;
    };
    if (all_are(std::type_identity<one_row>{})) {
      many_rows m{{k}, {}};
      m.rows.reserve(k);
      for (const auto& e : items) m.rows.push_back(std::get<one_row>(e).row);
      return m;
    }
    if (all_are(std::type_identity<many_rows>{})) {
      const auto& first = std::get<many_rows>(items[0]);
      for (std::size_t i = 1; i < k; ++i) {
        const auto& m = std::get<many_rows>(items[i]);
        if (m.leading != first.leading) {
          shape_error(i, "x", full_shape(first, s.x_sample_shape), full_shape(m, s.x_sample_shape));
        }
      }
      many_rows out{{k}, {}};
      out.leading.insert(out.leading.end(), first.leading.begin(), first.leading.end());
      out.rows.reserve(k * first.rows.size());
      for (const auto& e : items) {
        const auto& rows = std::get<many_rows>(e).rows;
        out.rows.insert(out.rows.end(), rows.begin(), rows.end());
      }
      return out;
    }
    std::vector<values<X, Y>> vals(k);
    for (std::size_t i = 0; i < k; ++i) materialize(s, items[i], vals[i]);
    for (std::size_t i = 1; i < k; ++i) {
      if (vals[i].first.shape != vals[0].first.shape)
        shape_error(i, "x", vals[0].first.shape, vals[i].first.shape);
      if (vals[i].second.shape != vals[0].second.shape) {
        shape_error(i, "y", vals[0].second.shape, vals[i].second.shape);
      }
    }
    return values<X, Y>{
        data::detail::stack_with<X>(
            k, [&](std::size_t i) -> const array<X>& { return vals[i].first; }, "batch"),
        data::detail::stack_with<Y>(
            k, [&](std::size_t i) -> const array<Y>& { return vals[i].second; }, "batch")};
  }

  node_ptr<X, Y> input_;
  source_ptr<X, Y> source_;
  std::size_t size_;
  bool drop_;
};

// ---- shuffle

// tf.data's algorithm: a buffer of buffer_size elements; each output is a uniformly chosen buffer
// entry, replaced by the next input element. So an element can move at most buffer_size - 1
// places earlier, as in tf.data (a small buffer keeps locality).
template <class X, class Y>
class shuffle_node final : public node<X, Y> {
 public:
  shuffle_node(node_ptr<X, Y> input, std::size_t buffer_size, std::uint64_t seed, bool reshuffle)
      : input_(std::move(input)), buffer_size_(buffer_size), seed_(seed), reshuffle_(reshuffle) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    return std::make_unique<shuffle_pass>(*this, input_->start(key),
                                          mix(seed_, reshuffle_ ? key : 0));
  }
  cardinality_t cardinality() const override { return input_->cardinality(); }
  void describe(std::vector<fact>& out) const override {
    input_->describe(out);
    out.push_back(fact::number("the shuffle seed", seed_));
    out.push_back(fact::number("shuffle's buffer_size", buffer_size_));
    out.push_back(fact::number("shuffle's reshuffle_each_iteration", reshuffle_ ? 1 : 0));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    return std::make_shared<const shuffle_node>(input_->shard_files(s), buffer_size_, seed_,
                                                reshuffle_);
  }

 private:
  struct shuffle_pass final : pass<X, Y> {
    shuffle_pass(const shuffle_node& n, std::unique_ptr<pass<X, Y>> in, std::uint64_t seed)
        : self(n), input(std::move(in)), random(seed) {}
    bool next(element<X, Y>& out) override {
      if (!filled) {
        filled = true;
        const cardinality_t n = self.input_->cardinality();
        buffer.reserve(std::min(self.buffer_size_, n ? *n : self.buffer_size_));
        element<X, Y> e;
        while (buffer.size() < self.buffer_size_) {
          if (!input->next(e)) {
            input_done = true;
            break;
          }
          buffer.push_back(std::move(e));
        }
      }
      if (buffer.empty()) return false;
      const std::size_t i = random.below(buffer.size());
      out = std::move(buffer[i]);
      if (!input_done && input->next(buffer[i])) return true;
      input_done = true;
      if (i + 1 != buffer.size()) buffer[i] = std::move(buffer.back());
      buffer.pop_back();
      return true;
    }
    const shuffle_node& self;
    std::unique_ptr<pass<X, Y>> input;
    rng random;
    std::vector<element<X, Y>> buffer;
    bool filled = false, input_done = false;
  };
  node_ptr<X, Y> input_;
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_;
};

// ---- cache

// The first pass that reaches the end stores its elements (row indices, where they still are);
// later passes replay them. A pass abandoned early stores nothing, as with tf.data.
template <class X, class Y>
class cache_node final : public node<X, Y> {
 public:
  explicit cache_node(node_ptr<X, Y> input) : input_(std::move(input)) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    std::shared_ptr<const std::vector<element<X, Y>>> stored;
    {
      const std::lock_guard lock(state_->mutex);
      stored = state_->stored;
    }
    if (stored) return std::make_unique<replay_pass>(std::move(stored));
    return std::make_unique<fill_pass>(state_, input_->start(key));
  }
  cardinality_t cardinality() const override { return input_->cardinality(); }
  // A cache freezes what came before it after the first pass (a shuffle's order).
  void describe(std::vector<fact>& out) const override {
    input_->describe(out);
    out.push_back(fact::number("cache()", 1));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    return std::make_shared<const cache_node>(input_->shard_files(s));
  }

 private:
  struct state {
    std::mutex mutex;
    std::shared_ptr<const std::vector<element<X, Y>>> stored;
  };
  struct replay_pass final : pass<X, Y> {
    explicit replay_pass(std::shared_ptr<const std::vector<element<X, Y>>> s)
        : stored(std::move(s)) {}
    bool next(element<X, Y>& out) override {
      if (i >= stored->size()) return false;
      out = (*stored)[i++];
      return true;
    }
    std::shared_ptr<const std::vector<element<X, Y>>> stored;
    std::size_t i = 0;
  };
  struct fill_pass final : pass<X, Y> {
    fill_pass(std::shared_ptr<state> s, std::unique_ptr<pass<X, Y>> in)
        : cache(std::move(s)), input(std::move(in)) {}
    bool next(element<X, Y>& out) override {
      if (finished) return false;
      if (input->next(out)) {
        items.push_back(out);
        return true;
      }
      finished = true;
      const std::lock_guard lock(cache->mutex);
      if (!cache->stored)
        cache->stored = std::make_shared<const std::vector<element<X, Y>>>(std::move(items));
      return false;
    }
    std::shared_ptr<state> cache;
    std::unique_ptr<pass<X, Y>> input;
    std::vector<element<X, Y>> items;
    bool finished = false;
  };
  node_ptr<X, Y> input_;
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

// ---- prefetch

// A producer thread runs the input pass and copies each element's values (the gather of a batch)
// while the consumer trains, keeping up to `capacity` elements ready. Destroying the pass (the
// loop was left early, or the iterator dropped) stops and joins the thread; an exception in the
// producer is rethrown to the consumer at the position where it happened.
template <class X, class Y>
class prefetch_node final : public node<X, Y> {
 public:
  prefetch_node(node_ptr<X, Y> input, source_ptr<X, Y> s, std::size_t capacity)
      : input_(std::move(input)), source_(std::move(s)), capacity_(capacity) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    return std::make_unique<prefetch_pass>(source_, input_->start(key), capacity_);
  }
  cardinality_t cardinality() const override { return input_->cardinality(); }
  // Prefetching does not change the elements: a process may prefetch and another not.
  void describe(std::vector<fact>& out) const override { input_->describe(out); }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    return std::make_shared<const prefetch_node>(input_->shard_files(s), source_, capacity_);
  }

 private:
  class prefetch_pass final : public pass<X, Y> {
   public:
    prefetch_pass(source_ptr<X, Y> s, std::unique_ptr<pass<X, Y>> in, std::size_t capacity)
        : source_(std::move(s)),
          input_(std::move(in)),
          capacity_(capacity),
          thread_([this] { produce(); }) {}
    prefetch_pass(const prefetch_pass&) = delete;
    prefetch_pass& operator=(const prefetch_pass&) = delete;
    ~prefetch_pass() override {
      {
        const std::lock_guard lock(mutex_);
        stop_ = true;
      }
      space_.notify_all();
      thread_.join();
    }
    bool next(element<X, Y>& out) override {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return !queue_.empty() || done_; });
      if (!queue_.empty()) {
        out = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        space_.notify_one();
        return true;
      }
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return false;
    }

   private:
    void produce() {
      try {
        element<X, Y> e;
        for (;;) {
          {
            const std::lock_guard lock(mutex_);
            if (stop_) break;
          }
          if (!input_->next(e)) break;
          values<X, Y> v;
          materialize(*source_, e, v);
          std::unique_lock lock(mutex_);
          space_.wait(lock, [&] { return stop_ || queue_.size() < capacity_; });
          if (stop_) break;
          queue_.emplace_back(std::move(v));
          lock.unlock();
          ready_.notify_one();
        }
      } catch (...) {
        const std::lock_guard lock(mutex_);
        error_ = std::current_exception();
      }
      {
        const std::lock_guard lock(mutex_);
        done_ = true;
      }
      ready_.notify_one();
    }

    source_ptr<X, Y> source_;
    std::unique_ptr<pass<X, Y>> input_;
    std::size_t capacity_;
    std::mutex mutex_;
    std::condition_variable ready_, space_;
    std::deque<element<X, Y>> queue_;
    bool done_ = false, stop_ = false;
    std::exception_ptr error_;
    std::thread thread_;  // last: starts once everything it uses is constructed
  };
  node_ptr<X, Y> input_;
  source_ptr<X, Y> source_;
  std::size_t capacity_;
};

// ---- repeat

template <class X, class Y>
class repeat_node final : public node<X, Y> {
 public:
  repeat_node(node_ptr<X, Y> input, std::int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    return std::make_unique<repeat_pass>(*this, key);
  }
  cardinality_t cardinality() const override {
    const cardinality_t n = input_->cardinality();
    if (count_ == 0) return 0;
    if (!n || *n == 0) return n;
    if (count_ < 0 || *n == data::infinite_cardinality) return data::infinite_cardinality;
    const auto c = static_cast<std::size_t>(count_);
    return *n > (data::infinite_cardinality - 1) / c ? data::infinite_cardinality - 1 : *n * c;
  }
  void describe(std::vector<fact>& out) const override {
    input_->describe(out);
    out.push_back(fact::signed_number("repeat's count", count_));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    return std::make_shared<const repeat_node>(input_->shard_files(s), count_);
  }

 private:
  struct repeat_pass final : pass<X, Y> {
    repeat_pass(const repeat_node& n, std::uint64_t k) : self(n), key(k) {}
    bool next(element<X, Y>& out) override {
      while (!finished) {
        if (!inner) {
          if (self.count_ >= 0 && repetition >= static_cast<std::uint64_t>(self.count_)) break;
          inner = self.input_->start(mix(key, repetition));
          produced = false;
        }
        if (inner->next(out)) {
          produced = true;
          return true;
        }
        inner.reset();
        ++repetition;
        // An empty input would make repeat() spin forever; tf.data ends there too.
        if (!produced) break;
      }
      finished = true;
      return false;
    }
    const repeat_node& self;
    std::uint64_t key;
    std::unique_ptr<pass<X, Y>> inner;
    std::uint64_t repetition = 0;
    bool produced = false, finished = false;
  };
  node_ptr<X, Y> input_;
  std::int64_t count_;
};

// ---- take

template <class X, class Y>
class take_node final : public node<X, Y> {
 public:
  take_node(node_ptr<X, Y> input, std::int64_t count) : input_(std::move(input)), count_(count) {}
  std::unique_ptr<pass<X, Y>> start(std::uint64_t key) const override {
    // take(0) never starts its input (no prefetch thread for nothing).
    return std::make_unique<take_pass>(count_ == 0 ? nullptr : input_->start(key), count_);
  }
  cardinality_t cardinality() const override {
    const cardinality_t n = input_->cardinality();
    if (count_ < 0) return n;
    const auto c = static_cast<std::size_t>(count_);
    return n ? std::min(*n, c) : (c == 0 ? cardinality_t{0} : n);
  }
  void describe(std::vector<fact>& out) const override {
    input_->describe(out);
    out.push_back(fact::signed_number("take's count", count_));
  }
  node_ptr<X, Y> shard_files(file_shard s) const override {
    return std::make_shared<const take_node>(input_->shard_files(s), count_);
  }

 private:
  struct take_pass final : pass<X, Y> {
    take_pass(std::unique_ptr<pass<X, Y>> in, std::int64_t c) : input(std::move(in)), count(c) {}
    bool next(element<X, Y>& out) override {
      if (!input || (count >= 0 && taken >= count)) return false;
      if (input->next(out)) {
        ++taken;
        return true;
      }
      input.reset();
      return false;
    }
    std::unique_ptr<pass<X, Y>> input;
    std::int64_t count;
    std::int64_t taken = 0;
  };
  node_ptr<X, Y> input_;
  std::int64_t count_;
};

// What an iterator points at: the pass over the last stage and the current element.
template <class X, class Y>
struct iteration {
  iteration(node_ptr<X, Y> t, source_ptr<X, Y> s, std::uint64_t key)
      : top(std::move(t)), source(std::move(s)), stages(top->start(key)) {}
  void advance() {
    at_end = true;
    if (stages->next(scratch)) {
      materialize(*source, scratch, current);
      at_end = false;
    }
  }
  node_ptr<X, Y> top;  // keeps the stages alive while the pass runs
  source_ptr<X, Y> source;
  std::unique_ptr<pass<X, Y>> stages;  // destroyed first: it may hold a prefetch thread
  element<X, Y> scratch;
  values<X, Y> current;
  bool at_end = true;
};

}  // namespace detail::pipeline

// A tf.data.Dataset of (x, y) elements: X is the feature type (usually float), Y the label type
// (std::int32_t for sparse labels, float for one-hot). Before batch() an element is one sample
// (x with the per-sample shape, y with the per-sample label shape, () for a sparse label); after
// batch(n) both have a leading batch dimension. Every operation returns a new dataset and leaves
// this one as it was; copies share the source arrays.
template <class X, class Y>
class dataset {
 public:
  using element_type = std::pair<array<X>, array<Y>>;
  class iterator;

  // tf.data.Dataset.from_tensor_slices((x, y)): one element per entry along the first dimension,
  // which x and y must share. Pass std::move(x) to hand the arrays over without a copy.
  static dataset from_tensor_slices(array<X> x, array<Y> y);

  // A dataset that reads its samples from files, each file once per pass, in the order given:
  // read(path) returns one file's samples (x and y with equal first dimensions). As tf.data's
  // Dataset.from_tensor_slices(filenames).interleave(reader) with one file open at a time, and
  // the unit auto_shard_policy file shards by: each replica then opens only its own files.
  // Throws when no file is given or one does not exist (before any is read).
  static dataset from_files(std::vector<std::filesystem::path> files, data::file_reader<X, Y> read);

  // The dataset that one of `num_shards` readers iterates under auto_shard_policy file: the same
  // stages over files index, index + num_shards, ... of those this dataset reads, its last
  // batch() taking the shard's part of the global batch size (10 over 4 shards: 3, 3, 2, 2).
  // Throws when the source is arrays, or has fewer files than shards.
  [[nodiscard]] dataset shard_files(std::size_t num_shards, std::size_t index) const;

  // The number of files the source reads; 0 for a dataset of arrays.
  [[nodiscard]] std::size_t file_count() const noexcept { return files_; }

  // Stacks batch_size consecutive elements; the last batch is smaller unless drop_remainder.
  // Batching a batched dataset works when the inner batches are equal (drop_remainder=true).
  dataset batch(std::int64_t batch_size, bool drop_remainder = false) const;

  // Randomly shuffles with a buffer of buffer_size elements (buffer_size >= the number of
  // elements gives a uniform permutation). With reshuffle_each_iteration, the n-th pass over this
  // dataset (each begin(), and each repetition under repeat()) has its own order, which depends
  // only on seed and n; without a seed, one is drawn from std::random_device (on process 0, and
  // shared with every process of a multi-process job, so that they all see the same order).
  dataset shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed = std::nullopt,
                  bool reshuffle_each_iteration = true) const;

  // Remembers the elements of the first complete pass and replays them in later passes (a
  // shuffle before cache() is therefore frozen after the first epoch, as in tf.data).
  dataset cache() const;

  // Prepares up to buffer_size elements in a background thread while the consumer works;
  // data::autotune picks data::autotune_prefetch, 0 prefetches nothing.
  dataset prefetch(std::int64_t buffer_size = data::autotune) const;

  // Repeats the elements count times; -1 repeats forever (cardinality() becomes
  // data::infinite_cardinality).
  dataset repeat(std::int64_t count = -1) const;

  // The first count elements; -1 takes all.
  dataset take(std::int64_t count) const;

  // The number of elements; data::infinite_cardinality after repeat(), std::nullopt when unknown
  // (tf.data's -1 and -2).
  std::optional<std::size_t> cardinality() const { return top_->cardinality(); }

  // What the dataset yields, as facts that every process of a distributed job must hold alike
  // (a distributed fit, evaluate or predict compares them before its first step): its stages,
  // the number of samples and their shapes, a checksum of the values of 64 of them, and each
  // stage's arguments (batch size, drop_remainder, shuffle seed, ...). Each fact's name starts
  // with `prefix` ("validation_data: ").
  std::vector<fact> facts(std::string_view prefix = {}) const;

  // How many passes have started through this dataset and its copies: the key of the next
  // begin(), from which a shuffle draws that pass's order. A checkpoint keeps it, and
  // set_iterations() puts it back, so that a resumed fit draws the epoch's order again (as
  // tf.train.Checkpoint(iterator=...) restores an iterator).
  [[nodiscard]] std::uint64_t iterations() const noexcept { return passes_->load(); }
  void set_iterations(std::uint64_t n) const noexcept { passes_->store(n); }

  // Each begin() starts a new pass (a new epoch: shuffles reshuffle).
  iterator begin() const {
    return iterator(std::make_shared<iteration>(top_, source_, passes_->fetch_add(1)));
  }
  std::default_sentinel_t end() const { return {}; }

  // An input iterator; copies share one position. The element it points at lives in the
  // iterator: `*ds.begin()` dangles at the end of the statement, keep the iterator.
  class iterator {
   public:
    using iterator_concept = std::input_iterator_tag;
    using iterator_category = std::input_iterator_tag;
    using value_type = element_type;
    using difference_type = std::ptrdiff_t;
    using reference = element_type&;
    using pointer = element_type*;

    iterator() = default;
    reference operator*() const { return state_->current; }
    pointer operator->() const { return &state_->current; }
    iterator& operator++() {
      state_->advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) {
      return !it.state_ || it.state_->at_end;
    }

   private:
    friend class dataset;
    explicit iterator(std::shared_ptr<detail::pipeline::iteration<X, Y>> s) : state_(std::move(s)) {
      state_->advance();
    }
    std::shared_ptr<detail::pipeline::iteration<X, Y>> state_;
  };

 private:
  using source = detail::pipeline::source<X, Y>;
  using iteration = detail::pipeline::iteration<X, Y>;

  dataset(detail::pipeline::source_ptr<X, Y> s, detail::pipeline::node_ptr<X, Y> top,
          std::size_t files = 0)
      : source_(std::move(s)), top_(std::move(top)), files_(files) {}
  dataset then(detail::pipeline::node_ptr<X, Y> top) const {
    return dataset(source_, std::move(top), files_);
  }

  detail::pipeline::source_ptr<X, Y> source_;
  detail::pipeline::node_ptr<X, Y> top_;
  std::size_t files_ = 0;
  // Passes started through this dataset or its copies (tf.data's seed generator, shared the same
  // way): the key of the next begin().
  std::shared_ptr<std::atomic<std::uint64_t>> passes_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
};

// The members that build the pipeline's stages, out of the class so that they are compiled once
// for the element types of tessel::tessel (TESSEL_DATASET_TEMPLATES below) and not in every
// translation unit: each stage's code (batching, shuffling, prefetching) comes with them.
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::from_tensor_slices(array<X> x, array<Y> y) {
  auto s = std::make_shared<const source>(std::move(x), std::move(y));
  auto top = std::make_shared<const detail::pipeline::slices_node<X, Y>>(s);
  return dataset(std::move(s), std::move(top));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::from_files(std::vector<std::filesystem::path> files,
                                        data::file_reader<X, Y> read) {
  if (files.empty())
    throw value_error("from_files: no files given; pass the paths of the files to read");
  if (!read) throw value_error("from_files: no reader given; pass a function reading one file");
  for (const auto& f : files) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec))
      throw value_error(
          "from_files: '" + f.string() + "' " +
          (std::filesystem::exists(f, ec) ? "is not a regular file" : "does not exist") +
          "; every path given must name a file to read");
  }
  std::vector<std::size_t> all(files.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::size_t n = files.size();
  // The stages after the source take elements that already hold values: the row source is empty.
  auto empty = std::make_shared<const source>(array<X>({0}, {}), array<Y>({0}, {}));
  auto list = std::make_shared<const detail::pipeline::file_list<X, Y>>(
      detail::pipeline::file_list<X, Y>{std::move(files), std::move(read)});
  return dataset(
      std::move(empty),
      std::make_shared<const detail::pipeline::files_node<X, Y>>(std::move(list), std::move(all)),
      n);
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::shard_files(std::size_t num_shards, std::size_t index) const {
  if (num_shards == 0 || index >= num_shards)
    throw value_error("shard_files: index " + std::to_string(index) + " is not one of the " +
                      std::to_string(num_shards) + " shards");
  // Files index, index + num_shards, ...: as many as split_batch_rows gives the shard.
  return dataset(source_, top_->shard_files({num_shards, index, true}),
                 split_batch_rows(files_, num_shards, index).count);
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::batch(std::int64_t batch_size, bool drop_remainder) const {
  if (batch_size <= 0) {
    throw value_error("batch: batch_size must be greater than zero, got " +
                      std::to_string(batch_size));
  }
  return then(std::make_shared<const detail::pipeline::batch_node<X, Y>>(
      top_, source_, static_cast<std::size_t>(batch_size), drop_remainder));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::shuffle(std::int64_t buffer_size, std::optional<std::uint64_t> seed,
                                     bool reshuffle_each_iteration) const {
  if (buffer_size <= 0) {
    throw value_error("shuffle: buffer_size must be greater than zero, got " +
                      std::to_string(buffer_size));
  }
  const std::uint64_t s = seed ? *seed : random::shared_seed();
  return then(std::make_shared<const detail::pipeline::shuffle_node<X, Y>>(
      top_, static_cast<std::size_t>(buffer_size), s, reshuffle_each_iteration));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::cache() const {
  return then(std::make_shared<const detail::pipeline::cache_node<X, Y>>(top_));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::prefetch(std::int64_t buffer_size) const {
  if (buffer_size < data::autotune) {
    throw value_error("prefetch: buffer_size must be >= 0, or data::autotune (-1), got " +
                      std::to_string(buffer_size));
  }
  if (buffer_size == 0) return *this;
  const std::size_t n = buffer_size == data::autotune ? data::autotune_prefetch
                                                      : static_cast<std::size_t>(buffer_size);
  return then(std::make_shared<const detail::pipeline::prefetch_node<X, Y>>(top_, source_, n));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::repeat(std::int64_t count) const {
  if (count < -1) {
    throw value_error("repeat: count must be >= 0, or -1 to repeat forever, got " +
                      std::to_string(count));
  }
  return then(std::make_shared<const detail::pipeline::repeat_node<X, Y>>(top_, count));
}
template <class X, class Y>
dataset<X, Y> dataset<X, Y>::take(std::int64_t count) const {
  if (count < -1) {
    throw value_error("take: count must be >= 0, or -1 for all elements, got " +
                      std::to_string(count));
  }
  return then(std::make_shared<const detail::pipeline::take_node<X, Y>>(top_, count));
}
template <class X, class Y>
std::vector<fact> dataset<X, Y>::facts(std::string_view prefix) const {
  std::vector<fact> described;
  top_->describe(described);
  hasher stages;
  for (const fact& f : described) stages.text(f.what);
  std::vector<fact> out{fact::fingerprint("the dataset's stages", stages.result())};
  out.insert(out.end(), described.begin(), described.end());
  for (fact& f : out) f.what.insert(0, prefix);
  return out;
}

// tf.data.Dataset.from_tensor_slices((x, y)) with the element types deduced.
template <class X, class Y>
dataset<X, Y> from_tensor_slices(array<X> x, array<Y> y) {
  return dataset<X, Y>::from_tensor_slices(std::move(x), std::move(y));
}

// Compiled once for the data the readers give (float samples; float or int32 labels), in
// tessel::tessel (core/compilation.hpp).
#define TESSEL_DATASET_TEMPLATES(prefix, X, Y)                                \
  prefix template dataset<X, Y> from_tensor_slices<X, Y>(array<X>, array<Y>); \
  prefix template class dataset<X, Y>;
#define TESSEL_DESCRIBE_SAMPLES_TEMPLATES(prefix, T)                                \
  prefix template void data::describe_samples<T>(const array<T>&, std::string_view, \
                                                 std::vector<fact>&);
#if TESSEL_EXTERN_TEMPLATES
TESSEL_DATASET_TEMPLATES(extern, float, float)
TESSEL_DATASET_TEMPLATES(extern, float, std::int32_t)
TESSEL_DESCRIBE_SAMPLES_TEMPLATES(extern, float)
TESSEL_DESCRIBE_SAMPLES_TEMPLATES(extern, std::int32_t)
#endif

#if TESSEL_DEFINITIONS
TESSEL_INLINE void data::unshardable_by_file() {
  throw value_error(
      "experimental_distribute_dataset: auto_shard_policy file shards a dataset by "
      "the files it reads, and this dataset reads none (its source is arrays: "
      "from_tensor_slices), so it has no unit to shard by file; use "
      "auto_shard_policy data (each replica its rows of every global batch) or "
      "auto, or build the dataset with dataset::from_files");
}
#endif

}  // namespace tessel
