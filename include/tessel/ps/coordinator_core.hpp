#pragma once
// The model-independent part of ParameterServerStrategy's ClusterCoordinator (coordinator.hpp):
// the chief's scheduling of batches, its watch over the workers and the ps tasks, the variables'
// shards moved to and from the ps tasks, a worker's loop, the backups' position files and fit's
// loop. Compiled once in the tessel::ps library (ps/compilation.hpp); cluster_coordinator adds
// what depends on the model and the dataset.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../data/array.hpp"
#include "../saving/file_checksum.hpp"
#include "../trainer/callbacks.hpp"
#include "../trainer/logs.hpp"
#include "../trainer/progbar.hpp"
#include "backup_position.hpp"
#include "cluster.hpp"
#include "compilation.hpp"
#include "messages.hpp"
#include "partitioner.hpp"
#include "security.hpp"
#include "server.hpp"
#include "transport.hpp"

namespace tessel::ps {

struct strategy_options {
  ps::variable_partitioner variable_partitioner{};
  // How long a task waits for another to answer its first hello (they start in any order).
  std::chrono::milliseconds connect_timeout{30000};
  // A worker silent this long (no heartbeat) is lost: its batch goes to another worker.
  std::chrono::milliseconds worker_timeout{3000};
  // A ps silent this long ends the job (its variables are gone; restart from a checkpoint).
  std::chrono::milliseconds ps_timeout{10000};
  // A worker or ps task whose chief has been silent this long ends.
  std::chrono::milliseconds chief_timeout{30000};
  // The cluster's CURVE keys (security.hpp); unset: the task's environment gives them
  // (TESSEL_PS_KEYS_FILE or TESSEL_PS_KEYS), or none (an open cluster).
  std::optional<cluster_keys> keys = std::nullopt;
};

// tf.distribute.experimental.ParameterServerStrategy(cluster_resolver, variable_partitioner).
class parameter_server_strategy {
 public:
  explicit parameter_server_strategy(strategy_options o = {})
      : parameter_server_strategy(cluster_from_environment(), std::move(o)) {}
  parameter_server_strategy(cluster_spec c, strategy_options o)
      : cluster_(std::move(c)),
        options_(std::move(o)),
        security_{options_.keys ? options_.keys : cluster_keys_from_environment()} {}

  [[nodiscard]] const cluster_spec& cluster() const noexcept { return cluster_; }
  [[nodiscard]] const strategy_options& options() const noexcept { return options_; }
  // How this task's sockets are secured: with the cluster's keys, or open.
  [[nodiscard]] const transport_security& security() const noexcept { return security_; }
  [[nodiscard]] role task_type() const noexcept { return cluster_.task_type; }
  [[nodiscard]] int task_index() const noexcept { return cluster_.task_index; }
  [[nodiscard]] bool is_chief() const noexcept { return cluster_.task_type == role::chief; }
  // TF's num_replicas_in_sync is 1 for this strategy: each worker trains alone.
  [[nodiscard]] int num_replicas_in_sync() const noexcept { return 1; }
  [[nodiscard]] int num_workers() const noexcept { return cluster_.num_workers(); }
  [[nodiscard]] int num_ps() const noexcept { return cluster_.num_ps(); }

 private:
  cluster_spec cluster_;
  strategy_options options_;
  transport_security security_;
};

// ClusterCoordinator.schedule's result: fetch() waits for the step and gives its loss.
class remote_value {
 public:
  struct state {
    std::optional<double> loss;
    std::uint64_t staleness = 0;
  };
  remote_value() = default;
  explicit remote_value(std::shared_ptr<state> s, std::function<void()> wait)
      : state_(std::move(s)), wait_(std::move(wait)) {}
  // The step's loss, once it has run (waits for it, as TF's fetch()).
  double fetch() const {
    while (!state_->loss) wait_();
    return *state_->loss;
  }
  [[nodiscard]] bool ready() const { return state_->loss.has_value(); }
  // Updates the pushed gradient's shards had missed (the most over the ps tasks).
  [[nodiscard]] std::uint64_t staleness() const {
    fetch();
    return state_->staleness;
  }

 private:
  std::shared_ptr<state> state_;
  std::function<void()> wait_;
};

// Called on a worker around each training step with the batch's global index (as Keras's
// on_train_batch_begin and on_train_batch_end): for logging, or to inject faults in tests.
struct worker_callbacks {
  std::function<void(std::uint64_t)> on_train_batch_begin, on_train_batch_end;
};

// What the chief counts of a run: each scheduled batch's index once it has trained, and the
// failures it handled.
struct coordinator_stats {
  std::vector<std::uint64_t> trained;  // the global indices of the batches trained, in order
  std::size_t workers_lost = 0, workers_rejoined = 0, batches_reassigned = 0;
  std::size_t workers_refused = 0;  // joins refused (another model, dataset or TF_CONFIG)
  std::size_t ps_restarts = 0;  // ps tasks lost and given the last backup's state
  std::vector<std::uint64_t> ps_applied, ps_refused;  // per ps: updates applied, repeats refused
};

// What a pull saw of one ps: its version (updates applied) and generation (variables created).
struct pulled {
  std::uint64_t version = 0, generation = 0;
};

// What the chief's fit loop asks of the model's side (cluster_coordinator).
struct fit_hooks {
  std::size_t epochs = 1, steps = 0;
  int verbose = 1;
  std::optional<std::filesystem::path> backup_dir;
  // The val_ logs of an evaluation on the chief (empty: none).
  std::function<logs()> validate;
  // Writes the variables and the optimizer's state, gathered from the ps tasks, to the backup;
  // gives the ps tasks a backup's state (its position already checked).
  std::function<void(const std::filesystem::path&)> save_state;
  std::function<void(const std::filesystem::path&)> restore_state;
  std::function<void(std::size_t, const logs&)> on_epoch_end;
};

// The variables and the optimizer's state at full size: what a backup holds.
struct full_state {
  std::vector<array<float>> weights;
  std::vector<std::vector<float>> slots;  // each variable's slots in turn (Keras's order)
  std::int64_t iterations = 0;
  double learning_rate = 0;
};

class coordinator_core {
 public:
  // The coordinator of a model whose trainable variables have these paths and shapes.
  TESSEL_PS_INLINE coordinator_core(parameter_server_strategy& s, std::vector<std::string> names,
                                    std::vector<std::vector<std::size_t>> shapes);
  coordinator_core(const coordinator_core&) = delete;
  coordinator_core& operator=(const coordinator_core&) = delete;
  TESSEL_PS_INLINE ~coordinator_core();

