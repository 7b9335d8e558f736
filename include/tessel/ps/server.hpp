#pragma once
// A parameter server (a `ps` task): holds its shards of the variables and applies the optimizer
// to them as each gradient arrives, without waiting for the other workers (asynchronous
// training). Each push names the batch it was computed on; a batch's gradient is applied once
// (a second push for the same batch, from a worker that took over a lost worker's batch after
// that one had already pushed here, is refused), so every shard learns from every batch exactly
// once.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "../backend/host.hpp"
#include "../layers/layer.hpp"
#include "../optimizers.hpp"
#include "cluster.hpp"
#include "compilation.hpp"
#include "transport.hpp"

namespace tessel::ps {

// The optimizer's name and hyperparameters, to send to the ps tasks and back.
TESSEL_PS_INLINE nlohmann::json to_json(const optimizer_spec& spec);
TESSEL_PS_INLINE optimizer_spec optimizer_from_json(const nlohmann::json& j);

// How the chief's connections name themselves to a ps task (ZeroMQ's routing id).
inline const std::string chief_routing_id = "chief";

struct server_options {
  // A ps whose chief has been silent this long (after its first message) ends: the job is over.
  std::chrono::milliseconds orphan_timeout{30000};
  // Printed lines start with this (tests set it apart from other output).
  bool verbose = true;
};

// What a ps task holds and does.
class parameter_server {
 public:
  using B = backend::host;

  // Handles one request and returns its reply; `stop` becomes true on shutdown.
  message handle(message& m, bool& stop) {
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
        return failure(m, "a ps task does not handle this request");
    }
  }
  [[nodiscard]] std::uint64_t applied() const noexcept { return applied_; }
  [[nodiscard]] std::uint64_t refused() const noexcept { return refused_; }

 private:
  // A JSON frame {"optimizer": {...}, "shards": [{"path", "shape"}, ...]}, then each shard's
  // values.
  message create(message& m) {
    if (m.frames.empty()) return failure(m, "create without a description");
    const auto j = nlohmann::json::parse(text_of(m.frames[0]), nullptr, false);
    if (j.is_discarded() || !j.contains("shards") || !j.contains("optimizer"))
      return failure(m, "create: the description is not valid");
    const auto& shards = j["shards"];
    if (m.frames.size() != shards.size() + 1)
      return failure(m, "create: " + std::to_string(shards.size()) + " shards described, " +
                            std::to_string(m.frames.size() - 1) + " sent");
    store_.clear();
    vars_.clear();
    applied_batches_.clear();
    opt_ = std::make_unique<optimizer<B>>(optimizer_from_json(j["optimizer"]));
    for (std::size_t i = 0; i < shards.size(); ++i) {
      variable<B>& v =
          add_variable(store_, shards[i].at("path").get<std::string>(),
                       shards[i].at("shape").get<std::vector<std::size_t>>(), "zeros", 0);
      const auto values = floats_of(m.frames[i + 1]);
      if (values.size() != v.size())
        return failure(m, "create: shard " + v.path + " has " + std::to_string(v.size()) +
                              " values, " + std::to_string(values.size()) + " sent");
      v.assign(values);
      vars_.push_back(&v);
    }
    version_ = 0;
    generation_ = m.h.a;
    return reply_to(m, kind::create);
  }
  // Every shard's values; a = the version (updates applied so far), b = the generation (how
  // many times the chief has created the variables).
  message pull(const message& m) {
    if (!opt_) return reply_to(m, kind::empty);
    message r = reply_to(m, kind::pull);
    r.h.a = version_;
    r.h.b = generation_;
    for (const variable<B>* v : vars_)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(v->numpy())));
    return r;
  }
  // A gradient per shard, read in place from the message; a = the batch's global index, b = the
  // generation and c = the version the worker pulled. Reply: a = staleness (updates applied
  // since that pull), b = 1 when applied, 0 when the batch had been applied already, 2 when it
  // was computed from variables the chief has since created again (a push sent before this ps
  // was restored from a backup, delivered after): neither is applied.
  message push(const message& m) {
    if (!opt_) return reply_to(m, kind::empty);
    if (m.frames.size() != vars_.size())
      return failure(m, "push: " + std::to_string(m.frames.size()) + " gradients for " +
                            std::to_string(vars_.size()) + " shards");
    message r = reply_to(m, kind::push);
    if (m.h.b != generation_) {
      r.h.b = 2;
      return r;
    }
    r.h.a = version_ >= m.h.c ? version_ - m.h.c : 0;
    if (!applied_batches_.insert(m.h.a).second) {
      ++refused_;
      return r;
    }
    for (std::size_t i = 0; i < vars_.size(); ++i) {
      const auto g = floats_of(m.frames[i]);
      if (g.size() != vars_[i]->size())
        return failure(m, "push: the gradient of " + vars_[i]->path + " has " +
                              std::to_string(g.size()) + " values, the shard " +
                              std::to_string(vars_[i]->size()));
      B::upload(g, vars_[i]->gradient);
    }
    opt_->apply(vars_);
    ++version_;
    ++applied_;
    r.h.b = 1;
    return r;
  }

  // The shards' values, then each shard's optimizer slots (slots_per_variable each, in the
  // optimizer's order); a = the optimizer's iterations, JSON frame first with its learning rate.
  message state(const message& m) {
    if (!opt_) return reply_to(m, kind::empty);
    opt_->build(vars_);
    const state_list<B> s = opt_->state();
    message r = reply_to(m, kind::state);
    r.h.a = static_cast<std::uint64_t>(s[0].integer());
    r.frames.push_back(frame_of(nlohmann::json{{"learning_rate", s[1].real()}}.dump()));
    for (const variable<B>* v : vars_)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(v->numpy())));
    for (std::size_t i = 2; i < s.size(); ++i)
      r.frames.push_back(frame_of(std::make_shared<const std::vector<float>>(s[i].numpy())));
    return r;
  }
  // state's reply given back (after create): the values, the slots, the iterations.
  message restore(const message& m) {
    if (!opt_) return reply_to(m, kind::empty);
    opt_->build(vars_);
    state_list<B> s = opt_->state();
    if (m.frames.size() != 1 + vars_.size() + (s.size() - 2))
      return failure(m, "restore: " + std::to_string(m.frames.size()) + " frames for " +
                            std::to_string(vars_.size()) + " shards and " +
                            std::to_string(s.size() - 2) + " optimizer slots");
    const auto j = nlohmann::json::parse(text_of(m.frames[0]), nullptr, false);
    if (j.is_discarded() || !j.contains("learning_rate"))
      return failure(m, "restore: the description is not valid");
    for (std::size_t i = 0; i < vars_.size(); ++i) vars_[i]->assign(floats_of(m.frames[1 + i]));
    s[0].value = static_cast<std::int64_t>(m.h.a);
    s[1].value = j["learning_rate"].get<double>();
    for (std::size_t i = 2; i < s.size(); ++i) {
      const auto values = floats_of(m.frames[vars_.size() + i - 1]);
      if (values.size() != s[i].tensor().size())
        return failure(m, "restore: slot " + s[i].path + " has " +
                              std::to_string(s[i].tensor().size()) + " values, " +
                              std::to_string(values.size()) + " sent");
      B::upload(values, s[i].tensor().local());
    }
    opt_->set_state(s, "restore");
    applied_batches_.clear();
    return reply_to(m, kind::restore);
  }

  variable_store<B> store_;
  std::vector<variable<B>*> vars_;
  std::unique_ptr<optimizer<B>> opt_;
  std::unordered_set<std::uint64_t> applied_batches_;
  std::uint64_t version_ = 0, generation_ = 0, applied_ = 0, refused_ = 0;
};

