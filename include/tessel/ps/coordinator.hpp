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
//   tessel::ps::cluster_coordinator<model_t, dataset_t> coord(strategy, model);
//   coord.create_per_worker_dataset([] { return make_dataset(); });
//   if (!strategy.is_chief()) return coord.serve();   // ps and workers serve until the end
//   const auto history = coord.fit({.epochs = 3, .steps_per_epoch = 100});
//
// What does not depend on the model (scheduling, failures, the transfers) is coordinator_core,
// compiled once in the tessel::ps library.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/agreement.hpp"
#include "../data/dataset.hpp"
#include "coordinator_core.hpp"
#include "server.hpp"

namespace tessel::ps {

template <class Dataset>
struct ps_fit_options {
  std::size_t epochs = 1;
  // Steps (batches) per epoch; 0: the dataset's cardinality, which must then be known.
  std::size_t steps_per_epoch = 0;
  int verbose = 1;
  // Evaluated on the chief at the end of each epoch, with the variables the ps tasks hold then
  // (logged as val_loss and the compiled metrics with val_).
  std::optional<Dataset> validation_data = std::nullopt;
  // Keras's BackupAndRestore(backup_dir) on the chief: at the start and the end of each epoch
  // the variables and the optimizer's state (gathered from the ps tasks into a Keras
  // .weights.h5 file) and the position; a fit that finds them resumes after the last epoch
  // saved, the ps tasks given the saved state. Its two files are removed when fit completes.
  std::optional<std::filesystem::path> backup_dir = std::nullopt;
  // Called on the chief after each epoch (after its backup): Keras's on_epoch_end.
  std::function<void(std::size_t, const logs&)> on_epoch_end = {};
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
  void pull() { model_.set_weights(core_.pull(ps_, &versions_)); }
  // Pushes one gradient per trainable variable (get_weights' order) to the ps tasks, each shard
  // to its ps, tagged with this call's batch: a ps applies a batch's gradient once. Returns the
  // staleness (the most updates a ps had applied since the pull).
  std::uint64_t push_gradients(std::vector<std::vector<float>> grads) {
    staleness_ = std::max(staleness_, core_.push(ps_, std::move(grads), index_, versions_));
    return staleness_;
  }
  [[nodiscard]] std::uint64_t staleness() const noexcept { return staleness_; }

  worker_context(coordinator_core& c, Model& m, std::vector<std::unique_ptr<connection>>& ps,
                 std::uint64_t index, const element_type& batch)
      : core_(c), model_(m), ps_(ps), index_(index), batch_(batch) {}

 private:
  coordinator_core& core_;
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
class cluster_coordinator : public coordinator_core {
 public:
  cluster_coordinator(parameter_server_strategy& s, Model& model, std::function<Dataset()> fn = {})
      : coordinator_core(s, names_of(checked(model)), shapes_of(model)),
        model_(model),
        dataset_fn_(std::move(fn)) {
    // The training step: train_on_batch's loss and gradients (compute_loss_and_gradients), then
    // the gradients (clipped by norm, where the optimizer says) to the ps tasks instead of the
    // model's own optimizer.
    // A batch whose loss is not finite pushes nothing (its gradient would be refused by the ps
    // tasks): the chief ends fit on its loss, as Keras's TerminateOnNaN does. Loss scaling would
    // test the gradients here too, skip the push and lower its scale.
    define([](worker_context<Model, Dataset>& ctx) {
      ctx.pull();
      auto& m = ctx.model();
      const double loss = m.compute_loss_and_gradients(ctx.batch().first, ctx.batch().second);
      if (!std::isfinite(loss)) return loss;
      // clipnorm and global_clipnorm need whole variables: the worker clips, the ps does not.
      if (m.get_optimizer().spec().config().clips_norms())
        m.get_optimizer().clip_gradients(m.trainable_variables());
      ctx.push_gradients(gradients_of(m));
      return loss;
    });
    if (strategy_.is_chief()) start_chief(model_.get_weights(), optimizer_json());
  }

  // coordinator.create_per_worker_dataset(fn): each worker builds its dataset with fn (the same
  // elements in the same order on every worker: a batch is found by its index). Call on every
  // process before serve() and fit().
  void create_per_worker_dataset(std::function<Dataset()> fn) { dataset_fn_ = std::move(fn); }

  // A function the chief can schedule on the workers: fn(context) returns a number (a loss),
  // which the remote_value gives. Define the same functions in the same order on every task
  // (the program is the same): the id is the place in that order. Function 0, defined by the
  // constructor, is the training step: pull, the loss and gradients of the batch, push.
  using function = std::function<double(worker_context<Model, Dataset>&)>;
  std::size_t define(function fn) {
    functions_.push_back(std::move(fn));
    function_count_ = functions_.size();
    return functions_.size() - 1;
  }

  // On a ps or worker task: serves until the chief ends the job; returns the exit status.
  int serve() {
    if (strategy_.task_type() == role::ps) return serve_ps_task();
    if (strategy_.task_type() == role::worker) return serve_worker();
    throw value_error("cluster_coordinator::serve: the chief schedules; it does not serve");
  }

