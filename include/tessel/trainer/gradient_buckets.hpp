// gradient_buckets: the gradients whose plan ends in an all_reduce, fused into buckets that are
// reduced with non-blocking collectives while the backward pass goes on (PyTorch DDP's reducer;
// 25 MB buckets by default, as DDP's bucket_cap_mb). The gradients live in one flat buffer, in
// the order backward produces them, and each variable's `gradient` is a view of its part of it
// (DDP's gradient_as_bucket_view), so filling a bucket copies nothing.
//
// When every bucket is reduce-scattered over the processes (shard_state::gradients, ZeRO-2), the
// whole gradients are needed only until their bucket's reduce-scatter ends: the buckets then
// take turns in one buffer, the window, which holds two consecutive layers' buckets
// (gradient_window, the memory plan's rule), each bucket placed after the one before it and at
// the window's start when it does not fit. A bucket opens when backward reaches its first
// gradient, once the buckets whose place it takes have been reduced. So one layer's buckets are
// reduced while backward computes the next layer's (without gradient_options::overlap the
// window holds one layer's, reduced before the next layer's gradients are computed), and the
// memory of the whole gradients is the window's, beside this process's parts of the sums
// (DeepSpeed's partitioned gradients and reduction buckets; FSDP's reduce-scatter per layer);
// no step allocates.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/memory_plan.hpp"
#include "../core/planner.hpp"
#include "../layers/layer.hpp"
#include "../runtime/collectives.hpp"
#include "../runtime/reshard.hpp"

namespace tessel {

// (gradient_options, how gradients are reduced: core/memory_plan.hpp, whose windows the buckets
// take.)

// The communication of the training steps since the last reset: where the time of the gradient
// reduction went, and every collective run, by kind and mesh axis.
struct communication_stats {
  std::size_t steps = 0;
  std::size_t buckets = 0;           // per step
  std::size_t bytes = 0;             // gradient bytes reduced in buckets per step
  double exposed_seconds = 0;        // waiting for collectives after the backward pass
  double backward_seconds = 0;       // the backward pass itself, collectives started inside it
  // Of backward_seconds, the time spent inside MPI (starting buckets, MPI_Test): over shared
  // memory the processes' own cores move the data, so this is communication too.
  double backward_mpi_seconds = 0;
  // The collectives run (the layers' planned steps, the loss's and the metrics' reductions, the
  // gradient buckets, get_weights' gathers), counted by kind and mesh axis with the bytes of
  // their input buffers on this process, as PyTorch's CommDebugMode counts them; a test holds
  // them against the plan's steps (model.plan(), explain()).
  struct collective_total {
    collective kind{};
    std::string axis;
    std::size_t count = 0;
    std::size_t bytes = 0;
  };
  std::vector<collective_total> collectives;
  [[nodiscard]] std::size_t total_collectives() const noexcept {
    std::size_t n = 0;
    for (const auto& c : collectives) n += c.count;
    return n;
  }
  // The collectives of one kind over the axis named `axis` ("": any axis).
  [[nodiscard]] std::size_t count(collective kind, std::string_view axis = {}) const noexcept {
    std::size_t n = 0;
    for (const auto& c : collectives)
      if (c.kind == kind && (axis.empty() || c.axis == axis)) n += c.count;
    return n;
  }
};

// The planned steps that reduce one gradient, in order: an all_reduce, or a reduce to one process
// then (tf.distribute's ReductionToOneDevice) a broadcast of the sum, or (central storage) the
// reduce alone.
struct gradient_steps {
  std::array<reshard_step, 2> steps{};
  std::size_t count = 0;
  [[nodiscard]] const reshard_step& first() const noexcept { return steps[0]; }
  friend bool operator==(const gradient_steps&, const gradient_steps&) = default;
};

template <class B, class C = comm::communicator>
class gradient_buckets {
 public:
  // One gradient and the planned steps that reduce it.
  struct entry {
    variable<B>* var;
    gradient_steps steps;
    std::size_t op = 0;  // the layer whose backward computes it
  };

