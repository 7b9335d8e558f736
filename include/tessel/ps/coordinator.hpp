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
#include <algorithm>
#include <atomic>
#include <chrono>
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
  // A worker or ps task whose chief has been silent this long ends.
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
  // Keras's BackupAndRestore(backup_dir) on the chief: at the end of each epoch the variables
  // and the optimizer's state (gathered from the ps tasks into a Keras .weights.h5 file) and the
  // position; a fit that finds them resumes after the last epoch saved, the ps tasks given the
  // saved state. Its two files are removed when fit completes.
  std::optional<std::filesystem::path> backup_dir = std::nullopt;
  // Called on the chief after each epoch (after its backup): Keras's on_epoch_end.
  std::function<void(std::size_t, const logs&)> on_epoch_end = {};
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
  std::size_t ps_restarts = 0;  // ps tasks lost and given the last backup's state
  std::vector<std::uint64_t> ps_applied, ps_refused;  // per ps: updates applied, repeats refused
  double mean_staleness = 0;
};

template <class Model, class Dataset>
class cluster_coordinator;

// What a pull saw of one ps: its version (updates applied) and generation (variables created).
struct pulled {
  std::uint64_t version = 0, generation = 0;
};

// What a scheduled function is given on the worker that runs it: the batch the chief assigned
// it (exactly once: a batch whose worker is lost is given to another), the worker's model, and
// the ps tasks, to pull the variables and push gradients.
template <class Model, class Dataset>
class worker_context {
 public:
  using element_type = typename Dataset::element_type;
  // The global index of this call's batch (in the dataset repeated), and the batch.
  [[nodiscard]] std::uint64_t batch_index() const noexcept { return index_; }
  [[nodiscard]] const element_type& batch() const { return batch_; }
  [[nodiscard]] Model& model() noexcept { return model_; }
  // The model gets the variables the ps tasks hold now.
  void pull() { coord_.pull_into(model_, ps_, versions_); }
  // Pushes one gradient per trainable variable (get_weights' order) to the ps tasks, each shard
  // to its ps, tagged with this call's batch: a ps applies a batch's gradient once. Returns the
  // staleness (the most updates a ps had applied since the pull).
  std::uint64_t push_gradients(std::vector<std::vector<float>> grads) {
    staleness_ = std::max(staleness_, coord_.push(ps_, std::move(grads), index_, versions_));
    return staleness_;
  }
  [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }

 private:
  friend class cluster_coordinator<Model, Dataset>;
  worker_context(cluster_coordinator<Model, Dataset>& c, Model& m,
                 std::vector<std::unique_ptr<connection>>& ps, std::uint64_t index,
                 const element_type& batch)
      : coord_(c), model_(m), ps_(ps), index_(index), batch_(batch) {}
  cluster_coordinator<Model, Dataset>& coord_;
  Model& model_;
  std::vector<std::unique_ptr<connection>>& ps_;
  std::uint64_t index_;
  const element_type& batch_;
  std::vector<pulled> versions_;
  std::uint64_t staleness_ = 0;
};

