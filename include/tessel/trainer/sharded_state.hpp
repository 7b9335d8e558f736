// sharded_state: the optimizer state split over a data-parallel mesh (ZeRO-1 and ZeRO-2,
// shard_state). The weights live in one buffer per gradient bucket, laid out as the bucket (each
// variable's value a view of its place, as its gradient is), so that every bucket is one run of
// both, divided into as many equal parts as processes. A process owns part `rank` of each
// bucket: it keeps the optimizer's slots of those values only, updates them from the summed
// gradients (the all-reduced buffer, or the reduce-scattered part), and the updated parts are
// all-gathered in place, leaving the whole weights on every process. The optimizers are
// element-wise, so an update of a part equals the same values' update in the whole model.
//
// The optimizer as the model and its checkpoints know it (one set of slots per variable, in
// Keras's names) is the trainer's: gather() fills it from the parts before its state is read,
// scatter() takes the parts from it after its state was written.
//
// With the weights split too (shard_state::weights: ZeRO-3, FSDP's FULL_SHARD) a process keeps
// its parts of the weights alone, in a buffer of their own, and the whole weights exist only in a
// window (weights_window: two consecutive layers' buckets, or one layer's where two would not
// save memory or without gradient_options::overlap): before a layer's forward, and again before
// its backward, its buckets are all-gathered into their places there (gather_layer), and the
// next layer's are started without waiting where the window has room (FSDP's prefetch). The
// update leaves the parts updated, and nothing is gathered after it. Outside a training step the
// model's weights are read and written whole: materialize() gathers them into one buffer per
// bucket (FSDP's summon_full_params), and release() takes each process's parts back from them at
// the next step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/planner.hpp"
#include "../optimizers.hpp"
#include "../runtime/reshard.hpp"
#include "gradient_buckets.hpp"

namespace tessel {

template <class B, class C>
class sharded_state {
  using matrix = typename B::matrix;

 public:
  // Moves the variables the buckets take into one buffer per bucket and makes this process's
  // parts of each bucket the variables of its own optimizer (`spec`). `group`: the batch axis's
  // processes. `gradients_free`: the buckets' gradients hold nothing to keep, and the values pass
  // through their buffer (laid out alike), so that the old and the new weights are never held at
  // once.
  // The all-gathers are recorded in `log` under mesh axis `axis` (the batch axis).
  // `split_weights`: each process keeps its parts of the weights alone (shard_state::weights);
  // the variables' values are whole (not a window's) when it is called. `backward_gathers`:
  // the layers whose weights the plan gathers again before their backward (not the last layer,
  // whose forward gather backward finds in place, nor a first layer that needs none).
  void build(const gradient_buckets<B, C>& buckets, const C& group, int axis,
             const optimizer_function<B>& spec, collective_log* log, bool gradients_free = false,
             bool split_weights = false, std::vector<std::size_t> backward_gathers = {}) {
    backward_gathers_ = std::move(backward_gathers);
    group_ = &group;
    axis_ = axis;
    log_ = log;
    parts_.clear();
    runs_ = buckets.runs();
    places_ = buckets.places();
    opt_.emplace(spec);
    decay_for_.reset();
    const auto n = static_cast<std::size_t>(group.size());
    const auto me = static_cast<std::size_t>(group.rank());
    const std::size_t total = total_values();
    weights_.clear();
    split_weights_ = split_weights;
    whole_ = false;
    if (split_weights_) return build_split_weights(buckets);
    // (Transient buckets have no buffer to pass through: the values move run by run, each
    // released once moved, so that the old and the new weights overlap by one run at most.)
    const bool staged = gradients_free && total && !buckets.transient();
    if (staged) move_values_to(buckets.flat(), 0, total);
    for (const auto& r : runs_) {
      weights_.push_back(B::make_zeros("sharded_weights", 1, r.size));
      move_values_to(weights_.back(), r.offset, r.size);
    }
    if (staged) B::fill(buckets.flat(), 0.0f);
    for (std::size_t b = 0; b < runs_.size(); ++b) {
      const std::size_t part = runs_[b].size / n, first = runs_[b].offset + me * part;
      variable<B>& x = parts_.emplace_back();
      x.path = "part_" + std::to_string(b);
      x.shape = {part};
      x.value =
          basic_dtensor<B>(shape_value{part}, layout_value::replicated(1), mesh_value{}, {}, x.path)
              .like(B::alias(weights_[b], first - runs_[b].offset, 1, part));
      x.gradient = runs_[b].scattered ? buckets.part_gradient(runs_[b].offset, part)
                                      : B::alias(buckets.flat(), first, 1, part);
    }
    opt_->build(variables());
    ahead_ = true;
  }

