// libFuzzer harness for what a parameter-server job's worker and chief read off the wire and
// from their files (include/tessel/ps/messages.hpp, backup_position.hpp, security.hpp,
// cluster.hpp): a ps's replies to a pull and to a state request, put together into the
// variables; a joining worker's description of its model; a worker's `done`; the chief's backup
// position; an optimizer's description; TF_CONFIG; a keys file.
//
// Input: a byte choosing the reader, then its input. For the replies (0, 1): a byte choosing the
// ps (and the slots per shard), a frame count, then frames as 2-byte little-endian lengths and
// their bytes, each at an odd address as ZeroMQ hands them out; the placement is fixed (three
// variables of shapes (5, 3), (3,), (4, 2), two shards each, on two ps tasks). For the others:
// the text or the frame's bytes.
//
// The documented errors are ps::refused (a reply or description refused) and tessel::value_error
// (a file or a configuration refused, naming it). Besides memory safety and any other exception,
// a finding is: a refused reply that wrote into the variables, an accepted one that left a
// shard's place unwritten or wrote another's, an accepted description of another model, a done
// read wrong, an accepted position or optimizer that does not read back the same, an accepted
// TF_CONFIG with an address its own rule refuses, accepted keys whose public keys are not their
// secrets'.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <tessel/ps/backup_position.hpp>
#include <tessel/ps/cluster.hpp>
#include <tessel/ps/messages.hpp>
#include <tessel/ps/security.hpp>
#include <vector>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;
namespace ps = tessel::ps;

namespace {

const std::vector<std::vector<std::size_t>> shapes{{5, 3}, {3}, {4, 2}};
const std::vector<std::string> names{"dense/kernel", "dense/bias", "dense_1/kernel"};

const ps::placement& fixed_placement() {
  static const ps::placement p = ps::place(shapes, names, ps::fixed_shards_partitioner{2}, 2);
  return p;
}

zmq::message_t odd_frame(const std::uint8_t* bytes, std::size_t n) {
  auto* buffer = new unsigned char[n + 1];
  if (n > 0) std::memcpy(buffer + 1, bytes, n);
  return zmq::message_t(
      buffer + 1, n, [](void*, void* hint) { delete[] static_cast<unsigned char*>(hint); }, buffer);
}

ps::message frames_of(const std::uint8_t* data, std::size_t size) {
  ps::message m;
  if (size == 0) return m;
  const std::size_t count = data[0];
  std::size_t at = 1;
  for (std::size_t f = 0; f < count && at + 2 <= size; ++f) {
    const std::size_t n = std::min<std::size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
    m.frames.push_back(odd_frame(data + at + 2, n));
    at += 2 + n;
  }
  return m;
}

constexpr std::uint32_t sentinel = 0x7fc0dead;  // a NaN no frame is compared against
std::vector<std::vector<float>> sentinel_arrays(std::size_t copies_each) {
  std::vector<std::vector<float>> out;
  float s;
  std::memcpy(&s, &sentinel, 4);
  for (const auto& shape : shapes) {
    std::size_t n = 1;
    for (const auto e : shape) n *= e;
    for (std::size_t j = 0; j < copies_each; ++j) out.emplace_back(n, s);
  }
  return out;
}
bool is_sentinel(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b == sentinel;
}
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// Every place of the arrays (per_variable of them per variable): written from its frame where
// ps p holds its shard (`frame(q, slot)`: the frame of the q-th of p's shards), untouched
// elsewhere or when the reply was refused.
template <class Frame>
void check_written(const std::vector<std::vector<float>>& arrays, std::size_t per_variable,
                   const ps::message& r, int p, bool accepted, Frame frame) {
  const ps::placement& pl = fixed_placement();
  const auto mine = pl.shards_of(p);
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    const std::size_t variable = a / per_variable, slot = a % per_variable;
    for (std::size_t k = 0; k < arrays[a].size(); ++k) {
      std::optional<float> want;
      for (std::size_t q = 0; q < mine.size(); ++q) {
        const ps::shard_placement& s = pl.shards[mine[q]];
        if (accepted && s.variable == variable && k >= s.offset && k < s.offset + s.values)
          want = ps::frame_floats(r.frames[frame(q, slot)])[k - s.offset];
      }
      if (!accepted || !want) {
        if (!is_sentinel(arrays[a][k])) fail("a value outside the accepted shards was written");
      } else if (!same_bits(arrays[a][k], *want)) {
        fail("a shard's value is not its frame's");
      }
    }
  }
}

void pull_reply(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return;
  const int p = data[0] % 2;
  const ps::message r = frames_of(data + 1, size - 1);
  auto arrays = sentinel_arrays(1);
  std::vector<std::span<float>> spans(arrays.begin(), arrays.end());
  bool accepted = true;
  try {
    ps::assemble_pull(r, fixed_placement(), p, spans, "ps 1 at h:1");
  } catch (const ps::refused& e) {
    accepted = false;
    if (std::string(e.what()).find("ps 1 at h:1") == std::string::npos)
      fail("a refused pull does not name the ps");
  }
  check_written(arrays, 1, r, p, accepted, [](std::size_t q, std::size_t) { return q; });
}