// The ClusterCoordinator, and the loops of the ps and worker tasks. Model is a one-device
// tessel model whose weights are all trainable; Dataset a tessel::dataset of batches that every
// worker builds alike (each batch is found by its index in the data set, repeated).
template <class Model, class Dataset>
class cluster_coordinator {
 public:
  cluster_coordinator(parameter_server_strategy& s, Model& model, std::function<Dataset()> fn = {})
      : strategy_(s), model_(model), dataset_fn_(std::move(fn)) {
    for (const auto* v : model_.trainable_variables()) {
      names_.push_back(v->path);
      shapes_.push_back(v->shape);
    }
    const std::size_t non_trainable = model_.non_trainable_variables().size();
    if (non_trainable > 0)
      throw value_error("ParameterServerStrategy: the model has " + std::to_string(non_trainable) +
                        " non-trainable weights (batch normalization's statistics); the ps tasks "
                        "hold trainable variables only, so train this model with "
                        "mirrored_strategy or multi_worker_mirrored_strategy");
    placement_ = place(shapes_, names_, s.options().variable_partitioner, s.num_ps());
    // The training step: train_on_batch's loss and gradients (compute_loss_and_gradients), then
    // the gradients to the ps tasks instead of the model's own optimizer.
    define([](worker_context<Model, Dataset>& ctx) {
      ctx.pull();
      auto& m = ctx.model();
      const double loss = m.compute_loss_and_gradients(ctx.batch().first, ctx.batch().second);
      ctx.push_gradients(gradients_of(m));
      return loss;
    });
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

  // A function the chief can schedule on the workers: fn(context) returns a number (a loss),
  // which the remote_value gives. Define the same functions in the same order on every task
  // (the program is the same): the id is the place in that order. Function 0, defined by the
  // constructor, is the training step: pull, the loss and gradients of the batch, push.
  using function = std::function<double(worker_context<Model, Dataset>&)>;
  std::size_t define(function fn) {
    functions_.push_back(std::move(fn));
    return functions_.size() - 1;
  }
  static constexpr std::size_t train_step = 0;

  // On a ps or worker task: serves until the chief ends the job; returns the exit status.
  int serve() {
    const cluster_spec& c = strategy_.cluster();
    if (c.task_type == role::ps)
      return serve_ps(c, {.orphan_timeout = strategy_.options().chief_timeout});
    if (c.task_type == role::worker) return serve_worker();
    throw value_error("cluster_coordinator::serve: the chief schedules; it does not serve");
  }

  // coordinator.schedule(fn): function `fn` (train_step unless given) on the next batch, run on
  // some free worker; returns at once.
  remote_value schedule(std::size_t fn = train_step) {
    if (fn >= functions_.size())
      throw value_error("schedule: no function " + std::to_string(fn) + "; " +
                        std::to_string(functions_.size()) + " are defined");
    auto st = std::make_shared<remote_value::state>();
    pending_.push_back({next_index_++, fn, st});
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
        throw value_error(
            "fit: the dataset's size is unknown (or infinite); give "
            "steps_per_epoch, as ParameterServerStrategy requires");
      steps = *n;
    }
    history h;
    h.on_train_begin({});
    std::size_t first_epoch = 0;
    if (o.backup_dir) {
      first_epoch = restore_backup(*o.backup_dir, steps);
      // A backup from the start, so that a ps lost in the first epoch can be given one.
      if (first_epoch == 0) save_backup(*o.backup_dir, 0, steps);
    }
    struct recovering {
      bool& flag;
      ~recovering() { flag = false; }
    } during{recovering_ = o.backup_dir.has_value()};
    for (;;) {
      try {
        run_epochs(o, h, first_epoch, steps);
        break;
      } catch (const ps_lost& lost) {
        first_epoch = recover(lost, *o.backup_dir, steps);
      }
    }
    pull_into_model();
    if (o.backup_dir) remove_backup(*o.backup_dir);
    return h;
  }

 private:
  // fit's epochs from `first` on.
  void run_epochs(const ps_fit_options<Dataset>& o, history& h, std::size_t first,
                  std::size_t steps) {
    for (std::size_t e = first; e < o.epochs; ++e) {
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
      if (o.backup_dir) save_backup(*o.backup_dir, e + 1, steps);
      if (o.on_epoch_end) o.on_epoch_end(e, epoch_logs);
    }
  }

  // A ps lost during fit with a backup: waits up to connect_timeout for it to start again (a
  // cluster manager restarts it at its address), gives every ps the backup's state, and returns
  // the epochs the backup had done. The batches since the backup are trained again, once each.
  std::size_t recover(const ps_lost& lost, const std::filesystem::path& dir, std::size_t steps) {
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
    const std::size_t done = restore_backup(dir, steps);
    std::erase_if(stats_.trained, [&](std::uint64_t g) { return g >= next_index_; });
    for (auto& [index, w] : workers_) w.last_seen = clock::now();
    std::printf("chief: %s is back with the backup's variables; training goes on from epoch %zu\n",
                p.name().c_str(), done + 1);
    std::fflush(stdout);
    return done;
  }