  [[nodiscard]] bool empty() const noexcept { return !opt_.has_value(); }
  // (Under split weights, the variables must be whole first: materialize().)
  void clear() {
    finish_prefetches();
    opt_.reset();
    parts_.clear();
    runs_.clear();
    places_.clear();
    split_weights_ = whole_ = false;
    window_ = part_values_ = matrix();
  }
  // Whether each process keeps its parts of the weights alone (shard_state::weights), and how
  // many values they hold (0 when it does not).
  [[nodiscard]] bool splits_weights() const noexcept { return split_weights_; }
  [[nodiscard]] std::size_t weight_part_values() const noexcept {
    return split_weights_ ? B::rows(part_values_) * B::cols(part_values_) : 0;
  }

  // ---- the split weights (shard_state::weights) ---------------------------------------------
  // The whole weights, for a reader or writer outside a training step: each bucket's parts
  // all-gathered into a buffer of its own, the variables' values views of it. A collective: every
  // process of the group calls it. Nothing moves when the weights are whole already.
  void materialize() {
    if (!split_weights_ || whole_) return;
    finish_prefetches();
    for (std::size_t b = 0; b < runs_.size(); ++b) {
      weights_.push_back(B::make_zeros("sharded_weights", 1, runs_[b].size));
      gather_part(b, B::comm_span(weights_.back()));
    }
    for (std::size_t i = 0; i < places_.size(); ++i) {
      const std::size_t b = place_bucket_[i];
      view_values(i, weights_[b], places_[i].offset - runs_[b].offset);
    }
    whole_ = true;
  }
  // Back to the parts, before a training step: each process's part of every bucket taken from the
  // whole weights (a reader may have written them), which are released; the variables' values are
  // views of their places in the window again, holding nothing until gathered.
  void release() {
    if (!split_weights_ || !whole_) return;
    take_parts();
    point_at_window();
    weights_.clear();
    whole_ = false;
  }
  // Before a pass (a training step's forward, an evaluation's or a prediction's batch): nothing
  // is taken as gathered, so that every layer gathers its weights as the plan lists.
  void begin_pass() {
    if (!split_weights_ || whole_) return;
    finish_prefetches();
    std::fill(resident_.begin(), resident_.end(), false);
  }
  // Before backward: only the last layer's weights are taken as gathered (forward gathered them
  // last); every other layer gathers its weights again.
  void begin_backward() {
    if (!split_weights_ || whole_ || ops_.empty()) return;
    finish_prefetches();
    for (std::size_t b = 0; b < resident_.size(); ++b)
      if (!of_op(b, ops_.back())) resident_[b] = false;
  }
  // Before a layer's forward (`forward`) or backward, with its variables: its buckets gathered
  // into the window (waiting for a prefetch started before), then the next layer's started (in
  // forward's order or backward's).
  void gather_layer(std::span<variable<B>* const> vars, bool forward) {
    if (!split_weights_ || whole_) return;
    std::size_t k = ops_.size();
    for (const variable<B>* v : vars)
      for (std::size_t i = 0; i < places_.size() && k == ops_.size(); ++i)
        if (places_[i].var == v) k = op_index(place_op_[i]);
    if (k == ops_.size()) return;
    const std::size_t op = ops_[k];
    if (!forward && !gathers_backward(op)) return;
    for (std::size_t b = 0; b < runs_.size(); ++b)
      if (of_op(b, op)) bring(b, op, false);
    const std::size_t next = forward ? k + 1 : k - 1;  // (k - 1 wraps past 0: none)
    if (next < ops_.size() && (forward || gathers_backward(ops_[next])))
      for (std::size_t b = 0; b < runs_.size(); ++b)
        if (of_op(b, ops_[next])) bring(b, op, true);
  }
  // The parts' optimizer (its slots are this process's share of the state).
  [[nodiscard]] const optimizer<B>& parts_optimizer() const { return *opt_; }

