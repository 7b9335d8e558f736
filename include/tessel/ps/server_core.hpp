#pragma once
// A parameter server's handling of requests (a `ps` task), over any store of shards that applies
// an optimizer: the state the ps keeps (its generation, version, the batches applied) and the
// order in which a request is checked and then carried out. Every request is decoded and checked
// whole (messages.hpp) before anything changes; a refused one is answered `failed` with the
// reason and leaves the ps as it was.
//
// `Shards` holds the variables' shards and the optimizer (server.hpp's optimizer_shards, on the
// host backend; the fuzz harness's plain one):
//   void create(const create_request&, const message&)  the shards and a fresh optimizer, the
//                                                        values from frames 1.. (checked)
//   std::size_t count(), std::size_t size(i), const std::string& path(i)
//   std::vector<float> values(i)
//   void apply(const message&)                          one update from the gradient frames
//   (checked) std::vector<std::size_t> slot_sizes()               the optimizer's slots, in its
//   order std::int64_t iterations(), double learning_rate(), std::vector<float> slot(j) void
//   restore(const restore_request&, const message&)  values and slots from the frames (checked)
#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages.hpp"
#include "transport.hpp"

namespace tessel::ps {

template <class Shards>
class basic_parameter_server {
 public:
  // Handles one request and returns its reply; `stop` becomes true on shutdown. A request that
  // fails a check is answered `failed` with the reason, and changes nothing.
  message handle(const message& m, bool& stop) {
    try {
      return handle_checked(m, stop);
    } catch (const refused& e) {
      return failure(m, e.what());
    }
  }
  [[nodiscard]] std::uint64_t applied() const noexcept { return applied_; }
  [[nodiscard]] std::uint64_t refused_repeats() const noexcept { return refused_; }
  [[nodiscard]] std::uint64_t version() const noexcept { return version_; }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  [[nodiscard]] bool holds_variables() const noexcept { return created_; }
  // The batches recorded as applied since the variables were created or restored.
  [[nodiscard]] std::size_t batches_recorded() const noexcept { return applied_batches_.size(); }
  [[nodiscard]] const Shards& shards() const noexcept { return shards_; }

 private:
  message handle_checked(const message& m, bool& stop) {
    switch (m.h.what) {
      case kind::hello:
        return reply_to(m, kind::hello);
      case kind::heartbeat: {
        message r = reply_to(m, kind::heartbeat);
        r.h.a = applied_;
        r.h.b = refused_;
        r.h.c = version_;
        return r;
      }
      case kind::create:
        return create(m);
      case kind::pull:
        return pull(m);
      case kind::push:
        return push(m);
      case kind::state:
        return state(m);
      case kind::restore:
        return restore(m);
      case kind::shutdown:
        stop = true;
        return reply_to(m, kind::shutdown);
      default:
        throw refused("a ps task does not handle requests of kind " +
                      std::to_string(static_cast<std::uint32_t>(m.h.what)));
    }
  }

  // The variables created anew: every check passes before the old ones are dropped.
  message create(const message& m) {
    const create_request r = decode_create(m);
    shards_.create(r, m);
    paths_.clear();
    sizes_.clear();
    for (std::size_t i = 0; i < shards_.count(); ++i) {
      paths_.push_back(shards_.path(i));
      sizes_.push_back(shards_.size(i));
    }
    applied_batches_.clear();
    version_ = 0;
    generation_ = r.generation;
    created_ = true;
    return reply_to(m, kind::create);
  }
  // Every shard's values; a = the version (updates applied so far), b = the generation (how
  // many times the chief has created the variables).
  message pull(const message& m) {
    if (!created_) return reply_to(m, kind::empty);
    message r = reply_to(m, kind::pull);
    r.h.a = version_;
    r.h.b = generation_;
    for (std::size_t i = 0; i < shards_.count(); ++i)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(shards_.values(i))));
    return r;
  }
  // Reply: a = staleness (updates applied since the worker's pull), b = 1 when applied, 0 when
  // the batch had been applied already, 2 when it was computed from variables the chief has since
  // created again (a push sent before this ps was restored from a backup, delivered after):
  // neither is applied. A push whose sizes do not fit, or whose gradient is not finite, is
  // refused (`failed`): its batch is not recorded, so the worker's real push still counts.
  message push(const message& m) {
    if (!created_) return reply_to(m, kind::empty);
    const push_request p = decode_push(m, paths_, sizes_);
    message r = reply_to(m, kind::push);
    if (p.generation != generation_) {
      r.h.b = 2;
      return r;
    }
    if (const auto why = non_finite_gradient(m, p, paths_)) throw refused(*why);
    r.h.a = version_ >= p.version ? version_ - p.version : 0;
    if (!applied_batches_.insert(p.batch).second) {
      ++refused_;
      return r;
    }
    shards_.apply(m);
    ++version_;
    ++applied_;
    r.h.b = 1;
    return r;
  }
  // The shards' values, then the optimizer's slots (in its order); a = the optimizer's
  // iterations, JSON frame first with its learning rate.
  message state(const message& m) {
    if (!created_) return reply_to(m, kind::empty);
    message r = reply_to(m, kind::state);
    r.h.a = static_cast<std::uint64_t>(shards_.iterations());
    r.frames.push_back(frame_of(nlohmann::json{{"learning_rate", shards_.learning_rate()}}.dump()));
    for (std::size_t i = 0; i < shards_.count(); ++i)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(shards_.values(i))));
    const std::size_t slots = shards_.slot_sizes().size();
    for (std::size_t j = 0; j < slots; ++j)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(shards_.slot(j))));
    return r;
  }
  // state's reply given back (after create): the values, the slots, the iterations.
  message restore(const message& m) {
    if (!created_) return reply_to(m, kind::empty);
    const restore_request r = decode_restore(m, paths_, sizes_, shards_.slot_sizes());
    shards_.restore(r, m);
    applied_batches_.clear();
    return reply_to(m, kind::restore);
  }

  Shards shards_;
  bool created_ = false;
  std::vector<std::string> paths_;  // the shards', in the order of the messages
  std::vector<std::size_t> sizes_;
  std::unordered_set<std::uint64_t> applied_batches_;
  std::uint64_t version_ = 0, generation_ = 0, applied_ = 0, refused_ = 0;
};

}  // namespace tessel::ps