 public:
  // The chief's model gets the variables the ps tasks hold now.
  void pull_into_model() { model_.set_weights(pull(chief_ps_)); }

  // Ends the job: the workers and the ps tasks are told to stop.
  void shutdown() {
    if (!strategy_.is_chief() || finished_) return;
    finished_ = true;
    stats();
    stop_tasks(std::chrono::milliseconds(2000));
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
    std::size_t function;
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
    create_variables();
    last_ps_check_ = clock::now();
  }

  // The chief's model's values, partitioned, to their ps tasks (which start over: no optimizer
  // state, no batches applied, a new generation: pushes computed before are refused).
  void create_variables() {
    struct next_generation {
      std::uint64_t& g;
      ~next_generation() { ++g; }
    } advance{generation_};
    const auto weights = model_.get_weights();
    for (int p = 0; p < strategy_.num_ps(); ++p) {
      nlohmann::json shards = nlohmann::json::array();
      message m;
      m.h.what = kind::create;
      m.h.a = generation_ + 1;
      m.frames.emplace_back();
      for (const std::size_t i : placement_.shards_of(p)) {
        const shard_placement& s = placement_.shards[i];
        std::vector<std::size_t> shape = shapes_[s.variable];
        if (!shape.empty()) shape[0] = s.rows;
        shards.push_back(
            {{"path", names_[s.variable] + "/shard_" + std::to_string(s.shard)}, {"shape", shape}});
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        m.frames.push_back(frame_of(std::span<const float>(
            weights[s.variable].values.data() + s.first_row * per_row, s.values)));
      }
      const nlohmann::json description = {{"optimizer", to_json(model_.get_optimizer().spec())},
                                          {"shards", shards}};
      m.frames[0] = frame_of(description.dump());
      (void)chief_ps_[static_cast<std::size_t>(p)]->call(std::move(m),
                                                         strategy_.options().ps_timeout);
    }
  }

  // ---- checkpoints ------------------------------------------------------------------------------

  // The chief model's optimizer's state (Keras's optimizer.variables: the iteration, the learning
  // rate, then each variable's slots), its slots built first.
  auto optimizer_state() {
    auto& o = model_.get_optimizer();
    o.build(model_.trainable_variables());
    return o.state();
  }

  // The ps tasks' variables and optimizer state put together in the chief's model: its weights,
  // and its optimizer's slots at full size (each variable's shards along dimension 0).
  void pull_state_into_model() {
    model_.set_weights(pull(chief_ps_));
    auto opt = optimizer_state();
    using B = decltype(backend_of(model_));
    const std::size_t k = shapes_.empty() ? 0 : (opt.size() - 2) / shapes_.size();
    std::vector<std::vector<float>> slots(shapes_.size() * k);
    for (std::size_t i = 0; i < slots.size(); ++i) slots[i].resize(opt[2 + i].tensor().size());
    for (std::size_t p = 0; p < chief_ps_.size(); ++p) {
      message m;
      m.h.what = kind::state;
      const message r = chief_ps_[p]->call(std::move(m), strategy_.options().ps_timeout);
      const auto mine = placement_.shards_of(static_cast<int>(p));
      if (r.frames.size() != 1 + mine.size() * (1 + k))
        throw task_lost(chief_ps_[p]->name() + " at " + chief_ps_[p]->address() +
                        " sent a state of " + std::to_string(r.frames.size()) + " frames");
      if (p == 0) {
        opt[0].value = static_cast<std::int64_t>(r.h.a);
        opt[1].value = nlohmann::json::parse(text_of(r.frames[0]))["learning_rate"].get<double>();
      }
      for (std::size_t q = 0; q < mine.size(); ++q) {
        const shard_placement& s = placement_.shards[mine[q]];
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        for (std::size_t j = 0; j < k; ++j) {
          const auto values = floats_of(r.frames[1 + mine.size() + q * k + j]);
          std::copy(values.begin(), values.end(),
                    slots[s.variable * k + j].begin() +
                        static_cast<std::ptrdiff_t>(s.first_row * per_row));
        }
      }
    }
    for (std::size_t i = 0; i < slots.size(); ++i)
      B::upload(std::span<const float>(slots[i]), opt[2 + i].tensor().local());
    model_.get_optimizer().set_state(opt, "BackupAndRestore");
  }