  // The placement of the variables' shards on the ps tasks and the bytes each holds.
  [[nodiscard]] std::string explain() const { return placement_.explain(); }
  [[nodiscard]] const placement& variable_placement() const noexcept { return placement_; }

  static constexpr std::size_t train_step = 0;
  // coordinator.schedule(fn): function `fn` (train_step unless given) on the next batch, run on
  // some free worker; returns at once.
  TESSEL_PS_INLINE remote_value schedule(std::size_t fn = train_step);
  // coordinator.join(): waits until every scheduled step has run.
  TESSEL_PS_INLINE void join();
  // coordinator.done(): whether every scheduled step has run.
  TESSEL_PS_INLINE bool done();

  // Ends the job: the workers and the ps tasks are told to stop.
  TESSEL_PS_INLINE void shutdown();
  // What the chief counted, with each ps's counts (asked now).
  TESSEL_PS_INLINE const coordinator_stats& stats();

  // Set on every process before serve(); only the workers call them.
  void set_worker_callbacks(worker_callbacks c) { callbacks_ = std::move(c); }

  // ---- for a worker's functions (worker_context) ------------------------------------------
  // Every shard from every ps, put together into the variables (get_weights' order); the ps
  // tasks' versions and generations in `versions`. A ps that does not answer is ps_lost.
  TESSEL_PS_INLINE std::vector<array<float>> pull(std::vector<std::unique_ptr<connection>>& ps,
                                                  std::vector<pulled>* versions = nullptr);
  // Each shard of `gradients` to its ps, tagged with batch g and the versions pulled; returns the
  // most staleness over the ps tasks.
  TESSEL_PS_INLINE std::uint64_t push(std::vector<std::unique_ptr<connection>>& ps,
                                      std::vector<std::vector<float>> gradients, std::uint64_t g,
                                      const std::vector<pulled>& versions);

 protected:
  // The chief: binds its socket, reaches every ps and creates the variables there.
  TESSEL_PS_INLINE void start_chief(const std::vector<array<float>>& weights,
                                    const nlohmann::json& optimizer);
  // The variables' values, partitioned, to their ps tasks (which start over: no optimizer state,
  // no batches applied, a new generation: pushes computed before are refused).
  TESSEL_PS_INLINE void create_variables(const std::vector<array<float>>& weights,
                                         const nlohmann::json& optimizer);
  // The ps tasks' variables and optimizer state at full size (slots_per_variable slots each).
  TESSEL_PS_INLINE full_state pull_state(std::size_t slots_per_variable);
  // A full state to the ps tasks, each its shards: created again, then restored.
  TESSEL_PS_INLINE void push_state(const full_state& s, const nlohmann::json& optimizer);
  // The variables the ps tasks hold now.
  std::vector<array<float>> pull_variables() { return pull(chief_ps_); }

  // fit's loop over epochs, with the model's side in `hooks`.
  TESSEL_PS_INLINE history fit_loop(const fit_hooks& hooks);
  // The backup's position file: written after the state, read before (0: no backup).
  TESSEL_PS_INLINE void write_position(const std::filesystem::path& dir, std::size_t epochs_done,
                                       std::size_t steps) const;
  // The backup's position, checked against this fit and the weights file (nullopt: no backup).
  TESSEL_PS_INLINE std::optional<backup_point> read_position(const std::filesystem::path& dir,
                                                             std::size_t steps,
                                                             std::size_t epochs) const;
  // Batches numbered on from the backup's; returns its epochs done.
  TESSEL_PS_INLINE std::size_t resume_at(const std::filesystem::path& dir, const backup_point& p);
  static std::filesystem::path backup_weights(const std::filesystem::path& dir) {
    return dir / "checkpoint.weights.h5";
  }
  static std::filesystem::path backup_position(const std::filesystem::path& dir) {
    return dir / "position.json";
  }
  // Keras's BackupAndRestore deletes its backup when training completes: here the two files
  // written above, and nothing else (the directory stays: it may not be this library's).
  TESSEL_PS_INLINE static void remove_backup(const std::filesystem::path& dir);

  // A ps task's loop (serve_ps, its chief_timeout as the orphan timeout).
  TESSEL_PS_INLINE int serve_ps_task();
  // A worker's loop: ready to the chief with its dataset's fingerprint, then each scheduled call
  // run by `run(function, batch index, ps)` (the result and the staleness), until shutdown.
  using run_function = std::function<std::pair<double, std::uint64_t>(
      std::size_t, std::uint64_t, std::vector<std::unique_ptr<connection>>&)>;
  TESSEL_PS_INLINE int serve_worker_loop(std::uint64_t fingerprint, const run_function& run);

