// libFuzzer harness for a parameter server's handling of requests
// (include/tessel/ps/server_core.hpp, basic_parameter_server, with the checks of
// ps/messages.hpp): a sequence of messages, as anyone who reaches a ps's port could send them,
// handled in turn by one ps. clang++ cannot build tessel's host optimizer (docs/testing.md), so
// the ps here holds its shards in plain vectors and applies SGD with momentum (one slot per
// shard when the momentum is not 0), the same protocol (`Shards`) as the library's store.
//
// Input: messages, each 6 bytes (kind, then the header's a, b, c, d as one byte each, then the
// number of frames), then each frame as a 2-byte little-endian length and its bytes; frames
// start at an odd address inside the input's copy, as ZeroMQ hands them out.
//
// A refusal is a `failed` reply. Besides memory safety, a finding is: an exception out of handle
// (every refusal is a reply), a reply whose id is not its request's, a refused request that
// changed anything (values, slots, generation, version, counts, the batches recorded as applied),
// an applied push that did not advance the version and the count of updates by one, a pull whose
// frames do not match the shards, a non-finite value in a shard after a push was applied from
// finite values that did not overflow.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tessel/ps/server_core.hpp>
#include <variant>
#include <vector>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;
namespace ps = tessel::ps;

namespace {

// SGD with momentum on plain vectors (Keras's update: v = momentum * v - lr * g; w += v).
class plain_shards {
 public:
  void create(const ps::create_request& r, const ps::message& m) {
    // Made first, as the library's ps makes it (an unknown class or a value out of range is
    // refused before anything changes); then its learning rate and momentum applied here.
    try {
      (void)tessel::optimizers::make_optimizer<tessel_fuzz::checking_backend>(r.optimizer,
                                                                              "create");
    } catch (const tessel::value_error& e) {
      throw ps::refused(e.what());
    }
    learning_rate_ = r.optimizer.learning_rate();
    const tessel::optimizers::value* momentum = r.optimizer.find("momentum");
    momentum_ = momentum != nullptr && std::holds_alternative<double>(*momentum)
                    ? std::get<double>(*momentum)
                    : 0.0;
    paths_.clear();
    values_.clear();
    slots_.clear();
    iterations_ = 0;
    for (std::size_t i = 0; i < r.shards.size(); ++i) {
      paths_.push_back(r.shards[i].path);
      values_.push_back(ps::frame_floats(m.frames[i + 1]).to_vector());
      if (values_.back().size() != r.shards[i].values) fail("create: a shard's values miscounted");
    }
    if (momentum_ != 0)
      for (const auto& v : values_) slots_.emplace_back(v.size(), 0.0f);
  }
  [[nodiscard]] std::size_t count() const { return values_.size(); }
  [[nodiscard]] std::size_t size(std::size_t i) const { return values_[i].size(); }
  [[nodiscard]] const std::string& path(std::size_t i) const { return paths_[i]; }
  [[nodiscard]] std::vector<float> values(std::size_t i) const { return values_[i]; }
  void apply(const ps::message& m) {
    for (std::size_t i = 0; i < values_.size(); ++i) {
      const ps::frame_floats g(m.frames[i]);
      if (g.size() != values_[i].size())
        fail("apply: a gradient of the wrong size was let through");
      for (std::size_t k = 0; k < g.size(); ++k) {
        if (!std::isfinite(g[k])) fail("apply: a non-finite gradient was let through");
        const double step = -learning_rate_ * g[k];
        if (momentum_ != 0) {
          slots_[i][k] = static_cast<float>(momentum_ * slots_[i][k] + step);
          values_[i][k] += slots_[i][k];
        } else {
          values_[i][k] += static_cast<float>(step);
        }
      }
    }
    ++iterations_;
  }
  [[nodiscard]] std::vector<std::size_t> slot_sizes() const {
    std::vector<std::size_t> out;
    for (const auto& s : slots_) out.push_back(s.size());
    return out;
  }
  [[nodiscard]] std::int64_t iterations() const { return iterations_; }
  [[nodiscard]] double learning_rate() const { return learning_rate_; }
  [[nodiscard]] std::vector<float> slot(std::size_t j) const { return slots_[j]; }
  void restore(const ps::restore_request& r, const ps::message& m) {
    for (std::size_t i = 0; i < values_.size(); ++i)
      ps::frame_floats(m.frames[1 + i]).copy_to(values_[i]);
    for (std::size_t j = 0; j < slots_.size(); ++j)
      ps::frame_floats(m.frames[1 + values_.size() + j]).copy_to(slots_[j]);
    iterations_ = r.iterations;
    learning_rate_ = r.learning_rate;
  }

