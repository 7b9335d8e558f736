#pragma once
// TensorFlow's ParameterServerStrategy and ClusterCoordinator: asynchronous data-parallel
// training. The ps tasks hold the variables (partitioned and placed by bytes) and apply the
// optimizer as gradients arrive; the workers each pull the variables, compute a gradient on a
// batch and push it, without waiting for one another; the chief creates the variables, hands
// out the batches and does not train.
//
// Beyond TensorFlow's at-least-once: the chief hands out batches by their index in the data
// set, a batch whose worker is lost goes to another worker, and each ps applies a batch's
// gradient once (a repeated push is refused), so an epoch trains every batch exactly once.
//
// Every process runs the same program; TF_CONFIG gives its role:
//
//   tessel::ps::parameter_server_strategy strategy({.variable_partitioner =
//                                                   tessel::ps::min_size_partitioner{}});
//   model_t model;
//   model.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
//   tessel::ps::cluster_coordinator coord(strategy, model, [] { return make_dataset(); });
//   if (!strategy.is_chief()) return coord.serve();   // ps and workers serve until the end
//   const auto history = coord.fit({.epochs = 3, .steps_per_epoch = 100});
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
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

#include "../core/agreement.hpp"
#include "../data/dataset.hpp"
#include "../trainer/callbacks.hpp"
#include "../trainer/progbar.hpp"
#include "cluster.hpp"
#include "partitioner.hpp"
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
  // A worker whose chief has been silent this long ends.
  std::chrono::milliseconds chief_timeout{30000};
};

// tf.distribute.experimental.ParameterServerStrategy(cluster_resolver, variable_partitioner).
class parameter_server_strategy {
 public:
  explicit parameter_server_strategy(strategy_options o = {})
      : parameter_server_strategy(cluster_from_environment(), std::move(o)) {}
  parameter_server_strategy(cluster_spec c, strategy_options o)
      : cluster_(std::move(c)), options_(std::move(o)) {}

  [[nodiscard]] const cluster_spec& cluster() const noexcept { return cluster_; }
  [[nodiscard]] const strategy_options& options() const noexcept { return options_; }
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

template <class Dataset>
struct ps_fit_options {
  std::size_t epochs = 1;
  // Steps (batches) per epoch; 0: the dataset's cardinality, which must then be known.
  std::size_t steps_per_epoch = 0;
  int verbose = 1;
  // Evaluated on the chief at the end of each epoch, with the variables the ps tasks hold then
  // (logged as val_loss and the compiled metrics with val_).
  std::optional<Dataset> validation_data = std::nullopt;
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
  std::vector<std::uint64_t> ps_applied, ps_refused;  // per ps: updates applied, repeats refused
  double mean_staleness = 0;
};

// The ClusterCoordinator, and the loops of the ps and worker tasks. Model is a one-device
// tessel model whose weights are all trainable; Dataset a tessel::dataset of batches that every
// worker builds alike (each batch is found by its index in the data set, repeated).
template <class Model, class Dataset>
class cluster_coordinator {
 public:
  cluster_coordinator(parameter_server_strategy& s, Model& model,
                      std::function<Dataset()> fn = {})
      : strategy_(s), model_(model), dataset_fn_(std::move(fn)) {
    const auto tree = model_.state_tree_view();
    for (const auto& v : tree.trainable_variables) {
      names_.push_back(v.path);
      shapes_.push_back(v.shape);
    }
    std::size_t non_trainable = 0;
    for (const auto& v : tree.non_trainable_variables) non_trainable += v.is_tensor() ? 1 : 0;
    if (non_trainable > 0)
      throw value_error("ParameterServerStrategy: the model has " +
                        std::to_string(non_trainable) +
                        " non-trainable weights (batch normalization's statistics); the ps tasks "
                        "hold trainable variables only, so train this model with "
                        "mirrored_strategy or multi_worker_mirrored_strategy");
    placement_ = place(shapes_, names_, s.options().variable_partitioner, s.num_ps());
    if (strategy_.is_chief()) start_chief();
  }

  // coordinator.create_per_worker_dataset(fn): each worker builds its dataset with fn (the same
  // elements in the same order on every worker: a batch is found by its index). Call on every
  // process before serve() and fit().
  void create_per_worker_dataset(std::function<Dataset()> fn) { dataset_fn_ = std::move(fn); }