  // The chief model's weights and optimizer state to the ps tasks, each its shards.
  void push_state_from_model() {
    create_variables();
    const auto opt = optimizer_state();
    const std::size_t k = shapes_.empty() ? 0 : (opt.size() - 2) / shapes_.size();
    auto weights = std::make_shared<const std::vector<array<float>>>(model_.get_weights());
    std::vector<std::vector<float>> slots;
    for (std::size_t i = 2; i < opt.size(); ++i) slots.push_back(opt[i].numpy());
    for (std::size_t p = 0; p < chief_ps_.size(); ++p) {
      message m;
      m.h.what = kind::restore;
      m.h.a = static_cast<std::uint64_t>(opt[0].integer());
      m.frames.push_back(frame_of(nlohmann::json{{"learning_rate", opt[1].real()}}.dump()));
      const auto mine = placement_.shards_of(static_cast<int>(p));
      for (const std::size_t i : mine) {
        const shard_placement& s = placement_.shards[i];
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        m.frames.push_back(frame_of(std::span<const float>(
            (*weights)[s.variable].values.data() + s.first_row * per_row, s.values)));
      }
      for (const std::size_t i : mine) {
        const shard_placement& s = placement_.shards[i];
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        for (std::size_t j = 0; j < k; ++j)
          m.frames.push_back(frame_of(std::span<const float>(
              slots[s.variable * k + j].data() + s.first_row * per_row, s.values)));
      }
      (void)chief_ps_[p]->call(std::move(m), strategy_.options().ps_timeout);
    }
  }