  parameter_server_strategy& strategy_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::size_t>> shapes_;
  placement placement_;
  std::size_t function_count_ = 0;
  worker_callbacks callbacks_;

 private:
  using clock = std::chrono::steady_clock;
  struct task {
    std::uint64_t index;
    std::size_t function;
    std::shared_ptr<remote_value::state> result;
  };
  struct worker_state {
    zmq::message_t identity;
    clock::time_point last_seen;
    bool alive = false, busy = false;
    task current{};
  };

  TESSEL_PS_INLINE void run_epochs(const fit_hooks& hooks, history& h, std::size_t first);
  // A ps lost during fit with a backup: waits up to connect_timeout for it to start again (a
  // cluster manager restarts it at its address), gives every ps the backup's state, and returns
  // the epochs the backup had done. The batches since the backup are trained again, once each.
  TESSEL_PS_INLINE std::size_t recover(const ps_lost& lost, const fit_hooks& hooks);
  // A connection to every ps task, each answering within connect_timeout.
  TESSEL_PS_INLINE std::vector<std::unique_ptr<connection>> connect_ps();
  // A request to ps task p; one that does not answer within ps_timeout is ps_lost.
  TESSEL_PS_INLINE message call_ps(std::vector<std::unique_ptr<connection>>& ps, std::size_t p,
                                   message m);
  // Hands out pending batches to idle workers, reads the workers' messages for up to `wait`,
  // finds lost workers and checks the ps tasks.
  TESSEL_PS_INLINE void pump(std::chrono::milliseconds wait);
  TESSEL_PS_INLINE void on_message(message& m, zmq::message_t& identity);
  TESSEL_PS_INLINE void dispatch();
  TESSEL_PS_INLINE void requeue(worker_state& w);
  TESSEL_PS_INLINE void check_workers();
  // A heartbeat to every ps each second, without waiting; a ps that has sent nothing for
  // ps_timeout is lost.
  TESSEL_PS_INLINE void check_ps();
  // Tells every worker and ps task to stop, waiting up to `wait` for each ps to confirm.
  TESSEL_PS_INLINE void stop_tasks(std::chrono::milliseconds wait);
  // A ps task lost: during a fit with a backup, ps_lost (fit waits for the ps to start again and
  // resumes from the backup); otherwise the job ends.
  [[noreturn]] TESSEL_PS_INLINE void lost_ps(std::size_t p, const std::string& why);
  // Stops the workers and the ps tasks that still answer, and throws task_lost saying why (the
  // one message: the program prints it, or the runtime does when it is not caught).
  [[noreturn]] TESSEL_PS_INLINE void end_job(const std::string& why);