  // One step: this process's parts updated at the iteration and learning rate of `full` (whose
  // count advances with them; its slots, gathered whole by a read, are released), then every
  // bucket's parts all-gathered in place.
  // Under split weights the parts are the weights: nothing is gathered (but into the whole
  // weights, when a reader made them whole between the gradients and the update: the update then
  // starts from them, a writer's values included).
  void apply(optimizer<B>& full) {
    opt_->set_counters(full.iterations(), full.learning_rate());
    if (full.spec().config().weight_decay != 0.0 && decay_for_ != full.weight_decay_exclusions())
      set_decay(full);
    // (The whole state a read gathered is stale from here: its memory goes back.)
    full.release();
    finish_prefetches();
    if (split_weights_ && whole_) take_parts();
    opt_->apply(variables());
    full.set_counters(opt_->iterations(), full.learning_rate());
    ahead_ = true;
    spread();
  }

  // Keras's finalize_variable_values on the parts (use_ema: the weights take their moving
  // averages), spread as an update's are. A collective: every process of the group calls it.
  void finalize_variable_values(optimizer<B>& full) {
    full.release();
    finish_prefetches();
    if (split_weights_ && whole_) take_parts();
    opt_->finalize_variable_values(variables());
    ahead_ = true;
    spread();
  }

  // clipnorm and global_clipnorm on the parts: each part's ranges that fall in a variable, with
  // the variable's index and whether this process counts its values (`counts`), the squared
  // norms summed over the processes by `sum`.
  void set_gradient_norms(const std::function<bool(const variable<B>&)>& counts,
                          std::function<void(std::span<double>)> sum) {
    typename optimizer<B>::gradient_norms norms;
    norms.variables = places_.size();
    norms.segments.resize(runs_.size());
    for_each_overlap([&](std::size_t b, std::size_t i, std::size_t begin, std::size_t end) {
      norms.segments[b].push_back({begin, end, i, counts(*places_[i].var)});
    });
    norms.sum = std::move(sum);
    opt_->set_gradient_norms(std::move(norms));
  }

  // `full`'s slots (built for the model's trainable variables) set from the parts: each slot's
  // parts all-gathered into a whole buffer laid out as the weights, then copied to the slots of
  // the variables it holds. A collective: every process of the group calls it.
  // Nothing moves when `full` is current (the parts have not been updated since it was gathered
  // or scattered from).
  void gather_into(optimizer<B>& full, const std::vector<variable<B>*>& trainable) {
    if (!ahead_ && full.built()) return;
    ahead_ = false;
    full.build(trainable);
    full.set_counters(opt_->iterations(), full.learning_rate());
    const std::size_t slots = full.slots_per_variable();
    if (slots == 0 || runs_.empty()) return;
    const std::vector<variable<B>*> mine = opt_->variables(), whole = full.variables();
    const matrix buffer = B::make_zeros("sharded_slots", 1, total_values());
    const std::span<float> all = B::comm_span(buffer);
    for (std::size_t k = 0; k < slots; ++k) {
      for (std::size_t b = 0; b < runs_.size(); ++b) {
        const matrix own = mine[b * slots + k]->value.local();
        const std::size_t part = B::cols(own);
        B::copy(own, B::alias(buffer, runs_[b].offset + group_rank() * part, 1, part));
        gather(all.subspan(runs_[b].offset, runs_[b].size), part);
      }
      for (const auto& p : places_) {
        const matrix slot = whole[index_of(trainable, p.var) * slots + k]->value.local();
        B::copy(B::alias(buffer, p.offset, B::rows(slot), B::cols(slot)), slot);
      }
    }
  }

  // The parts' slots and counters taken from `full` (after its state was set).
  void scatter_from(optimizer<B>& full, const std::vector<variable<B>*>& trainable) {
    ahead_ = false;
    opt_->set_counters(full.iterations(), full.learning_rate());
    const std::size_t slots = full.slots_per_variable();
    if (slots == 0 || runs_.empty()) return;
    const std::vector<variable<B>*> mine = opt_->variables(), whole = full.variables();
    const matrix buffer = B::make_zeros("sharded_slots", 1, total_values());
    for (std::size_t k = 0; k < slots; ++k) {
      for (const auto& p : places_) {
        const matrix slot = whole[index_of(trainable, p.var) * slots + k]->value.local();
        B::copy(slot, B::alias(buffer, p.offset, B::rows(slot), B::cols(slot)));
      }
      for (std::size_t b = 0; b < runs_.size(); ++b) {
        const matrix own = mine[b * slots + k]->value.local();
        const std::size_t part = B::cols(own);
        B::copy(B::alias(buffer, runs_[b].offset + group_rank() * part, 1, part), own);
      }
    }
  }

