#pragma once
// What a parameter-server job reads off the wire, decoded and checked whole before anything is
// changed: a message that fails a check is refused (`refused`, its text the reason sent back),
// and the task that received it holds what it held before. Every check is here, apart from the
// state the tasks keep (server_core.hpp, coordinator_core.hpp), so that the fuzz harnesses
// (tests/fuzz/fuzz_ps_*.cpp) reach the same code as the tasks do.
//
// The messages come from the network: a task of this cluster built from another program, a task
// of another cluster given the same addresses, or a stranger. Sizes, counts, kinds and JSON
// fields are checked against what the receiver holds; values are checked finite where a
// non-finite one would spread (a gradient, a variable).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/errors.hpp"
#include "../optimizers/protocol.hpp"
#include "partitioner.hpp"
#include "transport.hpp"

namespace tessel::ps {

// A message refused by its receiver, which changed nothing; the text says why.
class refused : public value_error {
 public:
  using value_error::value_error;
};

// The place and kind of the first value of `values` that is not finite, as messages name it
// ("NaN at value 3 of 4").
inline std::optional<std::string> first_non_finite(const frame_floats& values) {
  const auto at = values.first_non_finite();
  if (!at) return std::nullopt;
  const float v = values[*at];
  return std::string(std::isnan(v) ? "NaN"
                     : v > 0       ? "inf"
                                   : "-inf") +
         " at value " + std::to_string(*at) + " of " + std::to_string(values.size());
}

// "(784, 256)", as Keras prints a shape.
inline std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

namespace detail {
// The number of values of `shape`, or nullopt when the product overflows 2^62 (no real variable
// comes near: the frames would have to carry them).
inline std::optional<std::size_t> values_of_shape(const std::vector<std::size_t>& shape) {
  std::size_t n = 1;
  for (const std::size_t e : shape) {
    if (e != 0 && n > (std::size_t{1} << 62) / e) return std::nullopt;
    n *= e;
  }
  return n;
}
// A JSON text frame parsed, or nullopt.
inline std::optional<nlohmann::json> json_of(const zmq::message_t& frame) {
  auto j =
      nlohmann::json::parse(static_cast<const char*>(frame.data()),
                            static_cast<const char*>(frame.data()) + frame.size(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}
// A number of the JSON object `o` (a float or an integer), finite and within [low, high].
inline double number_field(const nlohmann::json& o, const char* field, double low, double high,
                           const std::string& where) {
  if (!o.contains(field) || !o[field].is_number())
    throw refused(where + ": '" + field + "' is missing or not a number");
  const double v = o[field].get<double>();
  if (!std::isfinite(v) || v < low || v > high)
    throw refused(where + ": '" + field + "' is " + o[field].dump() + ", not in [" +
                  nlohmann::json(low).dump() + ", " + nlohmann::json(high).dump() + "]");
  return v;
}
inline bool bool_field(const nlohmann::json& o, const char* field, const std::string& where) {
  if (!o.contains(field) || !o[field].is_boolean())
    throw refused(where + ": '" + field + "' is missing or not true or false");
  return o[field].get<bool>();
}
}  // namespace detail

// An optimizer's description as the chief sends it: {"class_name", "name", "module",
// "registered_name", "config": [[field, number or bool], ...], "weight_decay", "clipnorm",
// "clipvalue", "global_clipnorm", "exclude_from_weight_decay": [name, ...], "schedule": null or
// {"class_name", "name", "module", "registered_name", "config": [[field, value], ...]}}, the
// fields in the optimizer's order (a schedule's values: null, numbers, integers, bools, lists).
namespace detail {
inline nlohmann::json schedule_json(const std::optional<optimizers::schedule_config>& s) {
  if (!s) return nullptr;
  nlohmann::json values = nlohmann::json::array();
  for (const auto& [k, v] : s->values)
    values.push_back(nlohmann::json::array(
        {k, std::visit(
                [](const auto& x) {
                  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, std::monostate>)
                    return nlohmann::json(nullptr);
                  else
                    return nlohmann::json(x);
                },
                v)}));
  return {{"class_name", s->class_name},
          {"name", s->name},
          {"module", s->module},
          {"registered_name", s->registered_name},
          {"config", values}};
}
// The schedule back, its form checked (its class and values are the registry's to check).
inline std::optional<optimizers::schedule_config> decode_schedule(const nlohmann::json& o,
                                                                  const std::string& where) {
  if (!o.contains("schedule")) throw refused(where + " has no 'schedule'");
  const nlohmann::json& s = o["schedule"];
  if (s.is_null()) return std::nullopt;
  for (const char* k : {"class_name", "name", "module", "registered_name"})
    if (!s.is_object() || !s.contains(k) || !s[k].is_string())
      throw refused(where + "'s schedule has no '" + std::string(k) + "' string");
  if (!s.contains("config") || !s["config"].is_array())
    throw refused(where + "'s schedule has no 'config' list of [name, value]");
  optimizers::schedule_config c;
  c.class_name = s["class_name"].get<std::string>();
  c.name = s["name"].get<std::string>();
  c.module = s["module"].get<std::string>();
  c.registered_name = s["registered_name"].get<std::string>();
  for (const auto& f : s["config"]) {
    if (!f.is_array() || f.size() != 2 || !f[0].is_string())
      throw refused(where + "'s schedule config holds " + f.dump(-1, ' ', true).substr(0, 64) +
                    ", not a [name, value] pair");
    const nlohmann::json& v = f[1];
    optimizers::schedule_value value;
    const auto finite = [](const nlohmann::json& x) {
      return x.is_number() && std::isfinite(x.get<double>());
    };
    if (v.is_null()) {
      value = std::monostate{};
    } else if (v.is_boolean()) {
      value = v.get<bool>();
    } else if (v.is_number_integer()) {
      value = v.get<std::int64_t>();
    } else if (finite(v)) {
      value = v.get<double>();
    } else if (v.is_array() && std::all_of(v.begin(), v.end(), finite)) {
      value = v.get<std::vector<double>>();
    } else {
      throw refused(where + "'s schedule's '" + f[0].get<std::string>() + "' is " +
                    v.dump(-1, ' ', true).substr(0, 64) +
                    ", not null, a finite number, true or false or a list of numbers");
    }
    c.values.emplace_back(f[0].get<std::string>(), std::move(value));
  }
  return c;
}
}  // namespace detail

inline nlohmann::json optimizer_json(const optimizers::config& c) {
  nlohmann::json fields = nlohmann::json::array();
  for (const auto& entry : c.values) {
    nlohmann::json v = std::holds_alternative<bool>(entry.second)
                           ? nlohmann::json(std::get<bool>(entry.second))
                           : nlohmann::json(std::get<double>(entry.second));
    fields.push_back(nlohmann::json::array({entry.first, v}));
  }
  nlohmann::json o = {{"class_name", c.class_name},
                      {"name", c.name},
                      {"module", c.module},
                      {"registered_name", c.registered_name},
                      {"config", fields},
                      {"exclude_from_weight_decay", c.exclude_from_weight_decay},
                      {"schedule", detail::schedule_json(c.schedule)}};
  c.for_each_base([&](const char* k, auto v) { o[k] = v; });
  return o;
}

// The description back, its form checked: names that are strings, every field a finite number
// or a bool. Which class it names and the values' ranges are the registry's to check
// (optimizers::make_optimizer), when a ps makes the optimizer.
inline optimizers::config decode_optimizer(const nlohmann::json& o) {
  const std::string where = "the optimizer";
  for (const char* k : {"class_name", "name", "module", "registered_name"})
    if (!o.is_object() || !o.contains(k) || !o[k].is_string())
      throw refused(where + " has no '" + std::string(k) + "' string");
  if (!o.contains("config") || !o["config"].is_array())
    throw refused(where + " has no 'config' list of [name, value]");
  optimizers::config c;
  c.class_name = o["class_name"].get<std::string>();
  c.name = o["name"].get<std::string>();
  c.module = o["module"].get<std::string>();
  c.registered_name = o["registered_name"].get<std::string>();
  constexpr double big = std::numeric_limits<double>::max();
  c.for_each_base([&](const char* k, auto& v) {
    using T = std::remove_cvref_t<decltype(v)>;
    if constexpr (std::is_same_v<T, bool>) {
      v = detail::bool_field(o, k, where);
    } else {
      const double x = detail::number_field(o, k, 0, big, where);
      if constexpr (std::is_same_v<T, std::int64_t>) {
        if (x != std::floor(x) || x > 9.0e15)
          throw refused(where + ": '" + k + "' is " + o[k].dump() + ", not a whole number");
        v = static_cast<std::int64_t>(x);
      } else {
        v = x;
      }
    }
  });
  if (!o.contains("exclude_from_weight_decay") || !o["exclude_from_weight_decay"].is_array())
    throw refused(where + " has no 'exclude_from_weight_decay' list");
  for (const auto& n : o["exclude_from_weight_decay"]) {
    if (!n.is_string())
      throw refused(where + "'s exclude_from_weight_decay holds " +
                    n.dump(-1, ' ', true).substr(0, 64) + ", not a name");
    c.exclude_from_weight_decay.push_back(n.get<std::string>());
  }
  for (const auto& f : o["config"]) {
    if (!f.is_array() || f.size() != 2 || !f[0].is_string())
      throw refused(where + "'s config holds " + f.dump(-1, ' ', true).substr(0, 64) +
                    ", not a [name, value] pair");
    const std::string name = f[0].get<std::string>();
    if (c.find(name) != nullptr) throw refused(where + "'s config gives '" + name + "' twice");
    if (f[1].is_boolean()) {
      c.values.emplace_back(name, optimizers::value(f[1].get<bool>()));
    } else if (f[1].is_number() && std::isfinite(f[1].get<double>())) {
      c.values.emplace_back(name, optimizers::value(f[1].get<double>()));
    } else {
      throw refused(where + "'s '" + name + "' is " + f[1].dump(-1, ' ', true).substr(0, 64) +
                    ", not a finite number or true or false");
    }
  }
  c.schedule = detail::decode_schedule(o, where);
  return c;
}

// ---- on a ps ---------------------------------------------------------------------------------

// One shard a `create` describes.
struct shard_spec {
  std::string path;
  std::vector<std::size_t> shape;
  std::size_t values = 0;
};

// `create`: a = the generation; a JSON frame {"optimizer": {...}, "shards": [{"path", "shape"},
// ...]}, then each shard's values, every one finite.
struct create_request {
  std::uint64_t generation = 0;
  optimizers::config optimizer;
  std::vector<shard_spec> shards;
};
inline create_request decode_create(const message& m) {
  if (m.frames.empty()) throw refused("create: no description");
  const auto j = detail::json_of(m.frames[0]);
  if (!j || !j->is_object() || !j->contains("optimizer") || !j->contains("shards") ||
      !(*j)["shards"].is_array())
    throw refused(
        "create: the description is not {\"optimizer\": {...}, \"shards\": [{\"path\", "
        "\"shape\"}, ...]}");
  create_request r;
  r.generation = m.h.a;
  r.optimizer = decode_optimizer((*j)["optimizer"]);
  const auto& shards = (*j)["shards"];
  if (m.frames.size() != shards.size() + 1)
    throw refused("create: " + std::to_string(shards.size()) + " shards described, " +
                  std::to_string(m.frames.size() - 1) + " sent");
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = shards[i];
    const std::string where = "create: shard " + std::to_string(i);
    if (!s.is_object() || !s.contains("path") || !s["path"].is_string() ||
        s["path"].get<std::string>().empty())
      throw refused(where + " has no 'path'");
    shard_spec spec;
    spec.path = s["path"].get<std::string>();
    for (const shard_spec& other : r.shards)
      if (other.path == spec.path)
        throw refused(where + ": '" + spec.path + "' is described twice");
    if (!s.contains("shape") || !s["shape"].is_array())
      throw refused(where + " ('" + spec.path + "') has no 'shape'");
    for (const auto& e : s["shape"]) {
      if (!e.is_number_unsigned())
        throw refused(where + " ('" + spec.path + "'): the shape holds " + e.dump() +
                      ", not a size");
      spec.shape.push_back(e.get<std::size_t>());
    }
    const auto n = detail::values_of_shape(spec.shape);
    if (!n || *n == 0)
      throw refused(where + " ('" + spec.path + "'): the shape " + shape_text(spec.shape) +
                    " holds no values, or more than a frame can");
    spec.values = *n;
    const frame_floats values(m.frames[i + 1]);
    if (!values.whole() || values.size() != spec.values)
      throw refused("create: shard '" + spec.path + "' has " + std::to_string(spec.values) +
                    " values, " + std::to_string(m.frames[i + 1].size()) + " bytes sent");
    if (const auto bad = first_non_finite(values))
      throw refused("create: shard '" + spec.path + "' holds " + *bad);
    r.shards.push_back(std::move(spec));
  }
  return r;
}

// `push`: a = the batch's global index, b = the generation and c = the version the worker
// pulled, d = the worker's index + 1 (0: not said); a gradient frame per shard the ps holds.
struct push_request {
  std::uint64_t batch = 0, generation = 0, version = 0;
  std::optional<std::uint64_t> worker;
  // "batch 12 from worker 1", as messages name a push.
  [[nodiscard]] std::string name() const {
    return "batch " + std::to_string(batch) +
           (worker ? " from worker " + std::to_string(*worker)
                   : std::string(" from a task that did not say which"));
  }
};
// The push's counts and sizes checked against the shards' (`paths` and `sizes`, the ps's order).
inline push_request decode_push(const message& m, std::span<const std::string> paths,
                                std::span<const std::size_t> sizes) {
  push_request r{m.h.a, m.h.b, m.h.c, std::nullopt};
  if (m.h.d > 0) r.worker = m.h.d - 1;
  if (m.frames.size() != sizes.size())
    throw refused("push of " + r.name() + ": " + std::to_string(m.frames.size()) +
                  " gradients for " + std::to_string(sizes.size()) + " shards");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const frame_floats g(m.frames[i]);
    if (!g.whole() || g.size() != sizes[i])
      throw refused("push of " + r.name() + ": the gradient of " + paths[i] + " has " +
                    std::to_string(m.frames[i].size()) + " bytes, the shard " +
                    std::to_string(sizes[i]) + " values");
  }
  return r;
}
// Why the push's gradients cannot be applied (a value not finite), or nullopt. Checked after
// the generation: a push from variables created before is refused as such, whatever it holds.
inline std::optional<std::string> non_finite_gradient(const message& m, const push_request& r,
                                                      std::span<const std::string> paths) {
  for (std::size_t i = 0; i < paths.size(); ++i)
    if (const auto bad = first_non_finite(frame_floats(m.frames[i])))
      return "push of " + r.name() + ": the gradient of " + paths[i] + " holds " + *bad +
             "; refused, as it would make the variables NaN (the worker's batch gives a "
             "non-finite gradient)";
  return std::nullopt;
}