void state_reply(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return;
  const int p = data[0] % 2;
  const std::size_t k = data[1] % 3;
  ps::message r = frames_of(data + 2, size - 2);
  r.h.a = data[0];
  auto slots = sentinel_arrays(k);
  std::vector<std::span<float>> spans(slots.begin(), slots.end());
  bool accepted = true;
  try {
    const ps::state_head h = ps::assemble_state(r, fixed_placement(), p, k, spans, "ps 0 at h:2");
    if (!std::isfinite(h.learning_rate) || h.learning_rate < 0 ||
        h.iterations != static_cast<std::int64_t>(data[0]))
      fail("an accepted state's head is not the one sent");
  } catch (const ps::refused& e) {
    accepted = false;
    if (std::string(e.what()).find("ps 0 at h:2") == std::string::npos)
      fail("a refused state does not name the ps");
  }
  const std::size_t held = fixed_placement().shards_of(p).size();
  if (k > 0)
    check_written(slots, k, r, p, accepted,
                  [&](std::size_t q, std::size_t slot) { return 1 + held + q * k + slot; });
}

void model_description(const std::uint8_t* data, std::size_t size) {
  const zmq::message_t frame(data, size);
  const auto difference = ps::model_difference(frame, names, shapes);
  const std::string mine = ps::describe_variables(names, shapes);
  if (ps::model_difference(zmq::message_t(mine.data(), mine.size()), names, shapes))
    fail("the model's own description differs from it");
  if (!difference) {
    const auto j = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size));
    const auto& v = j["variables"];
    if (v.size() != names.size()) fail("a description of another number of variables accepted");
    for (std::size_t i = 0; i < names.size(); ++i)
      if (v[i]["path"] != names[i] || v[i]["shape"].get<std::vector<std::size_t>>() != shapes[i])
        fail("a description of another model accepted");
  }
}

void done(const std::uint8_t* data, std::size_t size) {
  ps::message m;
  m.frames.push_back(odd_frame(data, size));
  const auto d = ps::decode_done(m);
  if (!d) return;
  if (size != 16) fail("a done frame of the wrong size accepted");
  double values[2];
  std::memcpy(values, data, 16);
  if (std::memcmp(&d->result, &values[0], sizeof(double)) != 0) fail("a done's result read wrong");
  if (!(values[1] >= 0) || d->staleness != static_cast<std::uint64_t>(values[1]))
    fail("a done's staleness read wrong");
}

void position(const std::string& text) {
  try {
    const ps::backup_point p = ps::parse_position(text, "/b/position.json", 32, 3);
    const ps::backup_point q = ps::parse_position(ps::position_text(p), "/b/position.json", 32, 3);
    if (q.epochs_done != p.epochs_done || q.next_index != p.next_index ||
        q.weights_bytes != p.weights_bytes || q.weights_crc32 != p.weights_crc32)
      fail("a position written back reads differently");
    if (p.epochs_done > 3 || p.steps_per_epoch != 32 || p.next_index < p.epochs_done * 32)
      fail("a position out of range accepted");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find("/b/position.json") == std::string::npos)
      fail("a position's refusal does not name the file");
  }
}

void optimizer(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  try {
    const tessel::optimizers::config c = ps::decode_optimizer(j);
    if (ps::decode_optimizer(ps::optimizer_json(c)) != c)
      fail("a decoded optimizer decodes differently again");
    for (const auto& entry : c.values)
      if (const double* v = std::get_if<double>(&entry.second); v && !std::isfinite(*v))
        fail("an optimizer with a non-finite field accepted");
    // The registry makes it, or refuses it with a value_error (a ps's create turns that into
    // a refusal): nothing else escapes.
    try {
      (void)tessel::optimizers::make_optimizer<tessel_fuzz::checking_backend>(c, "create");
    } catch (const tessel::value_error&) {
    }
  } catch (const ps::refused&) {
  }
}

void tf_config(const std::string& text) {
  try {
    const ps::cluster_spec c = ps::parse_cluster(text);
    for (const auto* list : {&c.chief, &c.worker, &c.ps})
      for (const std::string& a : *list)
        if (!tessel::runtime::parse_address(a).first) fail("TF_CONFIG with a bad address accepted");
    if (c.task_index < 0 || static_cast<std::size_t>(c.task_index) >= c.job(c.task_type).size())
      fail("TF_CONFIG with a task index out of its list accepted");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).rfind("TF_CONFIG: ", 0) != 0) fail("a TF_CONFIG refusal not named");
  }
}

void keys(const std::string& text) {
  try {
    const ps::cluster_keys k = ps::parse_cluster_keys(text, "KEYS");
    char derived[41];
    if (zmq_curve_public(derived, k.server_secret.c_str()) != 0 || k.server_public != derived ||
        zmq_curve_public(derived, k.client_secret.c_str()) != 0 || k.client_public != derived)
      fail("keys whose public keys are not their secrets' accepted");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).rfind("KEYS: ", 0) != 0) fail("a keys refusal not named");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t* rest = data + 1;
  const std::size_t n = size - 1;
  const std::string text(reinterpret_cast<const char*>(rest), n);
  try {
    switch (data[0] % 8) {
      case 0:
        pull_reply(rest, n);
        break;
      case 1:
        state_reply(rest, n);
        break;
      case 2:
        model_description(rest, n);
        break;
      case 3:
        done(rest, n);
        break;
      case 4:
        position(text);
        break;
      case 5:
        optimizer(text);
        break;
      case 6:
        tf_config(text);
        break;
      default:
        keys(text);
        break;
    }
  } catch (const ps::refused&) {
    fail("a refusal escaped its reader");
  }
  return 0;
}