 private:
  // Each process's part of every bucket taken from the whole weights.
  void take_parts() {
    for (std::size_t b = 0; b < runs_.size(); ++b) {
      const matrix own = parts_[b].value.local();
      const std::size_t part = B::cols(own);
      B::copy(B::alias(weights_[b], group_rank() * part, 1, part), own);
    }
  }
  // Split weights: each process's parts in one buffer (bucket b's at its run's offset / N),
  // copied from each variable's whole value, which is released at once (so that the whole
  // weights and the parts are held together only while they are copied), or drawn alone from a
  // variable not drawn yet (so that the whole weights are never held); then the window, the
  // variables' values views of their places in it.
  // f(b, i, begin, end) for each range [begin, end) of this process's part of bucket b that
  // falls in variable i (places_[i]), counted from the part's start.
  template <class F>
  void for_each_overlap(F&& f) const {
    const auto n = static_cast<std::size_t>(group_->size());
    const std::size_t me = group_rank();
    for (std::size_t b = 0; b < runs_.size(); ++b) {
      const std::size_t part = runs_[b].size / n, first = runs_[b].offset + me * part;
      for (std::size_t i = 0; i < places_.size(); ++i) {
        const auto& p = places_[i];
        const std::size_t lo = std::max(first, p.offset),
                          hi = std::min(first + part, p.offset + p.size);
        if (lo < hi) f(b, i, lo - first, hi - first);
      }
    }
  }
  // Weight decay on the parts: each part's ranges that fall in a variable `full` decays (a part
  // spans the variables of its bucket, some excluded by name).
  void set_decay(const optimizer<B>& full) {
    std::vector<typename optimizer<B>::element_ranges> ranges(runs_.size());
    for_each_overlap([&](std::size_t b, std::size_t i, std::size_t begin, std::size_t end) {
      if (full.decays(places_[i].var->path)) ranges[b].emplace_back(begin, end);
    });
    opt_->set_decay_ranges(std::move(ranges));
    decay_for_ = full.weight_decay_exclusions();
  }

  // After the parts changed: the updated parts all-gathered in place (under split weights the
  // parts are the weights: only a whole copy a reader made is gathered again).
  void spread() {
    if (split_weights_) {
      std::fill(resident_.begin(), resident_.end(), false);
      for (std::size_t b = 0; b < runs_.size() && whole_; ++b)
        gather_part(b, B::comm_span(weights_[b]));
      return;
    }
    for (std::size_t b = 0; b < runs_.size(); ++b)
      gather(B::comm_span(weights_[b]), B::cols(parts_[b].value.local()));
  }