  // Set on every process before serve(); only the workers call them.
  void set_worker_callbacks(worker_callbacks c) { callbacks_ = std::move(c); }

  // The placement of the variables' shards on the ps tasks and the bytes each holds.
  [[nodiscard]] std::string explain() const { return placement_.explain(); }
  [[nodiscard]] const placement& variable_placement() const noexcept { return placement_; }

  // On a ps or worker task: serves until the chief ends the job; returns the exit status.
  int serve() {
    const cluster_spec& c = strategy_.cluster();
    if (c.task_type == role::ps) return serve_ps(c);
    if (c.task_type == role::worker) return serve_worker();
    throw value_error("cluster_coordinator::serve: the chief schedules; it does not serve");
  }

  // coordinator.schedule(train_step): a training step on the next batch, run on some free
  // worker; returns at once.
  remote_value schedule() {
    auto st = std::make_shared<remote_value::state>();
    pending_.push_back({next_index_++, st});
    pump(std::chrono::milliseconds(0));
    return remote_value(st, [this] { pump(std::chrono::milliseconds(50)); });
  }
  // coordinator.join(): waits until every scheduled step has run.
  void join() {
    while (!pending_.empty() || !in_flight_.empty()) pump(std::chrono::milliseconds(50));
  }
  // coordinator.done(): whether every scheduled step has run.
  bool done() {
    pump(std::chrono::milliseconds(0));
    return pending_.empty() && in_flight_.empty();
  }

  // model.fit under the strategy: epochs of steps_per_epoch batches, scheduled on the workers,
  // with Keras's progress bar; the history holds each epoch's mean loss and staleness. At the
  // end the chief's model holds the trained variables.
  history fit(const ps_fit_options<Dataset>& o) {
    std::size_t steps = o.steps_per_epoch;
    if (steps == 0) {
      if (!dataset_fn_)
        throw value_error("fit: no dataset; call create_per_worker_dataset(fn) first");
      const auto n = dataset_fn_().cardinality();
      if (!n || *n == data::infinite_cardinality)
        throw value_error("fit: the dataset's size is unknown (or infinite); give "
                          "steps_per_epoch, as ParameterServerStrategy requires");
      steps = *n;
    }
    history h;
    h.on_train_begin({});
    for (std::size_t e = 0; e < o.epochs; ++e) {
      if (o.verbose) std::printf("Epoch %zu/%zu\n", e + 1, o.epochs);
      progbar bar(steps, 20, o.verbose);
      std::vector<remote_value> values;
      for (std::size_t k = 0; k < steps; ++k) values.push_back(schedule());
      double loss = 0, stale = 0;
      std::size_t shown = 0;
      while (shown < steps) {
        pump(std::chrono::milliseconds(50));
        std::size_t ready = 0;
        double sum = 0, stale_sum = 0;
        for (const auto& v : values)
          if (v.ready()) {
            ++ready;
            sum += v.fetch();
            stale_sum += static_cast<double>(v.staleness());
          }
        if (ready != shown) {
          loss = sum / static_cast<double>(ready);
          stale = stale_sum / static_cast<double>(ready);
          // The last update waits for the validation, as Keras's bar ends with val_ logs.
          if (ready < steps) bar.update(ready, {{"loss", loss}, {"staleness", stale}});
          shown = ready;
        }
      }
      logs epoch_logs{{"loss", loss}, {"staleness", stale}};
      if (o.validation_data) {
        pull_into_model();
        for (const auto& [name, value] : model_.evaluate(*o.validation_data, 0))
          epoch_logs.emplace_back("val_" + name, value);
      }
      bar.update(steps, epoch_logs);
      h.on_epoch_end(e, epoch_logs);
    }
    pull_into_model();
    return h;
  }

  // The chief's model gets the variables the ps tasks hold now.
  void pull_into_model() { model_.set_weights(pull(chief_ps_)); }

  // Ends the job: the workers and the ps tasks are told to stop.
  void shutdown() {
    if (!strategy_.is_chief() || finished_) return;
    finished_ = true;
    stats();
    for (auto& [index, w] : workers_) {
      message m;
      m.h.what = kind::shutdown;
      send(*router_, m, &w.identity);
    }
    for (auto& p : chief_ps_) {
      message m;
      m.h.what = kind::shutdown;
      (void)p->try_call(m, std::chrono::milliseconds(2000));
    }
  }
  ~cluster_coordinator() {
    try {
      shutdown();
    } catch (...) {
    }
  }