// `restore`: a = the optimizer's iterations; a JSON frame {"learning_rate"}, then each shard's
// values and each optimizer slot's (`slot_sizes`, in the optimizer's order), every one finite.
struct restore_request {
  std::int64_t iterations = 0;
  double learning_rate = 0;
};
inline restore_request decode_restore(const message& m, std::span<const std::string> paths,
                                      std::span<const std::size_t> sizes,
                                      std::span<const std::size_t> slot_sizes) {
  if (m.frames.size() != 1 + sizes.size() + slot_sizes.size())
    throw refused("restore: " + std::to_string(m.frames.size()) + " frames for " +
                  std::to_string(sizes.size()) + " shards and " +
                  std::to_string(slot_sizes.size()) + " optimizer slots");
  const auto j = detail::json_of(m.frames[0]);
  if (!j || !j->is_object()) throw refused("restore: the description is not a JSON object");
  restore_request r;
  r.learning_rate =
      detail::number_field(*j, "learning_rate", 0, std::numeric_limits<double>::max(), "restore");
  if (m.h.a > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw refused("restore: " + std::to_string(m.h.a) + " iterations");
  r.iterations = static_cast<std::int64_t>(m.h.a);
  for (std::size_t i = 0; i < sizes.size() + slot_sizes.size(); ++i) {
    const bool slot = i >= sizes.size();
    const std::size_t want = slot ? slot_sizes[i - sizes.size()] : sizes[i];
    const std::string what =
        slot ? "optimizer slot " + std::to_string(i - sizes.size()) : "shard '" + paths[i] + "'";
    const frame_floats values(m.frames[1 + i]);
    if (!values.whole() || values.size() != want)
      throw refused("restore: " + what + " has " + std::to_string(want) + " values, " +
                    std::to_string(m.frames[1 + i].size()) + " bytes sent");
    if (const auto bad = first_non_finite(values))
      throw refused("restore: " + what + " holds " + *bad);
  }
  return r;
}

// ---- on a worker and on the chief ------------------------------------------------------------

// A reply's frames checked as the values of the shards `sizes` (from frame `first` on): the
// count and each size. `who` names the ps ("ps 1 at host:port").
inline void check_shard_frames(const message& r, std::size_t first,
                               std::span<const std::size_t> sizes, const std::string& who,
                               const char* what) {
  if (r.frames.size() < first || r.frames.size() - first != sizes.size())
    throw refused(
        who + " sent " + std::to_string(r.frames.size() - std::min(first, r.frames.size())) + " " +
        what + " frames, not the " + std::to_string(sizes.size()) + " of the shards placed there");
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const frame_floats f(r.frames[first + k]);
    if (!f.whole() || f.size() != sizes[k])
      throw refused(who + " sent " + std::to_string(r.frames[first + k].size()) + " bytes for " +
                    what + " " + std::to_string(k) + ", whose shard has " +
                    std::to_string(sizes[k]) + " values");
  }
}