  // `entries` in the order backward completes them. Consecutive entries with the same steps
  // share a bucket until it holds `cap_mb`.
  // `log`, if given, records every collective the buckets run. `parts` > 1: the state is split
  // over that many processes (shard_state): each gradient's place is padded to a multiple of
  // `parts`, so that every bucket divides into `parts` runs, and a bucket reduce-scattered
  // leaves this process's run of the sums in part_gradients(): in place, at the start of the
  // bucket, on the MPI communicator (MPI_IN_PLACE); in a buffer of its own on others (NCCL's
  // in-place convention differs).
  // `keep` false: the gradients hold nothing to keep (none computed since the last update), and
  // each one's own buffer is released before the buckets' buffer is allocated, so that the two
  // are never held at once.
  // `per_layer`: a bucket holds one layer's gradients at most (shard_state::weights, whose
  // weights are gathered a bucket at a time).
  void build(const bound_mesh<C>& pm, std::vector<entry> entries, gradient_options o,
             collective_log* log = nullptr, std::size_t parts = 1, bool keep = true,
             bool per_layer = false) {
    require_keepable(entries, parts, o, keep, per_layer);
    const gradient_window_layout layout = window_of(entries, parts, o, per_layer);
    const std::size_t window = layout.window;
    const bool transient = window > 0;
    pm_ = &pm;
    log_ = log;
    options_ = o;
    parts_ = parts;
    buckets_.clear();
    owner_.clear();
    places_.clear();
    std::size_t total = 0;
    std::vector<std::pair<std::size_t, std::size_t>> shapes;
    for (const auto& e : entries) {
      shapes.emplace_back(e.var->value.block_rows(), e.var->value.block_cols());
      total += padded_size(*e.var, parts);
    }
    const bool scattered = std::any_of(entries.begin(), entries.end(), [](const entry& e) {
      return e.steps.first().kind == collective::reduce_scatter;
    });
    // The gradients keep their values: a rebuild (new options, a second compile, another plan)
    // between compute_loss_and_gradients and apply_gradients loses nothing. `previous` keeps the
    // old buffer alive while they are copied out of it; a gradient that leaves the buckets gets
    // its own buffer again.
    const typename B::matrix previous = keep ? flat_ : typename B::matrix();
    for (const auto& old : entries_) {
      bool stays = false;
      for (const auto& e : entries) stays = stays || e.var == old.var;
      if (stays) continue;
      const std::size_t rows = old.var->value.block_rows(), cols = old.var->value.block_cols();
      if (transient_) {  // (its gradient was the bucket's while backward ran)
        old.var->gradient = B::make_zeros(old.var->path + "/gradient", rows, cols);
        continue;
      }
      const typename B::matrix own = B::make_matrix(old.var->path + "/gradient", rows, cols);
      B::copy(old.var->gradient, own);
      old.var->gradient = own;
    }
    entries_ = entries;
    shapes_ = shapes;
    transient_ = transient;
    if (!keep)
      for (const auto& e : entries) e.var->gradient = typename B::matrix();
    flat_ = part_gradients_ = typename B::matrix();
    stats_.buckets = 0;
    stats_.bytes = 0;
    if (total == 0) return;
    window_ = typename B::matrix();
    if (!transient_)
      flat_ = B::make_zeros("gradient_buckets", 1, total);
    else
      window_ = B::make_zeros("gradient_window", 1, window);
    if (parts > 1 && scattered && !in_place())
      part_gradients_ = B::make_zeros("gradient_parts", 1, total / parts);
    const std::vector<bool> starts = bucket_starts(entries, parts, o.cap_elements(), per_layer);
    std::size_t offset = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const entry& e = entries[i];
      const auto [rows, cols] = shapes[i];
      const std::size_t n = padded_size(*e.var, parts);
      if (starts[i]) buckets_.push_back({offset, 0, e.steps, 0, 0, {}, false, i, 0, false});
      bucket& b = buckets_.back();
      b.size += n;
      ++b.members;
      if (!transient_) {
        const typename B::matrix old = e.var->gradient;
        e.var->gradient = B::alias(flat_, offset, rows, cols);
        if (keep) B::copy(old, e.var->gradient);
      }
      owner_.push_back({e.var, buckets_.size() - 1});
      places_.push_back({e.var, offset, rows * cols});
      offset += n;
    }
    // (Each bucket's place in the window: the memory plan's layout, whose buckets these are.)
    if (transient_ && layout.buckets != buckets_.size())
      throw runtime_error("tessel: the gradient buckets differ from the memory plan's (" +
                          std::to_string(buckets_.size()) + " and " +
                          std::to_string(layout.buckets) + ")");
    for (std::size_t b = 0; b < buckets_.size() && transient_; ++b) buckets_[b].at = layout.at[b];
    stats_.buckets = buckets_.size();
    stats_.bytes = total * sizeof(float);
    reset_stats();
  }