// Runs ps task `c.task_index` until the chief says shutdown (0), or the chief has sent nothing
// for orphan_timeout after its first message (1, with a line saying so). The chief sends a
// heartbeat every second; the workers' messages do not count.
inline int serve_ps(const cluster_spec& c, const server_options& o = {}) {
  zmq::context_t ctx(1);
  zmq::socket_t socket(ctx, zmq::socket_type::router);
  quiet(socket);
  // A chief started again takes over the routing id of the one that died.
  socket.set(zmq::sockopt::router_handover, 1);
  socket.bind(bind_endpoint(c.address()));
  parameter_server server;
  bool stop = false;
  auto last = std::chrono::steady_clock::now();
  bool contacted = false;
  while (!stop) {
    zmq::message_t identity;
    std::optional<message> m = receive(socket, std::chrono::milliseconds(200), &identity);
    if (contacted && std::chrono::steady_clock::now() - last > o.orphan_timeout) {
      std::fprintf(stderr,
                   "ps %d: the chief has sent nothing for %lld s; the job is over, ending\n",
                   c.task_index, static_cast<long long>(o.orphan_timeout.count() / 1000));
      return 1;
    }
    if (!m) continue;
    if (identity.to_string_view() == chief_routing_id) {
      contacted = true;
      last = std::chrono::steady_clock::now();
    }
    message r;
    try {
      r = server.handle(*m, stop);
    } catch (const std::exception& e) {
      r = failure(*m, e.what());
    }
    send(socket, r, &identity);
  }
  if (o.verbose)
    std::printf("ps %d: shut down after %llu updates (%llu repeated batches refused)\n",
                c.task_index, static_cast<unsigned long long>(server.applied()),
                static_cast<unsigned long long>(server.refused()));
  return 0;
}

#if TESSEL_PS_DEFINITIONS
TESSEL_PS_INLINE nlohmann::json to_json(const optimizer_spec& spec) {
  return std::visit(
      [](const auto& o) -> nlohmann::json {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, optimizers::sgd>)
          return {{"name", "sgd"},
                  {"learning_rate", o.learning_rate},
                  {"momentum", o.momentum},
                  {"nesterov", o.nesterov}};
        else if constexpr (std::is_same_v<T, optimizers::adam>)
          return {{"name", "adam"},
                  {"learning_rate", o.learning_rate},
                  {"beta_1", o.beta_1},
                  {"beta_2", o.beta_2},
                  {"epsilon", o.epsilon}};
        else
          return {{"name", "rmsprop"},    {"learning_rate", o.learning_rate},
                  {"rho", o.rho},         {"momentum", o.momentum},
                  {"epsilon", o.epsilon}, {"centered", o.centered}};
      },
      spec.value());
}
TESSEL_PS_INLINE optimizer_spec optimizer_from_json(const nlohmann::json& j) {
  const std::string name = j.at("name");
  if (name == "sgd")
    return optimizers::sgd{j.at("learning_rate"), j.at("momentum"), j.at("nesterov")};
  if (name == "adam")
    return optimizers::adam{j.at("learning_rate"), j.at("beta_1"), j.at("beta_2"), j.at("epsilon")};
  return optimizers::rmsprop{j.at("learning_rate"), j.at("rho"), j.at("momentum"), j.at("epsilon"),
                             j.at("centered")};
}

#endif

}  // namespace tessel::ps