  // What the chief counted, with each ps's counts (asked now).
  const coordinator_stats& stats() {
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

 private:
  using clock = std::chrono::steady_clock;
  struct task {
    std::uint64_t index;
    std::shared_ptr<remote_value::state> result;
  };
  struct worker_state {
    zmq::message_t identity;
    clock::time_point last_seen;
    bool alive = false, busy = false;
    task current{};
  };

  // ---- the chief -------------------------------------------------------------------------------

  void start_chief() {
    const cluster_spec& c = strategy_.cluster();
    router_ = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::router);
    quiet(*router_);
    router_->bind(bind_endpoint(c.address()));
    chief_ps_ = connect_ps();
    // The chief's model's initial values, partitioned, to their ps tasks.
    const auto weights = model_.get_weights();
    for (int p = 0; p < strategy_.num_ps(); ++p) {
      nlohmann::json shards = nlohmann::json::array();
      message m;
      m.h.what = kind::create;
      m.frames.emplace_back();
      for (const std::size_t i : placement_.shards_of(p)) {
        const shard_placement& s = placement_.shards[i];
        std::vector<std::size_t> shape = shapes_[s.variable];
        if (!shape.empty()) shape[0] = s.rows;
        shards.push_back({{"path", names_[s.variable] + "/shard_" + std::to_string(s.shard)},
                          {"shape", shape}});
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        m.frames.push_back(frame_of(std::span<const float>(
            weights[s.variable].values.data() + s.first_row * per_row, s.values)));
      }
      const nlohmann::json description = {
          {"optimizer", to_json(model_.get_optimizer().spec())}, {"shards", shards}};
      m.frames[0] = frame_of(description.dump());
      (void)chief_ps_[static_cast<std::size_t>(p)]->call(std::move(m),
                                                         strategy_.options().ps_timeout);
    }
    last_ps_check_ = clock::now();
  }

  // A connection to every ps task, each answering within connect_timeout.
  std::vector<std::unique_ptr<connection>> connect_ps() {
    const cluster_spec& c = strategy_.cluster();
    std::vector<std::unique_ptr<connection>> out;
    for (int p = 0; p < c.num_ps(); ++p) {
      out.push_back(std::make_unique<connection>(
          ctx_, c.ps[static_cast<std::size_t>(p)],
          cluster_spec::task_name(role::ps, static_cast<std::size_t>(p))));
      out.back()->connect(strategy_.options().connect_timeout);
    }
    return out;
  }

  // Every shard from every ps, put together into the variables (get_weights' order); the ps
  // tasks' versions in `versions`.
  std::vector<array<float>> pull(std::vector<std::unique_ptr<connection>>& ps,
                                 std::vector<std::uint64_t>* versions = nullptr) {
    std::vector<array<float>> w;
    for (const auto& s : shapes_) w.emplace_back(s);
    if (versions) versions->assign(ps.size(), 0);
    for (std::size_t p = 0; p < ps.size(); ++p) {
      message m;
      m.h.what = kind::pull;
      const message r = ps[p]->call(std::move(m), strategy_.options().ps_timeout);
      if (versions) (*versions)[p] = r.h.a;
      const auto mine = placement_.shards_of(static_cast<int>(p));
      if (r.frames.size() != mine.size())
        throw task_lost(ps[p]->name() + " at " + ps[p]->address() + " holds " +
                        std::to_string(r.frames.size()) + " shards, not the " +
                        std::to_string(mine.size()) + " placed there (restarted?)");
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const shard_placement& s = placement_.shards[mine[k]];
        const auto values = floats_of(r.frames[k]);
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        std::copy(values.begin(), values.end(),
                  w[s.variable].values.begin() +
                      static_cast<std::ptrdiff_t>(s.first_row * per_row));
      }
    }
    return w;
  }