  // Which of `entries` start a bucket: consecutive entries with the same steps share one until
  // the next would take it past `cap` values (each padded to a multiple of `parts`), or (with
  // `per_layer`) belongs to another layer.
  static std::vector<bool> bucket_starts(const std::vector<entry>& entries, std::size_t parts,
                                         std::size_t cap, bool per_layer = false) {
    std::vector<bool> starts(entries.size());
    std::size_t size = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const std::size_t n = padded_size(*entries[i].var, parts);
      starts[i] = i == 0 || !alike(entries[i - 1].steps, entries[i].steps) ||
                  (size > 0 && size + n > cap) || (per_layer && entries[i].op != entries[i - 1].op);
      size = (starts[i] ? 0 : size) + n;
    }
    return starts;
  }
  // Refuses, with the reason, buckets of `entries` over `parts` processes with options `o` when
  // the gradients hold values to keep (`keep`: compute_loss_and_gradients' gradients wait for
  // apply_gradients) and these buckets or the ones in place take turns in a window: each process
  // then holds only its part of their sums, laid out by the buckets. (Called before a rebuild
  // changes anything.)
  void require_keepable(const std::vector<entry>& entries, std::size_t parts,
                        const gradient_options& o, bool keep, bool per_layer = false) const {
    if (keep && (transient_ || window_of(entries, parts, o, per_layer).window > 0))
      throw value_error(
          "tessel: the gradient buckets would change (new gradient options, a second compile or "
          "another global batch's plan) while the gradients of compute_loss_and_gradients wait "
          "for apply_gradients; under shard_state::gradients each process holds only its part of "
          "their sums, laid out by the buckets, so they cannot be kept: call apply_gradients "
          "first");
  }
  // The window and each bucket's place in it (window 0: the buckets do not take turns in one):
  // where every gradient is reduce-scattered, and the parts of the sums with the window (two
  // consecutive layers' buckets, or one layer's without `o.overlap`) take less memory than all
  // the buckets (gradient_window, the memory plan's rule).
  static gradient_window_layout window_of(const std::vector<entry>& entries, std::size_t parts,
                                          const gradient_options& o, bool per_layer) {
    if (parts <= 1 || entries.empty() ||
        !std::all_of(entries.begin(), entries.end(), [](const entry& e) {
          return e.steps.count == 1 && e.steps.first().kind == collective::reduce_scatter;
        }))
      return {};
    const std::vector<bucketed_gradient> g = bucketed(entries, parts);
    return gradient_window(g.data(), g.size(), o.cap_elements(), parts, false, o.overlap,
                           per_layer);
  }
  // The window the weights split over the processes take turns in (shard_state::weights,
  // weights_window: the memory plan's rule), used whether or not it takes less memory than the
  // whole weights.
  [[nodiscard]] gradient_window_layout weights_window() const {
    const std::vector<bucketed_gradient> g = bucketed(entries_, parts_);
    return tessel::weights_window(g.data(), g.size(), options_.cap_elements(), parts_,
                                  options_.overlap);
  }
  // Each entry as the window's rule takes it: its layer and its padded values.
  static std::vector<bucketed_gradient> bucketed(const std::vector<entry>& entries,
                                                 std::size_t parts) {
    std::vector<bucketed_gradient> g;
    for (const auto& e : entries) g.push_back({e.op, padded_size(*e.var, parts)});
    return g;
  }

  [[nodiscard]] bool empty() const noexcept { return buckets_.empty(); }
  // The gradients the buckets take, in build()'s order.
  [[nodiscard]] std::size_t entry_count() const noexcept { return entries_.size(); }
  [[nodiscard]] const entry& entry_at(std::size_t i) const { return entries_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return buckets_.size(); }
  [[nodiscard]] const gradient_options& options() const noexcept { return options_; }

  // Where each gradient lies in the flat buffer (its values from `offset`, then padding), in
  // build()'s order; each bucket's run of the buffer; the buffer; and, when the buckets are
  // reduce-scattered, this process's runs of the sums, bucket after bucket.
  struct place {
    variable<B>* var;
    std::size_t offset, size;
  };
  struct run {
    std::size_t offset, size;
    bool scattered;  // reduce-scattered: this process's part of the sum is part_gradient()
  };
  [[nodiscard]] const std::vector<place>& places() const noexcept { return places_; }
  [[nodiscard]] std::vector<run> runs() const {
    std::vector<run> r;
    for (const auto& b : buckets_)
      r.push_back({b.offset, b.size, b.steps.first().kind == collective::reduce_scatter});
    return r;
  }
  // (None when the buckets take turns in the window.)
  [[nodiscard]] const typename B::matrix& flat() const noexcept { return flat_; }
  [[nodiscard]] bool transient() const noexcept { return transient_; }
  // This process's part of the sums of the reduce-scattered bucket at `offset`, of `part` values.
  [[nodiscard]] typename B::matrix part_gradient(std::size_t offset, std::size_t part) const {
    return in_place() ? B::alias(flat_, offset, 1, part)
                      : B::alias(part_gradients_, offset / parts_, 1, part);
  }
  // A reduce-scatter leaves its part in the bucket itself on the MPI communicator (unless the
  // buckets take turns in the window).
  static constexpr bool in_place_parts = std::is_same_v<C, comm::communicator>;
  [[nodiscard]] bool in_place() const noexcept { return in_place_parts && !transient_; }

  // Before a backward pass.
  void begin() {
    for (auto& b : buckets_) {
      b.ready = 0;
      b.started = false;
    }
    backward_start_ = clock::now();
  }
  // Backward is about to compute the gradient of `v`: in the window, once the buckets whose place
  // its bucket takes have been reduced, the bucket's members' gradients become views of its place
  // (their padding set to zero).
  void open(const variable<B>* v) {
    if (!transient_) return;
    const std::size_t index = bucket_of(v);
    if (index == npos || buckets_[index].open) return;
    bucket& b = buckets_[index];
    for (std::size_t j = 0; j < index; ++j)
      if (buckets_[j].at < b.at + b.size && b.at < buckets_[j].at + buckets_[j].size)
        release(buckets_[j]);
    b.open = true;
    for (std::size_t m = 0; m < b.members; ++m) {
      const std::size_t e = b.first + m, at = b.at + places_[e].offset - b.offset;
      const auto [rows, cols] = shapes_[e];
      entries_[e].var->gradient = B::alias(window_, at, rows, cols);
      const std::size_t pad = padded_size(*entries_[e].var, parts_) - rows * cols;
      if (pad > 0) B::fill(B::alias(window_, at + rows * cols, 1, pad), 0.0f);
    }
  }
  // The gradient of `v` is complete; its bucket starts reducing when it is the last one.
  void ready(const variable<B>* v) {
    const std::size_t index = bucket_of(v);
    if (index == npos) return;
    bucket& b = buckets_[index];
    if (++b.ready == b.members && options_.overlap) {
      const auto t0 = clock::now();
      start(b);
      stats_.backward_mpi_seconds += seconds_since(t0);
    }
  }
  // Lets MPI progress the collectives in flight (MPI progresses inside MPI calls only).
  void progress() {
    const auto t0 = clock::now();
    bool any = false;
    for (auto& b : buckets_)
      if (b.started && b.request.pending()) any = true, b.request.test();
    if (any) stats_.backward_mpi_seconds += seconds_since(t0);
  }
  // After the backward pass: runs the first step of what has not started, with blocking
  // collectives (one call for each run of adjacent buckets reduced alike: they are contiguous in
  // the buffer), waits for what has, then runs every bucket's later steps (a reduction to one
  // device's broadcast).
  void finish() {
    const auto t0 = clock::now();
    run_blocking(0, false);
    for (auto& b : buckets_) b.request.wait();
    run_blocking(1, true);
    for (auto& b : buckets_) release(b);
    ++stats_.steps;
    stats_.backward_seconds += std::chrono::duration<double>(t0 - backward_start_).count();
    stats_.exposed_seconds += seconds_since(t0);
  }

  [[nodiscard]] const communication_stats& stats() const noexcept { return stats_; }
  void reset_stats() {
    stats_.steps = 0;
    stats_.exposed_seconds = stats_.backward_seconds = stats_.backward_mpi_seconds = 0;
  }

 private:
  // Elements one MPI call can take (its count is an int).
  static constexpr std::size_t max_call = 0x7fffffff;
  using clock = std::chrono::steady_clock;
  static double seconds_since(clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  }
  struct bucket {
    std::size_t offset = 0, size = 0;
    gradient_steps steps{};
    std::size_t members = 0, ready = 0;
    typename C::request request;
    bool started = false;
    std::size_t first = 0;  // its first entry
    std::size_t at = 0;     // its place in the window
    bool open = false;      // in the window: backward fills it, or it is being reduced
  };
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  // A gradient's values in the buckets: its block's, padded to a multiple of `parts`.
  static std::size_t padded_size(const variable<B>& v, std::size_t parts) {
    const std::size_t n = v.value.block_rows() * v.value.block_cols();
    return (n + parts - 1) / parts * parts;
  }
  std::size_t bucket_of(const variable<B>* v) const noexcept {
    for (const auto& [var, index] : owner_)
      if (var == v) return index;
    return npos;
  }
  // A bucket's place in the window given up, once its reduction has ended (started here if it
  // has not); its members' gradients are views of nothing until it opens again.
  void release(bucket& b) {
    if (!transient_ || !b.open) return;
    if (!b.started) start(b);
    b.request.wait();
    for (std::size_t m = 0; m < b.members; ++m)
      entries_[b.first + m].var->gradient = typename B::matrix();
    b.open = false;
  }
  // The values of bucket `b` in the collectives' memory.
  std::span<float> data_of(const bucket& b) {
    if (transient_) return B::comm_span(window_).subspan(b.at, b.size);
    return B::comm_span(flat_).subspan(b.offset, b.size);
  }
  // Buckets that may share one call: the same steps over the same axes (their roots alike).
  static bool alike(const gradient_steps& a, const gradient_steps& b) noexcept {
    if (a.count != b.count) return false;
    for (std::size_t k = 0; k < a.count; ++k)
      if (a.steps[k].kind != b.steps[k].kind || a.steps[k].axis != b.steps[k].axis ||
          a.steps[k].root != b.steps[k].root)
        return false;
    return true;
  }
  // Step `k` of the buckets that have one, blocking: with `started` false, of those not started
  // yet, one call for each run of adjacent buckets alike (they are contiguous in the buffer);
  // with `started` true, of every bucket, one call each (a bucket is the unit of fusion, as
  // bucket_cap_mb sets it).
  void run_blocking(std::size_t k, bool started) {
    for (std::size_t i = 0; i < buckets_.size();) {
      if ((buckets_[i].started && !started) || buckets_[i].steps.count <= k) {
        ++i;
        continue;
      }
      // (A reduce-scatter's parts are each bucket's own: those buckets are never fused.)
      const reshard_step& step = buckets_[i].steps.steps[k];
      std::size_t j = i + 1, size = buckets_[i].size;
      while (!started && step.kind != collective::reduce_scatter && j < buckets_.size() &&
             !buckets_[j].started && alike(buckets_[j].steps, buckets_[i].steps) &&
             size + buckets_[j].size <= max_call)
        size += buckets_[j++].size;
      const std::span<float> data =
          transient_ ? data_of(buckets_[i]) : B::comm_span(flat_).subspan(buckets_[i].offset, size);
      comm::run_step(*pm_, step, std::span<const float>(data), output(buckets_[i], step, data));
      record(step, size);
      // (Their first step has run: release() must not start it again.)
      for (; i < j; ++i) buckets_[i].started = true;
    }
  }
  void start(bucket& b) {
    const std::span<float> data = data_of(b);
    b.request = comm::start_step(*pm_, b.steps.first(), std::span<const float>(data),
                                 output(b, b.steps.first(), data));
    b.started = true;
    record(b.steps.first(), b.size);
  }
  // Where step `s` of bucket `b` leaves its result: in place, or a reduce-scatter's part at
  // the start of the bucket (or in part_gradients()).
  std::span<float> output(const bucket& b, const reshard_step& s, std::span<float> data) {
    if (s.kind != collective::reduce_scatter) return data;
    if (in_place()) return data.subspan(0, b.size / parts_);
    return B::comm_span(part_gradients_).subspan(b.offset / parts_, b.size / parts_);
  }
  void record(const reshard_step& s, std::size_t floats) {
    if (log_ != nullptr) log_->add({s.kind, s.axis, 0, 0, floats * sizeof(float)});
  }

  const bound_mesh<C>* pm_ = nullptr;
  collective_log* log_ = nullptr;
  gradient_options options_{};
  typename B::matrix flat_, part_gradients_;
  std::size_t parts_ = 1;
  std::vector<place> places_;
  std::vector<bucket> buckets_;
  std::vector<std::pair<const variable<B>*, std::size_t>> owner_;
  std::vector<entry> entries_;
  std::vector<std::pair<std::size_t, std::size_t>> shapes_;  // each entry's rows and columns
  bool transient_ = false;     // the buckets take turns in the window
  typename B::matrix window_;  // (then) the largest two consecutive buckets' values
  communication_stats stats_{};
  clock::time_point backward_start_{};
};

}  // namespace tessel