  void build_split_weights(const gradient_buckets<B, C>& buckets) {
    const auto n = static_cast<std::size_t>(group_->size());
    const std::size_t me = group_rank();
    const gradient_window_layout layout = buckets.weights_window();
    if (layout.buckets != runs_.size())
      throw runtime_error("tessel: the split weights' window differs from the gradient buckets (" +
                          std::to_string(layout.buckets) + " and " +
                          std::to_string(runs_.size()) + " buckets)");
    at_.assign(layout.at.begin(), layout.at.begin() + static_cast<std::ptrdiff_t>(runs_.size()));
    resident_.assign(runs_.size(), false);
    pending_.clear();
    pending_.resize(runs_.size());
    place_bucket_.clear();
    place_op_.clear();
    shapes_.clear();
    ops_.clear();
    for (std::size_t i = 0; i < places_.size(); ++i) {
      std::size_t b = 0;
      while (b + 1 < runs_.size() && places_[i].offset >= runs_[b + 1].offset) ++b;
      place_bucket_.push_back(b);
      place_op_.push_back(buckets.entry_at(i).op);
      ops_.push_back(buckets.entry_at(i).op);
      const basic_dtensor<B>& value = places_[i].var->value;
      shapes_.emplace_back(value.block_rows(), value.block_cols());
    }
    std::sort(ops_.begin(), ops_.end());
    ops_.erase(std::unique(ops_.begin(), ops_.end()), ops_.end());
    part_values_ = B::make_zeros("sharded_weight_parts", 1, total_values() / n);
    for (std::size_t b = 0; b < runs_.size(); ++b) {
      const std::size_t part = runs_[b].size / n;
      variable<B>& x = parts_.emplace_back();
      x.path = "part_" + std::to_string(b);
      x.shape = {part};
      x.value = basic_dtensor<B>(shape_value{part}, layout_value::replicated(1), mesh_value{}, {},
                                 x.path)
                    .like(B::alias(part_values_, runs_[b].offset / n, 1, part));
      x.gradient = buckets.part_gradient(runs_[b].offset, part);
    }
    // Each variable's values that fall in this process's part of its bucket: copied, or drawn
    // alone where the variable has not been drawn (variable_store::defer).
    for (std::size_t i = 0; i < places_.size(); ++i) {
      const std::size_t b = place_bucket_[i], part = runs_[b].size / n;
      const std::size_t off = places_[i].offset - runs_[b].offset, size = places_[i].size;
      const std::size_t lo = std::max(off, me * part), hi = std::min(off + size, (me + 1) * part);
      variable<B>& v = *places_[i].var;
      const matrix mine =
          lo < hi ? B::alias(part_values_, runs_[b].offset / n + lo - me * part, 1, hi - lo)
                  : matrix();
      if (lo < hi && v.deferred)
        draw_initial_values(v, lo - off, mine);
      else if (lo < hi)
        B::copy(B::alias(v.value.local(), lo - off, 1, hi - lo), mine);
      v.value = v.value.like(matrix());
      v.deferred = false;
    }
    window_ = B::make_zeros("weight_window", 1, layout.window);
    point_at_window();
    opt_->build(variables());
    ahead_ = true;
  }
  // Every variable's value a view of its place in the window, which holds nothing gathered.
  void point_at_window() {
    for (std::size_t i = 0; i < places_.size(); ++i) {
      const std::size_t b = place_bucket_[i];
      view_values(i, window_, at_[b] + places_[i].offset - runs_[b].offset);
    }
    std::fill(resident_.begin(), resident_.end(), false);
  }
  // Place i's variable's value made a view of `buffer` from `at`.
  void view_values(std::size_t i, const matrix& buffer, std::size_t at) {
    variable<B>& v = *places_[i].var;
    v.value = v.value.like(B::alias(buffer, at, shapes_[i].first, shapes_[i].second));
  }
  // Whether layer `op`'s weights are gathered before its backward (the plan's list; the last
  // layer's are in place already).
  [[nodiscard]] bool gathers_backward(std::size_t op) const {
    return (!ops_.empty() && op == ops_.back()) ||
           std::find(backward_gathers_.begin(), backward_gathers_.end(), op) !=
               backward_gathers_.end();
  }
  [[nodiscard]] bool of_op(std::size_t b, std::size_t op) const {
    for (std::size_t i = 0; i < places_.size(); ++i)
      if (place_bucket_[i] == b && place_op_[i] == op) return true;
    return false;
  }
  [[nodiscard]] std::size_t op_index(std::size_t op) const {
    return static_cast<std::size_t>(std::lower_bound(ops_.begin(), ops_.end(), op) -
                                    ops_.begin());
  }
  [[nodiscard]] bool overlap(std::size_t a, std::size_t b) const {
    return at_[a] < at_[b] + runs_[b].size && at_[b] < at_[a] + runs_[a].size;
  }
  // Bucket b gathered into its place in the window (nothing when it is there), for layer `op`:
  // now, or (`ahead`) started without waiting, unless its place holds a bucket of `op` itself.
  // The buckets whose place it takes are no longer there.
  void bring(std::size_t b, std::size_t op, bool ahead) {
    if (resident_[b]) return;
    if (pending_[b].pending()) {
      if (!ahead) {
        pending_[b].wait();
        resident_[b] = true;
      }
      return;
    }
    for (std::size_t j = 0; j < runs_.size(); ++j) {
      if (j == b || !overlap(j, b)) continue;
      if (ahead && (resident_[j] || pending_[j].pending()) && of_op(j, op)) return;
      pending_[j].wait();
      resident_[j] = false;
    }
    const std::span<float> place = B::comm_span(window_).subspan(at_[b], runs_[b].size);
    if (!ahead) {
      gather_part(b, place);
      resident_[b] = true;
      return;
    }
    const std::span<const float> part = B::comm_span(parts_[b].value.local());
    pending_[b] = group_->iall_gather(part, place);
    record(part.size());
  }
  // Bucket b's parts (this process's, a buffer of its own) all-gathered into `run`, its values.
  void gather_part(std::size_t b, std::span<float> run) {
    const std::span<const float> part = B::comm_span(parts_[b].value.local());
    group_->all_gather(part, run);
    record(part.size());
  }
  // Waits for every gather started ahead; what they brought is in place.
  void finish_prefetches() {
    for (std::size_t b = 0; b < pending_.size(); ++b)
      if (pending_[b].pending()) {
        pending_[b].wait();
        resident_[b] = true;
      }
  }
  void record(std::size_t part) {
    if (log_ != nullptr)
      log_->add(
          {collective::all_gather, static_cast<std::uint8_t>(axis_), 0, 0, part * sizeof(float)});
  }