// A pull's reply from ps `p` put together into the variables `w` (each at its full size),
// after every frame is checked against the placement: a frame never writes past its shard.
inline void assemble_pull(const message& r, const placement& pl, int p,
                          std::vector<std::span<float>> w, const std::string& who) {
  const auto mine = pl.shards_of(p);
  std::vector<std::size_t> sizes;
  for (const std::size_t i : mine) sizes.push_back(pl.shards[i].values);
  check_shard_frames(r, 0, sizes, who, "shard");
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const shard_placement& s = pl.shards[mine[k]];
    frame_floats(r.frames[k]).copy_to(shard_of(w[s.variable], s));
  }
}

// A state reply's head: a = the optimizer's iterations, a JSON frame {"learning_rate"}.
struct state_head {
  std::int64_t iterations = 0;
  double learning_rate = 0;
};
// A state reply from ps `p` (its shards' values, then `k` slots per shard) checked, its slots put
// into `slots` (k per variable, each at the variable's full size).
inline state_head assemble_state(const message& r, const placement& pl, int p, std::size_t k,
                                 std::vector<std::span<float>> slots, const std::string& who) {
  const auto mine = pl.shards_of(p);
  std::vector<std::size_t> sizes;
  for (const std::size_t i : mine) sizes.push_back(pl.shards[i].values);
  for (const std::size_t i : mine)
    for (std::size_t j = 0; j < k; ++j) sizes.push_back(pl.shards[i].values);
  if (r.frames.empty()) throw refused(who + " sent a state without its description");
  check_shard_frames(r, 1, sizes, who, "state");
  const auto j = detail::json_of(r.frames[0]);
  if (!j || !j->is_object()) throw refused(who + " sent a state whose description is not JSON");
  state_head h;
  h.learning_rate = detail::number_field(*j, "learning_rate", 0, std::numeric_limits<double>::max(),
                                         who + "'s state");
  if (r.h.a > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw refused(who + " sent a state of " + std::to_string(r.h.a) + " iterations");
  h.iterations = static_cast<std::int64_t>(r.h.a);
  for (std::size_t q = 0; q < mine.size(); ++q) {
    const shard_placement& s = pl.shards[mine[q]];
    for (std::size_t jj = 0; jj < k; ++jj)
      frame_floats(r.frames[1 + mine.size() + q * k + jj])
          .copy_to(shard_of(slots[s.variable * k + jj], s));
  }
  return h;
}

// The model's variables as a worker describes them when it joins ({"variables": [{"path",
// "shape"}, ...]}), so that the chief refuses a worker built with another model.
inline std::string describe_variables(const std::vector<std::string>& names,
                                      const std::vector<std::vector<std::size_t>>& shapes) {
  nlohmann::json v = nlohmann::json::array();
  for (std::size_t i = 0; i < names.size(); ++i)
    v.push_back({{"path", names[i]}, {"shape", shapes[i]}});
  return nlohmann::json{{"variables", v}}.dump();
}
// Why a worker's description differs from the chief's model (`names`, `shapes`), or nullopt.
inline std::optional<std::string> model_difference(
    const zmq::message_t& frame, const std::vector<std::string>& names,
    const std::vector<std::vector<std::size_t>>& shapes) {
  const auto j = detail::json_of(frame);
  if (!j || !j->is_object() || !j->contains("variables") || !(*j)["variables"].is_array())
    return "it did not describe its model's variables";
  const auto& v = (*j)["variables"];
  for (std::size_t i = 0; i < v.size() || i < names.size(); ++i) {
    if (i >= v.size())
      return "its model has " + std::to_string(v.size()) + " trainable variables, the chief's " +
             std::to_string(names.size()) + " (the chief's '" + names[i] + "' is missing)";
    if (i >= names.size())
      return "its model has " + std::to_string(v.size()) + " trainable variables, the chief's " +
             std::to_string(names.size());
    const auto& e = v[i];
    if (!e.is_object() || !e.contains("path") || !e["path"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array())
      return "its description of variable " + std::to_string(i) + " is not {\"path\", \"shape\"}";
    std::vector<std::size_t> shape;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned())
        return "variable " + std::to_string(i) + "'s shape holds " + d.dump();
      shape.push_back(d.get<std::size_t>());
    }
    const std::string path = e["path"].get<std::string>();
    if (path != names[i] || shape != shapes[i])
      return "its variable " + std::to_string(i) + " is '" + path + "' of shape " +
             shape_text(shape) + ", the chief's '" + names[i] + "' of shape " +
             shape_text(shapes[i]);
  }
  return std::nullopt;
}

// A `done` message's frame: the result (a loss, NaN when the batch's was not finite) and the
// staleness, as two doubles; nullopt when the frame is not that.
struct done_values {
  double result = 0;
  std::uint64_t staleness = 0;
};
inline std::optional<done_values> decode_done(const message& m) {
  double values[2] = {0, 0};
  if (m.frames.empty() || m.frames[0].size() != sizeof values) return std::nullopt;
  std::memcpy(values, m.frames[0].data(), sizeof values);
  if (!(values[1] >= 0 && values[1] < 1e18)) return std::nullopt;
  return done_values{values[0], static_cast<std::uint64_t>(values[1])};
}

}  // namespace tessel::ps