  // model.fit under the strategy: epochs of steps_per_epoch batches, scheduled on the workers,
  // with Keras's progress bar; the history holds each epoch's mean loss and staleness. At the
  // end the chief's model holds the trained variables.
  history fit(const ps_fit_options<Dataset>& o) {
    fit_hooks hooks;
    hooks.epochs = o.epochs;
    hooks.steps = o.steps_per_epoch;
    hooks.verbose = o.verbose;
    hooks.backup_dir = o.backup_dir;
    hooks.on_epoch_end = o.on_epoch_end;
    if (hooks.steps == 0) {
      if (!dataset_fn_)
        throw value_error("fit: no dataset; call create_per_worker_dataset(fn) first");
      const auto n = dataset_fn_().cardinality();
      if (!n || *n == data::infinite_cardinality)
        throw value_error(
            "fit: the dataset's size is unknown (or infinite); give "
            "steps_per_epoch, as ParameterServerStrategy requires");
      hooks.steps = *n;
    }
    if (o.validation_data)
      hooks.validate = [&] {
        pull_into_model();
        logs out;
        for (const auto& [name, value] : model_.evaluate(*o.validation_data, 0))
          out.emplace_back("val_" + name, value);
        return out;
      };
    hooks.save_state = [&](const std::filesystem::path& dir) { save_state(dir); };
    hooks.restore_state = [&](const std::filesystem::path& dir) { restore_state(dir); };
    history h = fit_loop(hooks);
    pull_into_model();
    return h;
  }

  // The chief's model gets the variables the ps tasks hold now.
  void pull_into_model() { model_.set_weights(pull_variables()); }

 private:
  static std::vector<std::string> names_of(Model& m) {
    std::vector<std::string> out;
    for (const auto* v : m.trainable_variables()) out.push_back(v->path);
    return out;
  }
  static std::vector<std::vector<std::size_t>> shapes_of(Model& m) {
    std::vector<std::vector<std::size_t>> out;
    for (const auto* v : m.trainable_variables()) out.push_back(v->shape);
    return out;
  }
  template <class B>
  static B backend_of_variable(const variable<B>*);
  using backend = decltype(backend_of_variable(std::declval<Model&>().trainable_variables()[0]));

  // The model and optimizer the parameter servers can train, refused before anything connects.
  static Model& checked(Model& m) {
    const std::size_t non_trainable = m.non_trainable_variables().size();
    if (non_trainable > 0)
      throw value_error("ParameterServerStrategy: the model has " + std::to_string(non_trainable) +
                        " non-trainable weights (batch normalization's statistics); the ps tasks "
                        "hold trainable variables only, so train this model with "
                        "mirrored_strategy or multi_worker_mirrored_strategy");
    if (m.get_optimizer().spec().config().use_ema)
      throw value_error(
          "ParameterServerStrategy: the optimizer has use_ema; the ps tasks would keep the "
          "moving averages, but fit here does not take them back at its end (Keras's "
          "finalize_variable_values). Train with use_ema under mirrored_strategy or "
          "multi_worker_mirrored_strategy, or without it on the parameter servers");
    if (m.get_optimizer().spec().config().clips_norms() &&
        m.get_optimizer().spec().config().gradient_accumulation_steps > 0)
      throw value_error(
          "ParameterServerStrategy: the optimizer clips by norm (clipnorm or global_clipnorm) "
          "and accumulates gradients; Keras clips the accumulated mean, but a worker clips each "
          "gradient it pushes and the ps tasks accumulate. Use one of the two on the parameter "
          "servers, or train under mirrored_strategy");
    return m;
  }
  // The gradients compute_loss_and_gradients left in the model's trainable variables.
  static std::vector<std::vector<float>> gradients_of(Model& m) {
    std::vector<std::vector<float>> out;
    for (const auto* v : m.trainable_variables()) {
      out.emplace_back(v->value.size());
      backend::download(v->gradient, std::span<float>(out.back()));
    }
    return out;
  }

  nlohmann::json optimizer_json() {
    optimizers::config c = model_.get_optimizer().spec().config();
    c.exclude_from_weight_decay = model_.get_optimizer().weight_decay_exclusions();
    return ps::optimizer_json(c);
  }

  // ---- backups ----------------------------------------------------------------------------
  // The ps tasks' variables and optimizer state into the chief's model (its weights, and its
  // optimizer's slots at full size), written as a Keras .weights.h5 file.
  void save_state(const std::filesystem::path& dir) {
    auto& o = model_.get_optimizer();
    o.build(model_.trainable_variables());
    // the iteration, the learning rate (unless scheduled), each variable's slots, then the
    // optimizer's own scalar (derived from the iteration count)
    auto opt = o.state();
    const std::size_t c = o.counters();
    const std::size_t k = shapes_.empty() ? 0 : (opt.size() - c - o.scalars()) / shapes_.size();
    const full_state st = pull_state(k);
    model_.set_weights(st.weights);
    opt[0].value = st.iterations;
    if (c == 2) opt[1].value = st.learning_rate;
    for (std::size_t i = 0; i < st.slots.size(); ++i)
      backend::upload(std::span<const float>(st.slots[i]), opt[c + i].tensor().local());
    o.set_state(opt, "BackupAndRestore");
    std::filesystem::create_directories(dir);
    model_.save_weights(backup_weights(dir).string());
  }
  // A backup's variables and optimizer state, read into the chief's model and given to the ps
  // tasks.
  void restore_state(const std::filesystem::path& dir) {
    model_.load_weights(backup_weights(dir).string());
    auto& o = model_.get_optimizer();
    o.build(model_.trainable_variables());
    const auto opt = o.state();
    const std::size_t c = o.counters();
    full_state st{model_.get_weights(), {}, opt[0].integer(), o.learning_rate()};
    for (std::size_t i = c; i < opt.size() - o.scalars(); ++i) st.slots.push_back(opt[i].numpy());
    push_state(st, optimizer_json());
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
    return serve_worker_loop(h.result(), [&](std::size_t fn, std::uint64_t g, auto& ps) {
      worker_context<Model, Dataset> ctx(*this, model_, ps, g, data.at(g));
      const double result = functions_[fn](ctx);
      return std::pair{result, ctx.staleness()};
    });
  }

  Model& model_;
  std::function<Dataset()> dataset_fn_;
  std::vector<function> functions_;
};

}  // namespace tessel::ps