  // The value of each variable whose place lies in [first, first + size) of the buckets' layout
  // copied to its place in `buffer` (which holds that run), and made a view of it (its own
  // memory released, unless something else holds it).
  void move_values_to(const matrix& buffer, std::size_t first, std::size_t size) {
    for (const auto& p : places_) {
      if (p.offset < first || p.offset >= first + size) continue;
      variable<B>& v = *p.var;
      const matrix old = v.value.local();
      const matrix place = B::alias(buffer, p.offset - first, B::rows(old), B::cols(old));
      B::copy(old, place);
      v.value = v.value.like(place);
    }
  }
  // The values of every run (the buckets' layout, padding included).
  [[nodiscard]] std::size_t total_values() const noexcept {
    std::size_t total = 0;
    for (const auto& r : runs_) total = std::max(total, r.offset + r.size);
    return total;
  }
  std::vector<variable<B>*> variables() {
    std::vector<variable<B>*> v;
    for (auto& x : parts_) v.push_back(&x);
    return v;
  }
  [[nodiscard]] std::size_t group_rank() const { return static_cast<std::size_t>(group_->rank()); }
  static std::size_t index_of(const std::vector<variable<B>*>& vars, const variable<B>* v) {
    for (std::size_t i = 0; i < vars.size(); ++i)
      if (vars[i] == v) return i;
    throw value_error(
        "tessel: a variable of the gradient buckets is not among the model's "
        "trainable variables");
  }
  // All-gathers `run` in place from this process's part of it (`part` values at its rank's
  // block). Recorded as the plan counts an all_gather: the bytes of its input, the part.
  void gather(std::span<float> run, std::size_t part) {
    const std::span<float> block = run.subspan(part * group_rank(), part);
    group_->all_gather(std::span<const float>(block), run);
    record(part);
  }

  const C* group_ = nullptr;
  collective_log* log_ = nullptr;
  int axis_ = 0;
  bool ahead_ = true;  // the parts were updated since the whole state was last gathered or set
  std::optional<optimizer<B>> opt_;
  // The exclusions the parts' weight-decay ranges were worked out for (none yet: unset).
  std::optional<std::vector<std::string>> decay_for_;
  std::deque<variable<B>> parts_;
  std::vector<typename gradient_buckets<B, C>::run> runs_;
  std::vector<typename gradient_buckets<B, C>::place> places_;
  std::vector<matrix> weights_;  // each bucket's run of the weights (split weights: when whole)
  // ---- split weights (shard_state::weights)
  bool split_weights_ = false;
  bool whole_ = false;        // the weights are whole (weights_), not the window's
  matrix part_values_;        // this process's parts of every bucket
  matrix window_;             // the buckets' places (at_): weights_window's
  std::vector<std::size_t> backward_gathers_;  // the layers gathered again before backward
  std::vector<std::size_t> at_;
  std::vector<bool> resident_;                    // bucket b's values are in its place
  std::vector<typename C::request> pending_;      // a gather started ahead
  std::vector<std::size_t> place_bucket_, place_op_;  // each place's bucket and layer
  std::vector<std::pair<std::size_t, std::size_t>> shapes_;  // each place's rows and columns
  std::vector<std::size_t> ops_;                  // the layers with places, in forward order
};

}  // namespace tessel