  zmq::context_t ctx_{1};
  // the chief's
  std::unique_ptr<zap_handler> zap_;  // before router_: destroyed after it
  std::unique_ptr<zmq::socket_t> router_;
  std::vector<std::unique_ptr<connection>> chief_ps_;
  std::map<std::size_t, worker_state> workers_;
  std::set<std::size_t> seen_;
  std::deque<task> pending_;
  std::set<std::uint64_t> in_flight_;
  std::uint64_t next_index_ = 0;
  std::optional<std::uint64_t> fingerprint_;
  clock::time_point last_ps_check_;
  coordinator_stats stats_;
  bool finished_ = false, recovering_ = false;
  // In fit: a non-finite loss halts the handing out of batches (TerminateOnNaN).
  bool in_fit_ = false, halted_ = false;
  std::uint64_t generation_ = 0;
};

#if TESSEL_PS_DEFINITIONS

TESSEL_PS_INLINE coordinator_core::coordinator_core(parameter_server_strategy& s,
                                                    std::vector<std::string> names,
                                                    std::vector<std::vector<std::size_t>> shapes)
    : strategy_(s), names_(std::move(names)), shapes_(std::move(shapes)) {
  placement_ = place(shapes_, names_, s.options().variable_partitioner, s.num_ps());
}

TESSEL_PS_INLINE coordinator_core::~coordinator_core() {
  try {
    shutdown();
  } catch (...) {
  }
}

TESSEL_PS_INLINE remote_value coordinator_core::schedule(std::size_t fn) {
  if (fn >= function_count_)
    throw value_error("schedule: no function " + std::to_string(fn) + "; " +
                      std::to_string(function_count_) + " are defined");
  auto st = std::make_shared<remote_value::state>();
  pending_.push_back({next_index_++, fn, st});
  pump(std::chrono::milliseconds(0));
  return remote_value(st, [this] { pump(std::chrono::milliseconds(50)); });
}

TESSEL_PS_INLINE void coordinator_core::join() {
  while (!pending_.empty() || !in_flight_.empty()) pump(std::chrono::milliseconds(50));
}

TESSEL_PS_INLINE bool coordinator_core::done() {
  pump(std::chrono::milliseconds(0));
  return pending_.empty() && in_flight_.empty();
}

TESSEL_PS_INLINE void coordinator_core::shutdown() {
  if (!strategy_.is_chief() || finished_ || !router_) return;
  finished_ = true;
  stats();
  stop_tasks(std::chrono::milliseconds(2000));
}

TESSEL_PS_INLINE const coordinator_stats& coordinator_core::stats() {
  if (!finished_) {
    stats_.ps_applied.assign(chief_ps_.size(), 0);
    stats_.ps_refused.assign(chief_ps_.size(), 0);
    for (std::size_t p = 0; p < chief_ps_.size(); ++p) {
      message m;
      m.h.what = kind::heartbeat;
      const message r = chief_ps_[p]->call(std::move(m), strategy_.options().ps_timeout);
      stats_.ps_applied[p] = r.h.a;
      stats_.ps_refused[p] = r.h.b;
    }
  }
  return stats_;
}

TESSEL_PS_INLINE void coordinator_core::start_chief(const std::vector<array<float>>& weights,
                                                    const nlohmann::json& optimizer) {
  const cluster_spec& c = strategy_.cluster();
  if (strategy_.security().open())
    std::fprintf(stderr,
                 "warning: chief: this cluster's ports are open: any process that reaches them "
                 "can push gradients to the ps tasks or replace their variables. Give every task "
                 "the cluster's keys (%s; make them with `tessel-ps-keys FILE`) to admit only "
                 "its own tasks\n",
                 keys_file_variable);
  zap_ = strategy_.security().handler(ctx_);
  router_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
  quiet(*router_);
  strategy_.security().serve(*router_);
  listen(*router_, "the chief", c.address());
  chief_ps_ = connect_ps();
  create_variables(weights, optimizer);
  last_ps_check_ = clock::now();
}

TESSEL_PS_INLINE void coordinator_core::create_variables(const std::vector<array<float>>& weights,
                                                         const nlohmann::json& optimizer) {
  ++generation_;
  for (int p = 0; p < strategy_.num_ps(); ++p) {
    nlohmann::json shards = nlohmann::json::array();
    message m;
    m.h.what = kind::create;
    m.h.a = generation_;
    m.frames.emplace_back();
    for (const std::size_t i : placement_.shards_of(p)) {
      const shard_placement& s = placement_.shards[i];
      std::vector<std::size_t> shape = shapes_[s.variable];
      if (!shape.empty()) shape[0] = s.rows;
      shards.push_back(
          {{"path", names_[s.variable] + "/shard_" + std::to_string(s.shard)}, {"shape", shape}});
      m.frames.push_back(frame_of(shard_of(std::span<const float>(weights[s.variable]), s)));
    }
    const nlohmann::json description = {{"optimizer", optimizer}, {"shards", shards}};
    m.frames[0] = frame_of(description.dump());
    (void)chief_ps_[static_cast<std::size_t>(p)]->call(std::move(m),
                                                       strategy_.options().ps_timeout);
  }
}

TESSEL_PS_INLINE full_state coordinator_core::pull_state(std::size_t k) {
  full_state out{pull(chief_ps_), std::vector<std::vector<float>>(shapes_.size() * k), 0, 0};
  std::vector<std::span<float>> slots;
  for (std::size_t v = 0; v < shapes_.size(); ++v)
    for (std::size_t j = 0; j < k; ++j) out.slots[v * k + j].resize(out.weights[v].values.size());
  for (auto& s : out.slots) slots.emplace_back(s);
  for (std::size_t p = 0; p < chief_ps_.size(); ++p) {
    message m;
    m.h.what = kind::state;
    const message r = chief_ps_[p]->call(std::move(m), strategy_.options().ps_timeout);
    const std::string who = chief_ps_[p]->name() + " at " + chief_ps_[p]->address();
    state_head head;
    try {
      head = assemble_state(r, placement_, static_cast<int>(p), k, slots, who);
    } catch (const refused& e) {
      throw task_lost(e.what());
    }
    if (p == 0) {
      out.iterations = head.iterations;
      out.learning_rate = head.learning_rate;
    }
  }
  return out;
}

TESSEL_PS_INLINE void coordinator_core::push_state(const full_state& st,
                                                   const nlohmann::json& optimizer) {
  create_variables(st.weights, optimizer);
  const std::size_t k = shapes_.empty() ? 0 : st.slots.size() / shapes_.size();
  for (std::size_t p = 0; p < chief_ps_.size(); ++p) {
    message m;
    m.h.what = kind::restore;
    m.h.a = static_cast<std::uint64_t>(st.iterations);
    m.frames.push_back(frame_of(nlohmann::json{{"learning_rate", st.learning_rate}}.dump()));
    const auto mine = placement_.shards_of(static_cast<int>(p));
    for (const std::size_t i : mine) {
      const shard_placement& s = placement_.shards[i];
      m.frames.push_back(frame_of(shard_of(std::span<const float>(st.weights[s.variable]), s)));
    }
    for (const std::size_t i : mine) {
      const shard_placement& s = placement_.shards[i];
      for (std::size_t j = 0; j < k; ++j)
        m.frames.push_back(
            frame_of(shard_of(std::span<const float>(st.slots[s.variable * k + j]), s)));
    }
    (void)chief_ps_[p]->call(std::move(m), strategy_.options().ps_timeout);
  }
}

TESSEL_PS_INLINE history coordinator_core::fit_loop(const fit_hooks& hooks) {
  history h;
  h.on_train_begin({});
  std::size_t first_epoch = 0;
  if (hooks.backup_dir) {
    // The position is checked whole before the weights are read or any ps is given them.
    if (const auto p = read_position(*hooks.backup_dir, hooks.steps, hooks.epochs)) {
      hooks.restore_state(*hooks.backup_dir);
      first_epoch = resume_at(*hooks.backup_dir, *p);
    } else {  // a backup from the start, so that a ps lost in the first epoch can be given one
      hooks.save_state(*hooks.backup_dir);
      write_position(*hooks.backup_dir, 0, hooks.steps);
    }
  }
  struct clear_on_exit {
    bool& flag;
    ~clear_on_exit() { flag = false; }
  } during{recovering_ = hooks.backup_dir.has_value()}, fitting{in_fit_ = true};
  for (;;) {
    try {
      run_epochs(hooks, h, first_epoch);
      break;
    } catch (const ps_lost& lost) {
      first_epoch = recover(lost, hooks);
    }
  }
  if (hooks.backup_dir) remove_backup(*hooks.backup_dir);
  return h;
}

TESSEL_PS_INLINE void coordinator_core::run_epochs(const fit_hooks& hooks, history& h,
                                                   std::size_t first) {
  const std::size_t steps = hooks.steps;
  for (std::size_t e = first; e < hooks.epochs; ++e) {
    if (hooks.verbose) std::printf("Epoch %zu/%zu\n", e + 1, hooks.epochs);
    progbar bar(steps, 20, hooks.verbose);
    std::vector<remote_value> values;
    for (std::size_t k = 0; k < steps; ++k) values.push_back(schedule());
    double loss = 0, stale = 0;
    std::size_t shown = 0;
    bool terminated = false;
    while (shown < steps && !terminated) {
      pump(std::chrono::milliseconds(50));
      std::size_t ready = 0;
      double sum = 0, stale_sum = 0;
      for (std::size_t k = 0; k < steps; ++k) {
        const remote_value& v = values[k];
        if (!v.ready()) continue;
        ++ready;
        sum += v.fetch();
        stale_sum += static_cast<double>(v.staleness());
        // Keras's TerminateOnNaN: a worker whose batch gave a non-finite loss pushed nothing
        // (a ps refuses a non-finite gradient), and training ends after the batches in flight.
        if (!std::isfinite(v.fetch()) && !terminated) {
          terminated = true;
          std::printf("Batch %zu: Invalid loss, terminating training\n", k);
          std::fflush(stdout);
        }
      }
      if (ready != shown) {
        loss = sum / static_cast<double>(ready);
        stale = stale_sum / static_cast<double>(ready);
        // The last update waits for the validation, as Keras's bar ends with val_ logs.
        if (ready < steps && !terminated) bar.update(ready, {{"loss", loss}, {"staleness", stale}});
        shown = ready;
      }
    }
    if (terminated) {
      pending_.clear();  // the epoch's batches not yet handed out are not trained
      while (!in_flight_.empty()) pump(std::chrono::milliseconds(50));
      halted_ = false;
    }
    logs epoch_logs{{"loss", loss}, {"staleness", stale}};
    if (hooks.validate)
      for (auto& entry : hooks.validate()) epoch_logs.push_back(std::move(entry));
    bar.update(steps, epoch_logs);
    h.on_epoch_end(e, epoch_logs);
    if (hooks.backup_dir) {
      hooks.save_state(*hooks.backup_dir);
      write_position(*hooks.backup_dir, e + 1, steps);
    }
    if (hooks.on_epoch_end) hooks.on_epoch_end(e, epoch_logs);
    if (terminated) break;
  }
}

TESSEL_PS_INLINE std::size_t coordinator_core::recover(const ps_lost& lost,
                                                       const fit_hooks& hooks) {
  const auto wait = strategy_.options().connect_timeout;
  std::printf(
      "%s; waiting up to %lld s for it to start again, to give every ps the state of "
      "the last backup\n",
      lost.what(), static_cast<long long>(wait.count() / 1000));
  std::fflush(stdout);
  pending_.clear();
  in_flight_.clear();
  for (auto& [index, w] : workers_) {
    w.busy = false;
    w.current = {};
  }
  connection& p = *chief_ps_[lost.ps];
  try {
    p.connect(wait);
  } catch (const task_lost&) {
    recovering_ = false;
    lost_ps(lost.ps, std::string(lost.what()) + " and did not start again within " +
                         std::to_string(wait.count() / 1000) + " s");
  }
  ++stats_.ps_restarts;
  const auto position = read_position(*hooks.backup_dir, hooks.steps, hooks.epochs);
  if (!position)
    end_job(std::string(lost.what()) + "; its backup's " +
            backup_position(*hooks.backup_dir).string() + " is gone, so the job ends");
  hooks.restore_state(*hooks.backup_dir);
  const std::size_t done = resume_at(*hooks.backup_dir, *position);
  std::erase_if(stats_.trained, [&](std::uint64_t g) { return g >= next_index_; });
  for (auto& [index, w] : workers_) w.last_seen = clock::now();
  std::printf("chief: %s is back with the backup's variables; training goes on from epoch %zu\n",
              p.name().c_str(), done + 1);
  std::fflush(stdout);
  return done;
}

TESSEL_PS_INLINE void coordinator_core::write_position(const std::filesystem::path& dir,
                                                       std::size_t epochs_done,
                                                       std::size_t steps) const {
  const auto sum = saving::read_checksum_trailer(backup_weights(dir));
  if (!sum)
    throw value_error("BackupAndRestore: " + backup_weights(dir).string() +
                      " has no checksum trailer after it was written");
  const std::filesystem::path tmp = dir / "position.json.tmp";
  {
    std::ofstream out(tmp);
    out << position_text({epochs_done, steps, next_index_, sum->bytes, sum->crc}) << "\n";
    if (!out) throw value_error("BackupAndRestore: cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, backup_position(dir));
}

TESSEL_PS_INLINE std::optional<backup_point> coordinator_core::read_position(
    const std::filesystem::path& dir, std::size_t steps, std::size_t epochs) const {
  const std::filesystem::path file = backup_position(dir);
  if (!std::filesystem::exists(file)) return std::nullopt;
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw value_error("BackupAndRestore: cannot read " + file.string());
  const backup_point p = parse_position(text, file.string(), steps, epochs);
  // The weights file must be the one written with this position (its checksum trailer).
  const auto sum = saving::read_checksum_trailer(backup_weights(dir));
  if (!sum || sum->bytes != p.weights_bytes || sum->crc != p.weights_crc32)
    throw value_error("BackupAndRestore: " + file.string() + ": 'weights' records " +
                      std::to_string(p.weights_bytes) + " bytes of CRC-32 " +
                      std::to_string(p.weights_crc32) + ", but " + backup_weights(dir).string() +
                      (sum ? " holds " + std::to_string(sum->bytes) + " bytes of CRC-32 " +
                                 std::to_string(sum->crc)
                           : std::string(" is missing or has no checksum trailer")) +
                      ": the two files are not of one backup. The backup is kept as it is: give "
                      "another backup_dir, or remove it to start over");
  return p;
}

TESSEL_PS_INLINE std::size_t coordinator_core::resume_at(const std::filesystem::path& dir,
                                                         const backup_point& p) {
  next_index_ = p.next_index;
  std::printf("chief: restored the backup in %s: %llu epochs done, resuming at batch %llu\n",
              dir.string().c_str(), static_cast<unsigned long long>(p.epochs_done),
              static_cast<unsigned long long>(next_index_));
  std::fflush(stdout);
  return static_cast<std::size_t>(p.epochs_done);
}

TESSEL_PS_INLINE void coordinator_core::remove_backup(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove(backup_weights(dir), ec);
  std::filesystem::remove(backup_position(dir), ec);
}

TESSEL_PS_INLINE int coordinator_core::serve_ps_task() {
  return serve_ps(strategy_.cluster(), {.orphan_timeout = strategy_.options().chief_timeout,
                                        .security = strategy_.security()});
}

TESSEL_PS_INLINE std::vector<std::unique_ptr<connection>> coordinator_core::connect_ps() {
  const cluster_spec& c = strategy_.cluster();
  std::vector<std::unique_ptr<connection>> out;
  for (int p = 0; p < c.num_ps(); ++p) {
    out.push_back(std::make_unique<connection>(
        ctx_, c.ps[static_cast<std::size_t>(p)],
        cluster_spec::task_name(role::ps, static_cast<std::size_t>(p)),
        strategy_.is_chief() ? chief_routing_id : std::string{}, strategy_.security()));
    out.back()->connect(strategy_.options().connect_timeout);
  }
  return out;
}

TESSEL_PS_INLINE message coordinator_core::call_ps(std::vector<std::unique_ptr<connection>>& ps,
                                                   std::size_t p, message m) {
  try {
    return ps[p]->call(std::move(m), strategy_.options().ps_timeout);
  } catch (const ps_lost&) {
    throw;
  } catch (const task_lost& e) {
    throw ps_lost(p, e.what());
  }
}

TESSEL_PS_INLINE std::vector<array<float>> coordinator_core::pull(
    std::vector<std::unique_ptr<connection>>& ps, std::vector<pulled>* versions) {
  std::vector<array<float>> w;
  for (const auto& s : shapes_) w.emplace_back(s);
  std::vector<std::span<float>> spans;
  for (auto& a : w) spans.emplace_back(a);
  if (versions) versions->assign(ps.size(), pulled{});
  for (std::size_t p = 0; p < ps.size(); ++p) {
    message m;
    m.h.what = kind::pull;
    const message r = call_ps(ps, p, std::move(m));
    if (versions) (*versions)[p] = {r.h.a, r.h.b};
    try {
      assemble_pull(r, placement_, static_cast<int>(p), spans,
                    ps[p]->name() + " at " + ps[p]->address());
    } catch (const refused& e) {
      // Not the shards the chief placed there: another cluster's ps, or one started with
      // another model; its variables are not this job's.
      throw ps_lost(p, e.what());
    }
  }
  return w;
}

TESSEL_PS_INLINE std::uint64_t coordinator_core::push(std::vector<std::unique_ptr<connection>>& ps,
                                                      std::vector<std::vector<float>> gradients,
                                                      std::uint64_t g,
                                                      const std::vector<pulled>& versions) {
  // Owned by the frames that point into them until ZeroMQ has sent them (no copy).
  std::vector<std::shared_ptr<const std::vector<float>>> grads;
  for (auto& v : gradients)
    grads.push_back(std::make_shared<const std::vector<float>>(std::move(v)));
  if (grads.size() != shapes_.size())
    throw value_error("push_gradients: " + std::to_string(grads.size()) + " gradients for " +
                      std::to_string(shapes_.size()) + " trainable variables");
  for (std::size_t v = 0; v < grads.size(); ++v) {
    std::size_t n = 1;
    for (const std::size_t e : shapes_[v]) n *= e;
    if (grads[v]->size() != n)
      throw value_error("push_gradients: the gradient of " + names_[v] + " has " +
                        std::to_string(grads[v]->size()) + " values, the variable " +
                        std::to_string(n));
  }
  std::uint64_t staleness = 0;
  for (std::size_t p = 0; p < ps.size(); ++p) {
    message m;
    m.h.what = kind::push;
    m.h.a = g;
    m.h.d = static_cast<std::uint64_t>(strategy_.task_index()) + 1;
    if (p < versions.size()) {
      m.h.b = versions[p].generation;
      m.h.c = versions[p].version;
    }
    for (const std::size_t i : placement_.shards_of(static_cast<int>(p))) {
      const shard_placement& s = placement_.shards[i];
      m.frames.push_back(frame_of(grads[s.variable], s.offset, s.values));
    }
    const message reply = call_ps(ps, p, std::move(m));
    staleness = std::max(staleness, reply.h.a);
  }
  return staleness;
}

TESSEL_PS_INLINE void coordinator_core::pump(std::chrono::milliseconds wait) {
  if (!strategy_.is_chief())
    throw value_error("cluster_coordinator: schedule, join and fit run on the chief");
  dispatch();
  const auto until = clock::now() + wait;
  do {
    zmq::message_t identity;
    std::optional<message> m = receive(*router_, std::chrono::milliseconds(10), &identity);
    if (m) on_message(*m, identity);
    check_workers();
    check_ps();
    dispatch();
  } while (clock::now() < until);
}

TESSEL_PS_INLINE void coordinator_core::on_message(message& m, zmq::message_t& identity) {
  const auto index = static_cast<std::size_t>(m.h.a);
  if (m.h.what == kind::hello) {
    message r = reply_to(m, kind::hello);
    send(*router_, r, &identity);
    return;
  }
  if (m.h.what == kind::ready) {
    // Checked before the worker is recorded: a refused one leaves the chief as it was.
    std::string why;
    if (index >= static_cast<std::size_t>(strategy_.num_workers()))
      why = "a worker " + std::to_string(index) + " joined, but TF_CONFIG lists " +
            std::to_string(strategy_.num_workers()) +
            " workers; give every task the same TF_CONFIG";
    else if (fingerprint_ && *fingerprint_ != m.h.b)
      why = "worker " + std::to_string(index) +
            "'s dataset differs from the first worker's (its facts' checksum); every worker "
            "must build the same dataset";
    else if (const auto d = m.frames.empty() ? std::optional<std::string>(
                                                   "it did not describe its model's variables")
                                             : model_difference(m.frames[0], names_, shapes_))
      why = "worker " + std::to_string(index) + " at " + strategy_.cluster().worker[index] +
            " was built with another model than the chief's: " + *d +
            "; every task must build the same model";
    if (!why.empty()) {
      ++stats_.workers_refused;
      std::printf("chief: %s\n", why.c_str());
      std::fflush(stdout);
      message no = failure(m, why);
      send(*router_, no, &identity);
      return;
    }
    worker_state& w = workers_[index];
    const bool again = seen_.count(index) > 0;
    fingerprint_ = m.h.b;
    if (w.busy) {  // it died and came back before it was found lost
      ++stats_.workers_lost;
      std::printf(
          "chief: worker %zu at %s started again while its batch %llu was in flight; "
          "the batch goes to another worker\n",
          index, strategy_.cluster().worker[index].c_str(),
          static_cast<unsigned long long>(w.current.index));
      requeue(w);
    }
    w.identity.copy(identity);
    w.alive = true;
    w.busy = false;
    w.last_seen = clock::now();
    seen_.insert(index);
    if (again) {
      ++stats_.workers_rejoined;
      std::printf("chief: worker %zu at %s rejoined; it is given work again\n", index,
                  strategy_.cluster().worker[index].c_str());
      std::fflush(stdout);
    }
    message ok = reply_to(m, kind::ready);
    send(*router_, ok, &identity);
    return;
  }
  if (m.h.what == kind::heartbeat) {
    auto it = workers_.find(index);
    if (it != workers_.end()) {
      worker_state& w = it->second;
      if (!w.alive) {  // lost, but alive after all (a long pause): given work again
        w.alive = true;
        ++stats_.workers_rejoined;
        std::printf("chief: worker %zu at %s answers again; it is given work again\n", index,
                    strategy_.cluster().worker[index].c_str());
        std::fflush(stdout);
      }
      w.last_seen = clock::now();
    }
    message r = reply_to(m, kind::heartbeat);
    send(*router_, r, &identity);
    return;
  }
  if (m.h.what == kind::failed) {
    // A failure of a batch the worker no longer holds (given to another after a lost ps) is
    // old news.
    auto it = workers_.find(index);
    if (it == workers_.end() || !it->second.busy || it->second.current.index != m.h.b) return;
    const std::string why = m.frames.empty() ? "" : text_of(m.frames[0]);
    if (m.h.c > 0 && m.h.c <= chief_ps_.size())
      lost_ps(static_cast<std::size_t>(m.h.c - 1),
              "chief: worker " + std::to_string(index) + " reports: " + why);
    end_job("chief: worker " + std::to_string(index) + " reports: " + why);
  }
  if (m.h.what == kind::done) {
    auto it = workers_.find(index);
    if (it == workers_.end()) return;
    worker_state& w = it->second;
    w.last_seen = clock::now();
    const std::uint64_t batch = m.h.b;
    const std::optional<done_values> values = decode_done(m);
    if (w.busy && w.current.index == batch && values) {
      // fit stops handing out batches at the first non-finite loss (TerminateOnNaN).
      if (in_fit_ && !std::isfinite(values->result)) halted_ = true;
      w.busy = false;
      w.current.result->loss = values->result;
      w.current.result->staleness = values->staleness;
      stats_.trained.push_back(batch);
      w.current = {};
    }
  }
}

TESSEL_PS_INLINE void coordinator_core::dispatch() {
  if (halted_) return;
  for (auto& [index, w] : workers_) {
    if (pending_.empty()) return;
    if (!w.alive || w.busy) continue;
    w.current = pending_.front();
    pending_.pop_front();
    w.busy = true;
    in_flight_.insert(w.current.index);
    message m;
    m.h.what = kind::run;
    m.h.a = w.current.function;
    m.h.d = w.current.index;
    send(*router_, m, &w.identity);
  }
}

TESSEL_PS_INLINE void coordinator_core::requeue(worker_state& w) {
  pending_.push_front(w.current);
  in_flight_.erase(w.current.index);
  ++stats_.batches_reassigned;
  w.busy = false;
}

TESSEL_PS_INLINE void coordinator_core::check_workers() {
  // in_flight_ follows the workers' busy flags.
  in_flight_.clear();
  for (auto& [index, w] : workers_) {
    if (w.alive && clock::now() - w.last_seen > strategy_.options().worker_timeout) {
      w.alive = false;
      ++stats_.workers_lost;
      std::string what = "chief: worker " + std::to_string(index) + " at " +
                         strategy_.cluster().worker[index] + " is lost (no heartbeat for " +
                         std::to_string(strategy_.options().worker_timeout.count()) + " ms)";
      if (w.busy) {
        what += "; its batch " + std::to_string(w.current.index) + " goes to another worker";
        requeue(w);
      }
      std::printf("%s\n", what.c_str());
      std::fflush(stdout);
    }
    if (w.busy) in_flight_.insert(w.current.index);
  }
}

TESSEL_PS_INLINE void coordinator_core::check_ps() {
  const auto now = clock::now();
  for (auto& p : chief_ps_) {
    while (p->poll(std::chrono::milliseconds(0))) {
    }
    if (now - p->last_heard() > strategy_.options().ps_timeout)
      lost_ps(static_cast<std::size_t>(&p - chief_ps_.data()),
              "chief: " + p->name() + " at " + p->address() + " did not answer for " +
                  std::to_string(strategy_.options().ps_timeout.count() / 1000) + " s");
  }
  if (now - last_ps_check_ < std::chrono::seconds(1)) return;
  last_ps_check_ = now;
  for (auto& p : chief_ps_) {
    message m;
    m.h.what = kind::heartbeat;
    p->post(m);
  }
}

TESSEL_PS_INLINE void coordinator_core::stop_tasks(std::chrono::milliseconds wait) {
  for (auto& [index, w] : workers_) {
    message m;
    m.h.what = kind::shutdown;
    send(*router_, m, &w.identity);
  }
  for (auto& p : chief_ps_) {
    message m;
    m.h.what = kind::shutdown;
    (void)p->try_call(m, wait);
  }
}

TESSEL_PS_INLINE void coordinator_core::lost_ps(std::size_t p, const std::string& why) {
  if (recovering_) throw ps_lost(p, why);
  end_job(why +
          "; its variables are lost, so the job ends. Start the cluster again: with "
          "checkpoints it resumes from the last one");
}

TESSEL_PS_INLINE void coordinator_core::end_job(const std::string& why) {
  finished_ = true;
  stop_tasks(std::chrono::milliseconds(500));
  throw task_lost(why);
}

TESSEL_PS_INLINE int coordinator_core::serve_worker_loop(std::uint64_t fingerprint,
                                                         const run_function& run) {
  const cluster_spec& c = strategy_.cluster();
  const auto& o = strategy_.options();
  auto ps = connect_ps();
  connection chief(ctx_, c.chief[0], "the chief", {}, strategy_.security());
  chief.connect(o.connect_timeout);
  message hello;
  hello.h.what = kind::ready;
  hello.h.a = static_cast<std::uint64_t>(c.task_index);
  hello.h.b = fingerprint;
  hello.frames.push_back(frame_of(describe_variables(names_, shapes_)));
  const message welcome = chief.call(std::move(hello), o.connect_timeout);
  (void)welcome;

  // Heartbeats from a thread with its own socket; the chief's silence ends the worker.
  std::atomic<bool> stop{false}, chief_lost{false};
  std::thread beat([&] {
    connection hb(ctx_, c.chief[0], "the chief", {}, strategy_.security());
    auto last_answer = clock::now();
    while (!stop) {
      message m;
      m.h.what = kind::heartbeat;
      m.h.a = static_cast<std::uint64_t>(c.task_index);
      if (hb.try_call(m, std::chrono::milliseconds(500)))
        last_answer = clock::now();
      else if (clock::now() - last_answer > o.chief_timeout) {
        chief_lost = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  int status = 0;
  try {
    for (;;) {
      if (chief_lost) {
        std::fprintf(stderr, "worker %d: the chief at %s stopped answering; ending\n", c.task_index,
                     c.chief[0].c_str());
        status = 1;
        break;
      }
      std::optional<message> m = chief.poll(std::chrono::milliseconds(200));
      if (!m) continue;
      if (m->h.what == kind::shutdown) break;
      if (m->h.what != kind::run) continue;
      message done;
      done.h.what = kind::done;
      done.h.a = static_cast<std::uint64_t>(c.task_index);
      done.h.b = m->h.d;
      try {
        if (m->h.a >= function_count_)
          throw value_error("the chief scheduled function " + std::to_string(m->h.a) +
                            ", but this worker defines " + std::to_string(function_count_) +
                            "; define the same functions on every task");
        if (callbacks_.on_train_batch_begin) callbacks_.on_train_batch_begin(m->h.d);
        const auto [result, staleness] = run(m->h.a, m->h.d, ps);
        if (callbacks_.on_train_batch_end) callbacks_.on_train_batch_end(m->h.d);
        const double values[2] = {result, static_cast<double>(staleness)};
        done.frames.push_back(zmq::message_t(values, sizeof values));
      } catch (const ps_lost& e) {
        done.h.what = kind::failed;
        done.h.c = e.ps + 1;
        done.frames.push_back(frame_of(std::string(e.what())));
      } catch (const std::exception& e) {
        done.h.what = kind::failed;
        done.frames.push_back(frame_of(std::string(e.what())));
      }
      chief.post(done);
    }
  } catch (...) {
    stop = true;
    beat.join();
    throw;
  }
  stop = true;
  beat.join();
  return status;
}

#endif

}  // namespace tessel::ps
