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
#include "messages.hpp"
#include "security.hpp"
#include "server_core.hpp"
#include "transport.hpp"

namespace tessel::ps {

// How the chief's connections name themselves to a ps task (ZeroMQ's routing id).
inline const std::string chief_routing_id = "chief";

struct server_options {
  // A ps whose chief has been silent this long (after its first message) ends: the job is over.
  std::chrono::milliseconds orphan_timeout{30000};
  // Printed lines start with this (tests set it apart from other output).
  bool verbose = true;
  // The cluster's keys, or none (an open port).
  transport_security security = {};
};

// The shards a ps task holds and the model's compiled optimizer applied to them, on the host
// backend (basic_parameter_server's `Shards`). Every request reaches it checked.
class optimizer_shards {
 public:
  using B = backend::host;

  // The store is built apart and then takes the old one's place, so that nothing is half made.
  void create(const create_request& r, const message& m) {
    variable_store<B> store;
    std::vector<variable<B>*> vars;
    auto opt = make_optimizer(r.optimizer);
    std::vector<optimizer<B>::element_ranges> decay;
    for (std::size_t i = 0; i < r.shards.size(); ++i) {
      variable<B>& v = add_variable(store, r.shards[i].path, r.shards[i].shape, "zeros", 0);
      frame_floats(m.frames[i + 1]).copy_to(host_values(v.value.local(), v.value.size()));
      vars.push_back(&v);
      // Weight decay by the variable's name, not the shard's ("dense/kernel/shard_0").
      decay.emplace_back();
      if (opt->decays(variable_path(r.shards[i].path))) decay.back().emplace_back(0, v.size());
    }
    opt->set_decay_ranges(std::move(decay));
    store_ = std::move(store);  // a deque: the variables stay where vars points
    vars_ = std::move(vars);
    opt_ = std::move(opt);
  }
  [[nodiscard]] std::size_t count() const noexcept { return vars_.size(); }
  [[nodiscard]] std::size_t size(std::size_t i) const { return vars_[i]->size(); }
  [[nodiscard]] const std::string& path(std::size_t i) const { return vars_[i]->path; }
  [[nodiscard]] std::vector<float> values(std::size_t i) const { return vars_[i]->numpy(); }
  // One update from the push's gradient frames, copied into the gradient buffers.
  void apply(const message& m) {
    for (std::size_t i = 0; i < vars_.size(); ++i)
      frame_floats(m.frames[i]).copy_to(host_values(vars_[i]->gradient, vars_[i]->size()));
    opt_->apply(vars_);
  }
  [[nodiscard]] std::vector<std::size_t> slot_sizes() {
    std::vector<std::size_t> out;
    const state_list<B> s = built_state();
    for (std::size_t i = opt_->counters(); i < s.size() - opt_->scalars(); ++i)
      out.push_back(s[i].tensor().size());
    return out;
  }
  [[nodiscard]] std::int64_t iterations() { return built_state()[0].integer(); }
  // (The learning rate of the next step: the schedule's, when the optimizer has one.)
  [[nodiscard]] double learning_rate() { return opt_->learning_rate(); }
  [[nodiscard]] std::vector<float> slot(std::size_t j) {
    return built_state()[opt_->counters() + j].numpy();
  }
  void restore(const restore_request& r, const message& m) {
    state_list<B> s = built_state();
    for (std::size_t i = 0; i < vars_.size(); ++i)
      frame_floats(m.frames[1 + i]).copy_to(host_values(vars_[i]->value.local(), vars_[i]->size()));
    s[0].value = r.iterations;
    const std::size_t c = opt_->counters();
    if (c == 2) s[1].value = r.learning_rate;
    for (std::size_t i = c; i < s.size() - opt_->scalars(); ++i)
      frame_floats(m.frames[vars_.size() + 1 + i - c])
          .copy_to(host_values(s[i].tensor().local(), s[i].tensor().size()));
    opt_->set_state(s, "restore");
  }

 private:
  // The optimizer the chief compiled, by its class (the library's, or one registered in this
  // program): an unknown class or a value out of range refused, naming it.
  // The workers clip by norms (clipnorm, global_clipnorm) before they push, over whole
  // variables: a ps holds shards of some, so its own optimizer does not clip by norm again.
  static std::unique_ptr<optimizer<B>> make_optimizer(const optimizers::config& c) {
    try {
      optimizers::config mine = c;
      if (mine.clips_norms())
        optimizers::make_optimizer<B>(c, "create");  // checked as the chief gave it
      mine.clipnorm = mine.global_clipnorm = 0.0;
      auto opt = std::make_unique<optimizer<B>>(optimizers::make_optimizer<B>(mine, "create"));
      opt->exclude_from_weight_decay(c.exclude_from_weight_decay);
      return opt;
    } catch (const refused&) {
      throw;
    } catch (const value_error& e) {
      throw refused(e.what());
    }
  }
  // A shard's variable: its path without the "/shard_<k>" the partitioner adds.
  static std::string variable_path(const std::string& shard) {
    const auto slash = shard.rfind('/');
    return slash != std::string::npos && shard.compare(slash + 1, 6, "shard_") == 0
               ? shard.substr(0, slash)
               : shard;
  }
  static std::span<float> host_values(const B::matrix& m, std::size_t n) { return {m.data(), n}; }
  // The optimizer's state, its slots made first (Keras's build) where no update has made them.
  state_list<B> built_state() {
    opt_->build(vars_);
    return opt_->state();
  }
  variable_store<B> store_;
  std::vector<variable<B>*> vars_;
  std::unique_ptr<optimizer<B>> opt_;
};

// What a ps task holds and does.
using parameter_server = basic_parameter_server<optimizer_shards>;

// Runs ps task `c.task_index` until the chief says shutdown (0), or the chief has sent nothing
// for orphan_timeout after its first message (1, with a line saying so). The chief sends a
// heartbeat every second; the workers' messages do not count.
inline int serve_ps(const cluster_spec& c, const server_options& o = {}) {
  zmq::context_t ctx(1);
  const auto zap = o.security.handler(ctx);  // before the socket binds, destroyed after it
  zmq::socket_t socket(ctx, zmq::socket_type::router);
  quiet(socket);
  o.security.serve(socket);
  // A chief started again takes over the routing id of the one that died.
  socket.set(zmq::sockopt::router_handover, 1);
  listen(socket, cluster_spec::task_name(c.task_type, static_cast<std::size_t>(c.task_index)),
         c.address());
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
    } catch (const std::exception& e) {  // not a refusal: out of memory, say
      r = failure(*m, e.what());
    }
    send(socket, r, &identity);
  }
  if (o.verbose)
    std::printf("ps %d: shut down after %llu updates (%llu repeated batches refused)\n",
                c.task_index, static_cast<unsigned long long>(server.applied()),
                static_cast<unsigned long long>(server.refused_repeats()));
  return 0;
}

}  // namespace tessel::ps
