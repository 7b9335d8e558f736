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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
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
  void build(const gradient_buckets<B, C>& buckets, const C& group, int axis,
             const optimizer_spec& spec, collective_log* log, bool gradients_free = false) {
    group_ = &group;
    axis_ = axis;
    log_ = log;
    parts_.clear();
    runs_ = buckets.runs();
    places_ = buckets.places();
    opt_.emplace(spec);
    const auto n = static_cast<std::size_t>(group.size());
    const auto me = static_cast<std::size_t>(group.rank());
    const std::size_t total = total_values();
    weights_.clear();
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
  void clear() {
    opt_.reset();
    parts_.clear();
    runs_.clear();
    places_.clear();
  }
  // The parts' optimizer (its slots are this process's share of the state).
  [[nodiscard]] const optimizer<B>& parts_optimizer() const { return *opt_; }

  // One step: this process's parts updated at the iteration and learning rate of `full` (whose
  // count advances with them), then every bucket's parts all-gathered in place.
  void apply(optimizer<B>& full) {
    opt_->set_counters(full.iterations(), full.learning_rate());
    opt_->apply(variables());
    full.set_counters(opt_->iterations(), full.learning_rate());
    ahead_ = true;
    for (std::size_t b = 0; b < runs_.size(); ++b)
      gather(B::comm_span(weights_[b]), B::cols(parts_[b].value.local()));
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
    if (log_ != nullptr)
      log_->add(
          {collective::all_gather, static_cast<std::uint8_t>(axis_), 0, 0, part * sizeof(float)});
  }

  const C* group_ = nullptr;
  collective_log* log_ = nullptr;
  int axis_ = 0;
  bool ahead_ = true;  // the parts were updated since the whole state was last gathered or set
  std::optional<optimizer<B>> opt_;
  std::deque<variable<B>> parts_;
  std::vector<typename gradient_buckets<B, C>::run> runs_;
  std::vector<typename gradient_buckets<B, C>::place> places_;
  std::vector<matrix> weights_;  // each bucket's run of the weights
};

}  // namespace tessel