  // Hands out pending batches to idle workers, reads the workers' messages for up to `wait`,
  // finds lost workers and checks the ps tasks.
  void pump(std::chrono::milliseconds wait) {
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

  void on_message(message& m, zmq::message_t& identity) {
    const auto index = static_cast<std::size_t>(m.h.a);
    if (m.h.what == kind::hello) {
      message r = reply_to(m, kind::hello);
      send(*router_, r, &identity);
      return;
    }
    if (m.h.what == kind::ready) {
      worker_state& w = workers_[index];
      const bool again = seen_.count(index) > 0;
      if (fingerprint_ && *fingerprint_ != m.h.b) {
        message no = failure(m, "this worker's dataset differs from the first worker's (its "
                                "facts' checksum); every worker must build the same dataset");
        send(*router_, no, &identity);
        return;
      }
      fingerprint_ = m.h.b;
      if (w.busy) {  // it died and came back before it was found lost
        ++stats_.workers_lost;
        std::printf("chief: worker %zu at %s started again while its batch %llu was in flight; "
                    "the batch goes to another worker\n",
                    index, strategy_.cluster().worker[index].c_str(),
                    static_cast<unsigned long long>(w.current.index));
        requeue(index, w);
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
      const std::string why = m.frames.empty() ? "" : text_of(m.frames[0]);
      end_job("chief: worker " + std::to_string(index) + " reports: " + why);
    }
    if (m.h.what == kind::done) {
      auto it = workers_.find(index);
      if (it == workers_.end()) return;
      worker_state& w = it->second;
      w.last_seen = clock::now();
      const std::uint64_t batch = m.h.b;
      if (w.busy && w.current.index == batch) {
        w.busy = false;
        const auto values = m.frames.empty() ? std::span<const float>{} : floats_of(m.frames[0]);
        w.current.result->loss = values.empty() ? 0.0 : values[0];
        w.current.result->staleness =
            values.size() > 1 ? static_cast<std::uint64_t>(values[1]) : 0;
        stats_.trained.push_back(batch);
        w.current = {};
      }
    }
  }

  void dispatch() {
    for (auto& [index, w] : workers_) {
      if (pending_.empty()) return;
      if (!w.alive || w.busy) continue;
      w.current = pending_.front();
      pending_.pop_front();
      w.busy = true;
      in_flight_.insert(w.current.index);
      message m;
      m.h.what = kind::run;
      m.h.d = w.current.index;
      send(*router_, m, &w.identity);
    }
  }

  void requeue(std::size_t index, worker_state& w) {
    (void)index;
    pending_.push_front(w.current);
    in_flight_.erase(w.current.index);
    ++stats_.batches_reassigned;
    w.busy = false;
  }

  void check_workers() {
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
          requeue(index, w);
        }
        std::printf("%s\n", what.c_str());
        std::fflush(stdout);
      }
      if (w.busy) in_flight_.insert(w.current.index);
    }
  }

  // A heartbeat to every ps each second, without waiting; a ps that has sent nothing for
  // ps_timeout ends the job.
  void check_ps() {
    const auto now = clock::now();
    for (auto& p : chief_ps_) {
      while (p->poll(std::chrono::milliseconds(0))) {
      }
      if (now - p->last_heard() > strategy_.options().ps_timeout)
        end_job("chief: " + p->name() + " at " + p->address() + " did not answer for " +
                std::to_string(strategy_.options().ps_timeout.count() / 1000) +
                " s; its variables are lost, so the job ends. Start the cluster again: with "
                "checkpoints it resumes from the last one");
    }
    if (now - last_ps_check_ < std::chrono::seconds(1)) return;
    last_ps_check_ = now;
    for (auto& p : chief_ps_) {
      message m;
      m.h.what = kind::heartbeat;
      p->post(m);
    }
  }

  // Stops the workers and the ps tasks that still answer, and throws task_lost saying why (the
  // one message: the program prints it, or the runtime does when it is not caught).
  [[noreturn]] void end_job(const std::string& why) {
    finished_ = true;
    for (auto& [index, w] : workers_) {
      message m;
      m.h.what = kind::shutdown;
      send(*router_, m, &w.identity);
    }
    for (auto& p : chief_ps_) {
      message m;
      m.h.what = kind::shutdown;
      (void)p->try_call(m, std::chrono::milliseconds(500));
    }
    throw task_lost(why);
  }

  // ---- a worker ----------------------------------------------------------------------------

  // The dataset's batch with global index g (of the dataset repeated): the pass g / size, the
  // position g % size in it. Passes start again when a batch lies behind the current position
  // (a batch reassigned from a lost worker).
  struct cursor {
    Dataset ds;
    std::size_t size = 0;
    std::optional<typename Dataset::iterator> it;
    std::uint64_t pass = 0, position = 0;
    const typename Dataset::element_type& at(std::uint64_t g) {
      const std::uint64_t want_pass = g / size, want = g % size;
      if (!it || want_pass != pass || want < position) {
        ds.set_iterations(want_pass);
        it = ds.begin();
        pass = want_pass;
        position = 0;
      }
      while (position < want) {
        ++*it;
        ++position;
      }
      return **it;
    }
  };

  int serve_worker() {
    const cluster_spec& c = strategy_.cluster();
    const auto& o = strategy_.options();
    if (!dataset_fn_)
      throw value_error("worker: no dataset; call create_per_worker_dataset(fn) on every task "
                        "before serve()");
    cursor data{dataset_fn_(), 0, std::nullopt, 0, 0};
    const auto n = data.ds.cardinality();
    if (!n || *n == 0 || *n == data::infinite_cardinality)
      throw value_error("worker: the dataset's size must be known and finite (batches are found "
                        "by their index); do not repeat() it");
    data.size = *n;
    hasher h;
    for (const fact& f : data.ds.facts()) h.text(f.what).value(f.value);

    auto ps = connect_ps();
    connection chief(ctx_, c.chief[0], "the chief");
    chief.connect(o.connect_timeout);
    message hello;
    hello.h.what = kind::ready;
    hello.h.a = static_cast<std::uint64_t>(c.task_index);
    hello.h.b = h.result();
    const message welcome = chief.call(std::move(hello), o.connect_timeout);
    (void)welcome;

    // Heartbeats from a thread with its own socket; the chief's silence ends the worker.
    std::atomic<bool> stop{false}, chief_lost{false};
    std::thread beat([&] {
      connection hb(ctx_, c.chief[0], "the chief");
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
          std::fprintf(stderr, "worker %d: the chief at %s stopped answering; ending\n",
                       c.task_index, c.chief[0].c_str());
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
          if (callbacks_.on_train_batch_begin) callbacks_.on_train_batch_begin(m->h.d);
          const auto result = step(ps, data.at(m->h.d), m->h.d);
          if (callbacks_.on_train_batch_end) callbacks_.on_train_batch_end(m->h.d);
          auto values = std::make_shared<std::vector<float>>(
              std::vector<float>{static_cast<float>(result.first),
                                 static_cast<float>(result.second)});
          done.frames.push_back(frame_of(std::shared_ptr<const std::vector<float>>(values)));
        } catch (const task_lost& e) {
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

  // One training step on batch g: pull, gradient, push. Returns the loss and the staleness.
  std::pair<double, std::uint64_t> step(std::vector<std::unique_ptr<connection>>& ps,
                                        const typename Dataset::element_type& batch,
                                        std::uint64_t g) {
    std::vector<std::uint64_t> versions;
    model_.set_weights(pull(ps, &versions));
    const auto tree = model_.state_tree_view();
    const auto r = model_.value_and_grad(tree.trainable_variables, tree.non_trainable_variables,
                                         batch.first, batch.second);
    std::vector<std::shared_ptr<const std::vector<float>>> grads;
    for (const auto& gv : r.grads)
      grads.push_back(std::make_shared<const std::vector<float>>(gv.numpy()));
    std::uint64_t staleness = 0;
    for (std::size_t p = 0; p < ps.size(); ++p) {
      message m;
      m.h.what = kind::push;
      m.h.a = g;
      m.h.c = versions[p];
      for (const std::size_t i : placement_.shards_of(static_cast<int>(p))) {
        const shard_placement& s = placement_.shards[i];
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        m.frames.push_back(frame_of(std::span<const float>(
            grads[s.variable]->data() + s.first_row * per_row, s.values)));
      }
      const message reply = ps[p]->call(std::move(m), strategy_.options().ps_timeout);
      staleness = std::max(staleness, reply.h.a);
    }
    return {r.loss, staleness};
  }

  parameter_server_strategy& strategy_;
  Model& model_;
  std::function<Dataset()> dataset_fn_;
  worker_callbacks callbacks_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::size_t>> shapes_;
  placement placement_;
  zmq::context_t ctx_{1};
  // the chief's
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
  bool finished_ = false;
};

}  // namespace tessel::ps