  static std::filesystem::path backup_weights(const std::filesystem::path& dir) {
    return dir / "checkpoint.weights.h5";
  }
  static std::filesystem::path backup_position(const std::filesystem::path& dir) {
    return dir / "position.json";
  }
  void save_backup(const std::filesystem::path& dir, std::size_t epochs_done, std::size_t steps) {
    pull_state_into_model();
    std::filesystem::create_directories(dir);
    model_.save_weights(backup_weights(dir).string());
    const std::filesystem::path tmp = dir / "position.json.tmp";
    {
      std::ofstream out(tmp);
      out << nlohmann::json{{"epochs_done", epochs_done},
                            {"steps_per_epoch", steps},
                            {"next_index", next_index_}}
                 .dump()
          << "\n";
      if (!out) throw value_error("BackupAndRestore: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, backup_position(dir));
  }
  // Resumes from a backup when `dir` holds one: returns the epochs it had done (0 without one).
  std::size_t restore_backup(const std::filesystem::path& dir, std::size_t steps) {
    if (!std::filesystem::exists(backup_position(dir))) return 0;
    std::ifstream in(backup_position(dir));
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.contains("epochs_done") || !j.contains("next_index") ||
        !j.contains("steps_per_epoch"))
      throw value_error("BackupAndRestore: " + backup_position(dir).string() +
                        " is not a backup this library wrote; give another backup_dir");
    if (j["steps_per_epoch"].get<std::size_t>() != steps)
      throw value_error("BackupAndRestore: the backup in " + dir.string() + " was made with " +
                        std::to_string(j["steps_per_epoch"].get<std::size_t>()) +
                        " steps per epoch, this fit has " + std::to_string(steps) +
                        "; give the same steps_per_epoch, or another backup_dir");
    model_.load_weights(backup_weights(dir).string());
    push_state_from_model();
    next_index_ = j["next_index"].get<std::uint64_t>();
    const auto done = j["epochs_done"].get<std::size_t>();
    std::printf("chief: restored the backup in %s: %zu epochs done, resuming at batch %llu\n",
                dir.string().c_str(), done, static_cast<unsigned long long>(next_index_));
    std::fflush(stdout);
    return done;
  }
  // Keras's BackupAndRestore deletes its backup when training completes: here the two files
  // written above, and nothing else (the directory stays: it may not be this library's).
  static void remove_backup(const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::remove(backup_weights(dir), ec);
    std::filesystem::remove(backup_position(dir), ec);
  }

  // A connection to every ps task, each answering within connect_timeout.
  std::vector<std::unique_ptr<connection>> connect_ps() {
    const cluster_spec& c = strategy_.cluster();
    std::vector<std::unique_ptr<connection>> out;
    for (int p = 0; p < c.num_ps(); ++p) {
      out.push_back(std::make_unique<connection>(
          ctx_, c.ps[static_cast<std::size_t>(p)],
          cluster_spec::task_name(role::ps, static_cast<std::size_t>(p)),
          strategy_.is_chief() ? chief_routing_id : std::string{}));
      out.back()->connect(strategy_.options().connect_timeout);
    }
    return out;
  }

  // Every shard from every ps, put together into the variables (get_weights' order); the ps
  // tasks' versions and generations in `versions`. A ps that does not answer is ps_lost.
  std::vector<array<float>> pull(std::vector<std::unique_ptr<connection>>& ps,
                                 std::vector<pulled>* versions = nullptr) {
    std::vector<array<float>> w;
    for (const auto& s : shapes_) w.emplace_back(s);
    if (versions) versions->assign(ps.size(), pulled{});
    for (std::size_t p = 0; p < ps.size(); ++p) {
      message m;
      m.h.what = kind::pull;
      const message r = call_ps(ps, p, std::move(m));
      if (versions) (*versions)[p] = {r.h.a, r.h.b};
      const auto mine = placement_.shards_of(static_cast<int>(p));
      if (r.frames.size() != mine.size())
        throw ps_lost(p, ps[p]->name() + " at " + ps[p]->address() + " holds " +
                             std::to_string(r.frames.size()) + " shards, not the " +
                             std::to_string(mine.size()) + " placed there (restarted?)");
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const shard_placement& s = placement_.shards[mine[k]];
        const auto values = floats_of(r.frames[k]);
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        std::copy(
            values.begin(), values.end(),
            w[s.variable].values.begin() + static_cast<std::ptrdiff_t>(s.first_row * per_row));
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
        message no = failure(m,
                             "this worker's dataset differs from the first worker's (its "
                             "facts' checksum); every worker must build the same dataset");
        send(*router_, no, &identity);
        return;
      }
      fingerprint_ = m.h.b;
      if (w.busy) {  // it died and came back before it was found lost
        ++stats_.workers_lost;
        std::printf(
            "chief: worker %zu at %s started again while its batch %llu was in flight; "
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
      // A failure of a batch the worker no longer holds (given to another after a lost ps) is
      // old news.
      auto it = workers_.find(index);
      if (it == workers_.end() || !it->second.busy || it->second.current.index != m.h.b) return;
      const std::string why = m.frames.empty() ? "" : text_of(m.frames[0]);
      if (m.h.c > 0)
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
      if (w.busy && w.current.index == batch) {
        w.busy = false;
        double values[2] = {0, 0};
        if (!m.frames.empty() && m.frames[0].size() == sizeof values)
          std::memcpy(values, m.frames[0].data(), sizeof values);
        w.current.result->loss = values[0];
        w.current.result->staleness = static_cast<std::uint64_t>(values[1]);
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
      m.h.a = w.current.function;
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

  // Tells every worker and ps task to stop, waiting up to `wait` for each ps to confirm.
  void stop_tasks(std::chrono::milliseconds wait) {
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

  // A ps task lost: during a fit with a backup, ps_lost (fit waits for the ps to start again and
  // resumes from the backup); otherwise the job ends.
  [[noreturn]] void lost_ps(std::size_t p, const std::string& why) {
    if (recovering_) throw ps_lost(p, why);
    end_job(why +
            "; its variables are lost, so the job ends. Start the cluster again: with "
            "checkpoints it resumes from the last one");
  }

  // Stops the workers and the ps tasks that still answer, and throws task_lost saying why (the
  // one message: the program prints it, or the runtime does when it is not caught).
  [[noreturn]] void end_job(const std::string& why) {
    finished_ = true;
    stop_tasks(std::chrono::milliseconds(500));
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
      throw value_error(
          "worker: no dataset; call create_per_worker_dataset(fn) on every task "
          "before serve()");
    cursor data{dataset_fn_(), 0, std::nullopt, 0, 0};
    const auto n = data.ds.cardinality();
    if (!n || *n == 0 || *n == data::infinite_cardinality)
      throw value_error(
          "worker: the dataset's size must be known and finite (batches are found "
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
          if (m->h.a >= functions_.size())
            throw value_error("the chief scheduled function " + std::to_string(m->h.a) +
                              ", but this worker defines " + std::to_string(functions_.size()) +
                              "; define the same functions on every task");
          if (callbacks_.on_train_batch_begin) callbacks_.on_train_batch_begin(m->h.d);
          worker_context<Model, Dataset> ctx(*this, model_, ps, m->h.d, data.at(m->h.d));
          const double result = functions_[m->h.a](ctx);
          if (callbacks_.on_train_batch_end) callbacks_.on_train_batch_end(m->h.d);
          const double values[2] = {result, static_cast<double>(ctx.staleness())};
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

  friend class worker_context<Model, Dataset>;

  template <class B>
  static B backend_of_variable(const variable<B>*);
  template <class M>
  static auto backend_of(M& m) -> decltype(backend_of_variable(m.trainable_variables()[0]));
  // The gradients compute_loss_and_gradients left in the model's trainable variables.
  static std::vector<std::vector<float>> gradients_of(Model& m) {
    using B = decltype(backend_of(m));
    std::vector<std::vector<float>> out;
    for (const auto* v : m.trainable_variables()) {
      out.emplace_back(v->value.size());
      B::download(v->gradient, std::span<float>(out.back()));
    }
    return out;
  }

  // A request to ps task p; one that does not answer within ps_timeout is ps_lost.
  message call_ps(std::vector<std::unique_ptr<connection>>& ps, std::size_t p, message m) {
    try {
      return ps[p]->call(std::move(m), strategy_.options().ps_timeout);
    } catch (const ps_lost&) {
      throw;
    } catch (const task_lost& e) {
      throw ps_lost(p, e.what());
    }
  }

  // A model gets the ps tasks' variables; `versions` their versions.
  void pull_into(Model& m, std::vector<std::unique_ptr<connection>>& ps,
                 std::vector<pulled>& versions) {
    m.set_weights(pull(ps, &versions));
  }
  // Each shard of `grads` to its ps, tagged with batch g and the versions pulled; returns the
  // most staleness over the ps tasks.
  std::uint64_t push(std::vector<std::unique_ptr<connection>>& ps,
                     std::vector<std::vector<float>> gradients, std::uint64_t g,
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
      if (p < versions.size()) {
        m.h.b = versions[p].generation;
        m.h.c = versions[p].version;
      }
      for (const std::size_t i : placement_.shards_of(static_cast<int>(p))) {
        const shard_placement& s = placement_.shards[i];
        const std::size_t per_row = s.rows == 0 ? 0 : s.values / s.rows;
        m.frames.push_back(frame_of(grads[s.variable], s.first_row * per_row, s.values));
      }
      const message reply = call_ps(ps, p, std::move(m));
      staleness = std::max(staleness, reply.h.a);
    }
    return staleness;
  }

  parameter_server_strategy& strategy_;
  Model& model_;
  std::function<Dataset()> dataset_fn_;
  worker_callbacks callbacks_;
  std::vector<function> functions_;
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
  bool finished_ = false, recovering_ = false;
  std::uint64_t generation_ = 0;
};

}  // namespace tessel::ps