  // Everything a request could change, compared bit for bit (a value may have overflowed to
  // inf and then become NaN, which == would call changed).
  bool operator==(const plain_shards& o) const {
    return paths_ == o.paths_ && same_bits(values_, o.values_) && same_bits(slots_, o.slots_) &&
           iterations_ == o.iterations_ && learning_rate_ == o.learning_rate_ &&
           momentum_ == o.momentum_;
  }
  static bool same_bits(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].size() != b[i].size() ||
          (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) != 0))
        return false;
    return true;
  }

 private:
  std::vector<std::string> paths_;
  std::vector<std::vector<float>> values_, slots_;
  std::int64_t iterations_ = 0;
  double learning_rate_ = 0, momentum_ = 0;
};

using server = ps::basic_parameter_server<plain_shards>;

struct snapshot {
  plain_shards shards;
  std::uint64_t applied, refused, version, generation;
  std::size_t batches;
  bool holds;
  bool operator==(const snapshot&) const = default;
};
snapshot snap(const server& s) {
  return {s.shards(),     s.applied(),          s.refused_repeats(), s.version(),
          s.generation(), s.batches_recorded(), s.holds_variables()};
}

// A frame whose bytes start at an odd address, as ZeroMQ hands a frame out of its buffer.
zmq::message_t odd_frame(const std::uint8_t* bytes, std::size_t n) {
  auto* buffer = new unsigned char[n + 1];
  if (n > 0) std::memcpy(buffer + 1, bytes, n);
  return zmq::message_t(
      buffer + 1, n, [](void*, void* hint) { delete[] static_cast<unsigned char*>(hint); }, buffer);
}

bool all_finite(const std::vector<float>& v) {
  for (const float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  server ps_task;
  std::size_t at = 0;
  std::uint64_t id = 0;
  while (at + 6 <= size) {
    ps::message m;
    m.h.what = static_cast<ps::kind>(data[at]);
    m.h.a = data[at + 1];
    m.h.b = data[at + 2];
    m.h.c = data[at + 3];
    m.h.d = data[at + 4];
    m.h.id = ++id;
    const std::size_t frames = data[at + 5];
    at += 6;
    for (std::size_t f = 0; f < frames && at + 2 <= size; ++f) {
      const std::size_t n = std::min<std::size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
      m.frames.push_back(odd_frame(data + at + 2, n));
      at += 2 + n;
    }

    const snapshot before = snap(ps_task);
    bool finite_before = true;
    for (std::size_t i = 0; i < ps_task.shards().count(); ++i)
      finite_before = finite_before && all_finite(ps_task.shards().values(i));
    bool stop = false;
    ps::message r;
    try {
      r = ps_task.handle(m, stop);
    } catch (const std::exception&) {
      fail("handle threw instead of refusing");
    }
    if (r.h.id != m.h.id) fail("a reply does not carry its request's id");
    const snapshot after = snap(ps_task);
    if (r.h.what == ps::kind::failed) {
      if (!(after == before)) fail("a refused request changed the ps");
      if (r.frames.empty() || r.frames[0].size() == 0) fail("a refusal gives no reason");
    }
    if (m.h.what == ps::kind::push && r.h.what == ps::kind::push && r.h.b == 1) {
      if (after.version != before.version + 1 || after.applied != before.applied + 1)
        fail("an applied push did not advance the version and the updates by one");
      // Finite values and finite gradients stay finite unless the update overflowed float.
      bool finite = true, overflow = false;
      for (std::size_t i = 0; i < ps_task.shards().count(); ++i) {
        finite = finite && all_finite(ps_task.shards().values(i));
        for (const float v : ps_task.shards().values(i))
          overflow = overflow || std::fabs(v) > 1e30f;
      }
      if (finite_before && !finite && !overflow && ps_task.shards().learning_rate() < 1e30)
        fail("a shard became non-finite from finite values and a finite gradient");
    }
    if (m.h.what != ps::kind::push && r.h.what == ps::kind::push)
      fail("a push's reply to another request");
    if (r.h.what == ps::kind::pull) {
      if (r.frames.size() != ps_task.shards().count()) fail("a pull's frames are not the shards");
      for (std::size_t i = 0; i < r.frames.size(); ++i)
        if (!plain_shards::same_bits({ps::frame_floats(r.frames[i]).to_vector()},
                                     {ps_task.shards().values(i)}))
          fail("a pull's values are not the shard's");
    }
    if (stop) break;
  }
  return 0;
}
