// trainer: Keras's Trainer (keras/src/trainers/trainer.py) apart from the model — compile,
// fit / evaluate / predict, train_on_batch and the custom-training-loop pieces, callbacks and
// progress output, the batch split across the batch axis, the gradient buckets and the reduction
// of the loss and metric sums. It works on any model meeting `trainable_model` (sequential_model
// now, a functional model later) and adds its API to the model's: `trainer<M>` is an M.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "../core/explain.hpp"
#include "../core/layer_planner.hpp"
#include "../data/array.hpp"
#include "../data/dataset.hpp"
#include "../layers/layer.hpp"
#include "../losses.hpp"
#include "../metrics.hpp"
#include "callbacks.hpp"
#include "logs.hpp"
#include "progbar_logger.hpp"
#include "../model/sequential.hpp"
#include "../optimizers.hpp"
#include "../runtime/agreement.hpp"
#include "../runtime/collectives.hpp"
#include "../saving/checkpoint.hpp"
#include "../saving/model_weights.hpp"
#include "gradient_buckets.hpp"

namespace tessel {

// What a trainer needs of a model: its backend and mesh, its variables, its description for the
// planner, and a forward and backward pass on this process's rows of a batch.
template <class M>
concept trainable_model =
    requires(M& m, const M& cm, const array<float>& x, const typename M::matrix& dy) {
      typename M::backend;
      typename M::distribution;
      typename M::mesh_type;
      typename M::communicator_type;
      typename M::mesh_binding;
      typename M::matrix;
      { M::batch_axis } -> std::convertible_to<std::size_t>;
      { M::output_shape } -> std::convertible_to<shape_value>;
      { M::output_features } -> std::convertible_to<std::size_t>;
      { M::describe(loss_kind::none, std::size_t{1}) } -> std::same_as<model_desc>;
      { M::layer_name(std::size_t{0}) } -> std::convertible_to<std::string_view>;
      { M::model_parallel } -> std::convertible_to<bool>;
      { M::layer_count } -> std::convertible_to<std::size_t>;
      { cm.runs_plan_of(std::size_t{0}) } -> std::same_as<bool>;
      { cm.mesh() } -> std::same_as<const typename M::mesh_binding&>;
      { cm.seed() } -> std::convertible_to<std::uint64_t>;
      { cm.get_weights() } -> std::same_as<std::vector<array<float>>>;
      { m.trainable_variables() } -> std::same_as<std::vector<variable<typename M::backend>*>>;
      { m.get_variable(std::string_view{}) } -> std::same_as<variable<typename M::backend>&>;
      cm.check_input_shape(x);
      { m.forward_rows(x, std::size_t{}, std::size_t{}, std::size_t{}, std::size_t{}, true) }
          -> std::same_as<const basic_dtensor<typename M::backend>&>;
      m.backward(dy, [](std::span<variable<typename M::backend>* const>) {});
      m.set_training_step(m.training_step() + 1);
      m.resharding();  // the planned steps' executor: row reductions of split classes
      // the state as values (state.hpp)
      { cm.trainable_state() } -> std::same_as<state_list<typename M::backend>>;
      { cm.non_trainable_state() } -> std::same_as<state_list<typename M::backend>>;
      m.assign_state(cm.trainable_state(), cm.non_trainable_state());
    };

// A batch size as the caller wrote it: any integer type converts to it with its sign, so that -1
// reaches the check that refuses it (as a std::size_t it would wrap to 2^64 - 1 and run), and a
// std::size_t variable still converts in fit's designated initializers (where a conversion to
// std::int64_t would be a narrowing error). A count above INT64_MAX, more than any array's rows,
// is kept as INT64_MAX.
struct batch_size_arg {
  std::int64_t value;
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  constexpr batch_size_arg(I v) noexcept  // NOLINT(google-explicit-constructor)
      : value(std::in_range<std::int64_t>(v) ? static_cast<std::int64_t>(v)
                                             : std::numeric_limits<std::int64_t>::max()) {}
  constexpr operator std::int64_t() const noexcept {  // NOLINT(google-explicit-constructor)
    return value;
  }
};

// fit()'s keyword arguments, by Keras's names.
template <class Dataset>
struct fit_options {
  std::size_t epochs = 1;
  int verbose = 1;  // Keras's "auto" is 1
  std::vector<callback_ref> callbacks = {};
  std::optional<Dataset> validation_data = std::nullopt;
  std::size_t initial_epoch = 0;
};

template <trainable_model Model>
class trainer : public Model, public model_base {
  using B = typename Model::backend;
  using Dist = typename Model::distribution;

 public:
  using typename Model::backend;
  using typename Model::distribution;
  using typename Model::mesh_type;
  using typename Model::communicator_type;
  using typename Model::mesh_binding;
  using typename Model::matrix;
  using Model::output_shape;
  using Model::output_features;
  using Model::batch_axis;

  // Builds the model (its arguments are the model's) and plans a training step for it.
  template <class... Args>
  explicit trainer(Args&&... args) : Model(std::forward<Args>(args)...) {
    replan();
  }

  // ---- the model's state, for callbacks (model_base) ------------------------------------------
  std::vector<array<float>> get_weights() const override { return Model::get_weights(); }
  void set_weights(const std::vector<array<float>>& w) override { Model::set_weights(w); }
  bool is_chief() const override { return Model::is_chief(); }
  std::optional<bool> metric_increases(std::string_view name) const override {
    for (const auto& m : metrics_)
      if (m.name() == name) return m.increases();
    return std::nullopt;
  }
  void save_checkpoint(const std::string& dir, const std::string& metadata_json,
                       bool background = false) override {
    if (!background) {
      wait_for_checkpoint();
      tessel::save_checkpoint(*this, dir, checkpoint_detail::parse_metadata(metadata_json));
      return;
    }
    if (!async_) async_ = std::make_unique<async_checkpointer<trainer>>(*this);
    async_->save(dir, checkpoint_detail::parse_metadata(metadata_json));
  }
  void wait_for_checkpoint() override {
    if (async_) async_->wait();
  }
  // The background saves' times (the last one's), or null if none was made.
  const async_checkpointer<trainer>* background_checkpoints() const { return async_.get(); }
  std::string load_checkpoint(const std::string& dir) override {
    wait_for_checkpoint();
    return checkpoint_detail::metadata_text(tessel::load_checkpoint(*this, dir));
  }
  training_position position() const override { return position_; }
  void resume_from(const training_position& p) override { resume_ = p; }

  // ---- compile -------------------------------------------------------------------------------
  // compile()'s keyword arguments, with Keras's default optimizer.
  // A loss or metric is one of the library's, its Keras name, or any type of the protocols in
  // losses.hpp and metrics.hpp.
  struct compile_options {
    optimizer_spec optimizer = "rmsprop";
    loss_function<B> loss = losses::mean_squared_error{};
    std::vector<metrics::metric_arg<B>> metrics = {};
  };
  void compile(compile_options o) {
    compile(std::move(o.optimizer), std::move(o.loss), std::move(o.metrics));
  }
  void compile(optimizer_spec optimizer_, loss_function<B> loss,
               std::vector<metrics::metric_arg<B>> metric_list = {}) {
    optimizer_state_.emplace(std::move(optimizer_));
    loss_.emplace(std::move(loss));
    metrics_.clear();
    for (const auto& m : metric_list) metrics_.push_back(m.resolve(loss_->sparse_labels()));
    metric_means_.assign(metrics_.size(), metrics::mean{});
    sums_ = B::make_sums("loss_and_metric_sums", 1 + metrics_.size());
    for (std::size_t i = 0; i < metrics_.size(); ++i)
      metric_means_[i] = metrics::mean(metrics_[i].name());
    replan();
  }

  // ---- distribution ---------------------------------------------------------------------------
  // The communication plan of a training step (global batch unknown: bytes per sample unknown).
  const model_plan& plan() const noexcept { return plan_; }
  // The plan of a training step on a global batch of `global_batch`, as text: variables and
  // their layouts, and every collective with its mesh axis and bytes.
  std::string explain(std::size_t global_batch) const {
    const model_desc d = described();
    return tessel::explain(plan_model(Dist::value, pm().shape(), d, global_batch), d);
  }
  // Bucket size and overlap of the gradient reduction (DDP's bucket_cap_mb, default 25).
  // Gradient views taken before (copies of variable::gradient) do not follow the new buffer.
  void set_gradient_options(gradient_options o) {
    if (!(o.bucket_cap_mb > 0) || !std::isfinite(o.bucket_cap_mb))
      throw value_error("set_gradient_options: bucket_cap_mb must be a positive number of MB, "
                        "got " + std::to_string(o.bucket_cap_mb));
    grad_options_ = o;
    build_buckets(bucket_batch_);
  }
  const gradient_options& get_gradient_options() const noexcept { return grad_options_; }
  std::size_t gradient_bucket_count() const noexcept { return buckets_.size(); }
  // The communication since the last reset: the gradient buckets' timing and every collective
  // run, by kind and mesh axis with its bytes (the log of collectives() counted).
  tessel::communication_stats communication_stats() {
    tessel::communication_stats s = buckets_.stats();
    const collective_log& log = this->resharding().log();
    for (const auto& t : log.totals)
      s.collectives.push_back(
          {t.kind, std::string(pm().shape().names[t.axis].view()), t.count, t.bytes});
    return s;
  }
  void reset_communication_stats() {
    buckets_.reset_stats();
    this->resharding().log().clear();
  }
  optimizer<B>& get_optimizer() {
    require_compiled("get_optimizer");
    return *optimizer_state_;
  }

  // ---- saving (saving/model_weights.hpp) ------------------------------------------------------
  // Keras's model.save_weights(filepath) and model.load_weights(filepath): a .weights.h5 file in
  // Keras 3's layout, with the compiled optimizer's state; every process calls them.
  void save_weights(const std::string& filepath) override {
    saving::save_model_weights(saving::view_of(*this), compiled_optimizer(), filepath);
  }
  void load_weights(const std::string& filepath) {
    saving::load_model_weights(saving::view_of(*this), compiled_optimizer(), filepath);
  }
  // Keras's save_weights(filepath, max_shard_size=...): with a max_shard_size (GB), a
  // .weights.json and its .weights.h5 shards, as Keras writes them.
  void save_weights(const std::string& filepath, const saving::save_weights_options& options) {
    saving::save_model_weights(saving::view_of(*this), compiled_optimizer(), filepath, options);
  }
  // Keras's model.save(filepath): a .keras archive (saving/keras_archive.hpp) that
  // keras.saving.load_model rebuilds the model from, with its compile config and weights;
  // load_weights(filepath) reads it back into a model of the same type.
  void save(const std::string& filepath) override {
    std::optional<saving::compile_info> compiled;
    if (optimizer_state_ && loss_) {
      compiled = saving::compile_info{optimizer_state_->spec(), optimizer_state_->learning_rate(),
                                      std::string(loss_->name()), loss_->plan_kind(), {}};
      for (const auto& m : metrics_) compiled->metrics.push_back(m.name());
    }
    saving::save_model_archive(saving::view_of(*this), compiled_optimizer(),
                               compiled ? &*compiled : nullptr, filepath);
  }

  // ---- the custom-training-loop pieces ------------------------------------------------------
  // Loss of the batch and the gradient of every trainable variable (in variable::gradient), as
  // Keras's `compute_loss_and_updates` + `jax.grad` give them. Updates the compiled metrics.
  // On a distributed model x and y are the global batch: each process takes its block of rows
  // along the batch axis, and the gradients (reduced in buckets during the backward pass), the
  // loss and the metrics are those of the whole batch.
  template <class Y>
  double compute_loss_and_gradients(const array<float>& x, const array<Y>& y) {
    require_compiled("compute_loss_and_gradients");
    return loss_and_gradients(x, y, true);
  }
  // The loss and gradients of one batch, the forward pass in training or inference mode (the
  // gradient of what the model computes in that mode: batch normalization with its moving
  // statistics, dropout off, no new random draws, when not training).
  template <class Y>
  double loss_and_gradients(const array<float>& x, const array<Y>& y, bool training) {
    if (!agreed_) {
      agreed_ = true;
      std::vector<fact> f = model_facts();
      f.push_back(fact::number("the global batch (x's rows)", x.rows()));
      f.push_back(fact::fingerprint("the shape of x", shape_fingerprint(x.shape)));
      f.push_back(fact::fingerprint("the shape of y", shape_fingerprint(y.shape)));
      agree("train_on_batch", f);
    }
    buckets_for(x.rows());
    const std::size_t global = forward_and_loss(x, y, training);
    buckets_.begin();
    this->backward(loss_grad_, [this](std::span<variable<B>* const> layer_variables) {
      if (buckets_.empty()) return;
      for (const variable<B>* v : layer_variables) buckets_.ready(v);
      buckets_.progress();
    });
    buckets_.finish();
    // The next training call draws new dropout masks, as Keras's seed generator.
    if (training) this->set_training_step(this->training_step() + 1);
    return finish_metrics(global);
  }
  // One optimizer step on the gradients computed last (Keras's optimizer.apply).
  void apply_gradients() {
    require_compiled("apply_gradients");
    optimizer_state_->apply(this->trainable_variables());
  }
  // One training step on one batch. As in Keras, the metrics are reset first unless
  // reset_metrics is false, so the logs are this batch's loss (before the update) and metrics.
  template <class Y>
  logs train_on_batch(const array<float>& x, const array<Y>& y, bool reset_metrics = true) {
    if (reset_metrics) this->reset_metrics();
    compute_loss_and_gradients(x, y);
    apply_gradients();
    return metric_logs();
  }

  // ---- the training state as one value, and Keras's stateless pieces (state.hpp) --------
  // Keras's get_state_tree(): copies of the trainable and non-trainable variables (the random
  // stream's counter last), the optimizer's variables (built here if no step has built them) and
  // the metric accumulators ("loss/total", "loss/count", then each metric's), each with its path.
  // Before compile() the optimizer and metric groups are empty.
  state_tree<B> get_state_tree() { return state_tree_of(true); }
  // get_state_tree() without the copies: the model's and the optimizer's own memory, valid until
  // the next step or set_state_tree (a checkpoint's snapshot copies out of it once).
  state_tree<B> state_tree_view() { return state_tree_of(false); }
  // Keras's set_state_tree(): writes a state back into the model, its optimizer and its
  // metrics. Every group is checked against the model's (paths, dtypes, shapes, layouts) before
  // anything changes; a group that is empty is left as it is.
  void set_state_tree(const state_tree<B>& t) {
    const bool optimizer = !t.optimizer_variables.empty(), metrics = !t.metrics_variables.empty();
    if ((optimizer || metrics) && !loss_)
      throw value_error("set_state_tree: the state has optimizer or metric variables, but the "
                        "model is not compiled; call compile() as for the state's model first.");
    detail::on_every_process(pm(), "set_state_tree", [&] {
      if (optimizer) {
        optimizer_state_->build(this->trainable_variables());
        optimizer_state_->check_state(t.optimizer_variables);
      }
      if (metrics)
        detail::check_state_list(metrics_state(), t.metrics_variables, "set_state_tree",
                                 "metrics_variables");
    });
    this->assign_state(t.trainable_variables, t.non_trainable_variables);
    if (optimizer) optimizer_state_->set_state(t.optimizer_variables);
    if (metrics) {
      std::size_t i = 0;
      auto set = [&](metrics::mean& m) {
        m.set_state(t.metrics_variables[i].real(), t.metrics_variables[i + 1].real());
        i += 2;
      };
      set(loss_tracker_);
      for (auto& m : metric_means_) set(m);
    }
  }

  // Keras's model.stateless_call(trainable_variables, non_trainable_variables, x, training): the
  // model's output on x with these values, and the non-trainable values after the call (the
  // random stream's counter one more after a training call); the model's own state unchanged.
  // x is the global batch: the output is this process's block of it, a sharded tensor.
  struct stateless_call_result {
    basic_dtensor<B> y_pred;
    state_list<B> non_trainable_variables;
  };
  stateless_call_result stateless_call(const state_list<B>& trainable,
                                       const state_list<B>& non_trainable, const array<float>& x,
                                       bool training = false) {
    if (x.rows() == 0)
      throw value_error("stateless_call: x has no samples (shape " + shape_to_string(x.shape) +
                        "); pass at least one.");
    this->check_input_shape(x);
    return this->with_state(trainable, non_trainable, "stateless_call", [&] {
      const shard s = shard_of(x.rows());
      stateless_call_result r{
          copy_of(this->forward_rows(x, 0, s.first, s.local, s.global, training), "y_pred"), {}};
      if (training) this->set_training_step(this->training_step() + 1);
      r.non_trainable_variables = this->non_trainable_state();
      return r;
    });
  }
  // The value and gradient of the compiled loss with these values (Keras's
  // compute_loss_and_updates under jax.value_and_grad, has_aux): the batch's mean loss, the
  // gradient of every trainable variable (its path and layout; under data_parallel reduced over
  // the batch axis, as train_on_batch's), and the non-trainable values after the call. The
  // model's state and the compiled metrics are unchanged. x and y are the global batch.
  // `training` is the forward pass's mode, as stateless_call's: false differentiates the
  // inference computation (moving statistics, no dropout), as a loop whose loss calls
  // stateless_call without training=True does (seeds/002's).
  struct value_and_grad_result {
    double loss = 0;
    state_list<B> grads;
    state_list<B> non_trainable_variables;
  };
  template <class Y>
  value_and_grad_result value_and_grad(const state_list<B>& trainable,
                                       const state_list<B>& non_trainable, const array<float>& x,
                                       const array<Y>& y, bool training = true) {
    require_compiled("value_and_grad");
    const metrics::mean loss_tracker = loss_tracker_;
    const std::vector<metrics::mean> means = metric_means_;
    struct restore_metrics {
      trainer* t;
      const metrics::mean& loss;
      const std::vector<metrics::mean>& means;
      ~restore_metrics() {
        t->loss_tracker_ = loss;
        t->metric_means_ = means;
      }
    } guard{this, loss_tracker, means};
    return this->with_state(trainable, non_trainable, "value_and_grad", [&] {
      value_and_grad_result r;
      r.loss = loss_and_gradients(x, y, training);
      for (variable<B>* v : this->trainable_variables())
        r.grads.push_back({v->path, v->shape, copy_of(v->value.like(v->gradient), v->path)});
      r.non_trainable_variables = this->non_trainable_state();
      return r;
    });
  }

  logs metric_logs() const {
    logs l{{"loss", loss_tracker_.result()}};
    for (const auto& m : metric_means_) l.emplace_back(m.name(), m.result());
    return l;
  }
  void reset_metrics() {
    loss_tracker_.reset_state();
    for (auto& m : metric_means_) m.reset_state();
  }

  // ---- fit / evaluate / predict -------------------------------------------------------------
  template <class Dataset>
  history fit(const Dataset& train, const fit_options<Dataset>& o = {}) {
    require_compiled("fit");
    {
      std::vector<fact> f = model_facts();
      const std::vector<fact> data = train.facts();
      f.insert(f.end(), data.begin(), data.end());
      f.push_back(fact::number("fit's epochs", o.epochs));
      f.push_back(fact::number("fit's initial_epoch", o.initial_epoch));
      f.push_back(fact::number("fit's validation_data (given)", o.validation_data ? 1 : 0));
      if (o.validation_data) {
        const std::vector<fact> v = o.validation_data->facts("validation_data: ");
        f.insert(f.end(), v.begin(), v.end());
      }
      agree("fit", f);
      agreed_ = true;
    }
    history hist;
    std::vector<callback*> cbs{&hist};
    for (const auto& c : o.callbacks) cbs.push_back(c.get());
    for (callback* c : cbs) c->set_model(this);
    const int verbose = shown_verbosity(o.verbose);
    if (known_steps(train) == std::size_t{0}) throw empty_data("fit", "the training data", "train on");
    progbar_logger bar(verbose, o.epochs, known_steps(train));
    stop_training = false;
    bar.on_train_begin();
    resume_.reset();
    position_ = {o.initial_epoch, 0, passes_of(train)};
    // A callback that fails here (csv_logger's file, on process 0 only) fails fit() on every
    // process, so that none goes on to wait in a training step for the others.
    detail::on_every_process(pm(), "a callback's on_train_begin", [&] {
      for (callback* c : cbs) c->on_train_begin({});
    });
    // A callback that restored a checkpoint (backup_and_restore) asked to go on from its
    // position: that epoch, drawing its order again, past the batches already done.
    std::size_t first_epoch = o.initial_epoch, done = 0;
    if (resume_) {
      first_epoch = resume_->epoch;
      done = resume_->step;
      if constexpr (requires { train.set_iterations(resume_->data_pass); })
        train.set_iterations(resume_->data_pass);
    }
    logs epoch_logs;
    for (std::size_t epoch = first_epoch; epoch < o.epochs && !stop_training; ++epoch) {
      const std::size_t skip = epoch == first_epoch ? done : 0;
      if (skip == 0) reset_metrics();  // else the checkpoint's accumulators go on
      position_ = {epoch, skip, passes_of(train)};
      if (verbose) bar.on_epoch_begin(epoch);
      for (callback* c : cbs) c->on_epoch_begin(epoch, {});
      std::size_t step = 0;
      for (const auto& element : train) {
        if (step < skip) {  // trained before the checkpoint
          ++step;
          continue;
        }
        const auto& [x, y] = element;
        for (callback* c : cbs) c->on_train_batch_begin(step, {});
        const logs l = train_on_batch(x, y, false);
        position_.step = step + 1;
        if (verbose) bar.on_train_batch_end(step, sorted_logs(l));
        for (callback* c : cbs) c->on_train_batch_end(step, l);
        ++step;
        if (stop_training) break;
      }
      if (step == 0) throw empty_data("fit", "the training data", "train on");
      position_ = {epoch + 1, 0, passes_of(train)};
      epoch_logs = metric_logs();
      if (o.validation_data) {
        const logs v = run_evaluate(*o.validation_data, nullptr, cbs, true);
        for (const auto& [k, val] : v) epoch_logs.emplace_back("val_" + k, val);
      }
      const logs shown = sorted_logs(epoch_logs);
      if (verbose) bar.on_epoch_end(epoch, shown);
      for (callback* c : cbs) c->on_epoch_end(epoch, shown);
    }
    for (callback* c : cbs) c->on_train_end(epoch_logs);
    wait_for_checkpoint();  // a save in the background ends with fit
    return hist;
  }

  // fit(x, y, batch_size=32, shuffle=True, ...) on arrays, as Keras's fit takes NumPy arrays.
  struct array_fit_options {
    batch_size_arg batch_size = 32;
    std::size_t epochs = 1;
    int verbose = 1;
    std::vector<callback_ref> callbacks = {};
    bool shuffle = true;
    std::size_t initial_epoch = 0;
  };
  template <class Y>
  history fit(const array<float>& x, const array<Y>& y, const array_fit_options& o) {
    check_batch_size("fit", o.batch_size);
    auto ds = from_tensor_slices(x, y);
    if (x.rows() == 0) throw empty_data("fit", "x", "train on");
    auto batched =
        o.shuffle
            ? ds.shuffle(static_cast<std::int64_t>(x.rows()), this->seed()).batch(o.batch_size)
            : ds.batch(o.batch_size);
    return fit(batched, fit_options<decltype(batched)>{.epochs = o.epochs,
                                                        .verbose = o.verbose,
                                                        .callbacks = o.callbacks,
                                                        .validation_data = std::nullopt,
                                                        .initial_epoch = o.initial_epoch});
  }
  template <class Y>
  logs evaluate(const array<float>& x, const array<Y>& y, std::int64_t batch_size = 32,
                int verbose = 1) {
    check_batch_size("evaluate", batch_size);
    return evaluate(from_tensor_slices(x, y).batch(batch_size), verbose);
  }

  // Returns the loss and metrics over the whole dataset (Keras's evaluate with return_dict).
  template <class Dataset>
  logs evaluate(const Dataset& data, int verbose = 1, std::vector<callback_ref> callbacks = {}) {
    require_compiled("evaluate");
    {
      std::vector<fact> f = model_facts();
      const std::vector<fact> d = data.facts();
      f.insert(f.end(), d.begin(), d.end());
      agree("evaluate", f);
    }
    std::vector<callback*> cbs;
    for (const auto& c : callbacks) cbs.push_back(c.get());
    for (callback* c : cbs) c->set_model(this);
    if (known_steps(data) == std::size_t{0}) throw empty_data("evaluate", "the data", "evaluate");
    std::optional<progbar_logger> bar;
    verbose = shown_verbosity(verbose);
    if (verbose) bar.emplace(verbose, 1, known_steps(data));
    return run_evaluate(data, bar ? &*bar : nullptr, cbs, false);
  }

  // The model's outputs for every sample of x, batch by batch (Keras's predict). On a
  // distributed model each process computes its block of every batch and every process gets
  // the whole result.
  array<float> predict(const array<float>& x, std::int64_t batch_size = 32, int verbose = 0) {
    check_batch_size("predict", batch_size);
    this->check_input_shape(x);
    const std::size_t n = x.rows();
    if (n == 0) throw empty_data("predict", "x", "predict");
    {
      std::vector<fact> f{fact::fingerprint("the model (its type)", model_fingerprint()),
                          fact::number("the number of samples", n)};
      data::describe_samples(x, "x", f);
      f.push_back(fact::number("predict's batch_size", batch_size));
      agree("predict", f);
    }
    std::vector<std::size_t> shape{n};
    for (std::size_t i = 0; i < output_shape.rank; ++i) shape.push_back(output_shape[i]);
    array<float> out(shape);
    std::optional<progbar_logger> bar;
    // Batches of at most n rows: a batch size above n is one batch, without n + batch_size - 1
    // overflowing.
    const std::size_t rows_per_batch = std::min(n, static_cast<std::size_t>(batch_size));
    const std::size_t steps = n / rows_per_batch + (n % rows_per_batch != 0);
    verbose = shown_verbosity(verbose);
    if (verbose) {
      bar.emplace(verbose, 1, steps);
      bar->on_predict_begin();
    }
    for (std::size_t b = 0; b < steps; ++b) {
      const std::size_t begin = b * rows_per_batch,
                        end = begin + std::min(n - begin, rows_per_batch);
      const shard s = shard_of(end - begin);
      const basic_dtensor<B>* y = &this->forward_rows(x, begin, s.first, s.local, s.global, false);
      basic_dtensor<B> whole_rows;
      if (splits_classes(*y)) {  // gathered over the class axes first: rows of every class
        layout_value rows = y->layout();
        rows.dims[rows.rank - 1] = {};
        whole_rows = this->resharding()(*y, rows, prediction_store_, "prediction");
        y = &whole_rows;
      }
      gather_rows(*y, s, std::span<float>(out.values.data() + begin * output_features,
                                          (end - begin) * output_features));
      if (bar) bar->on_predict_batch_end(b);
    }
    if (bar) bar->on_predict_end();
    return out;
  }

 private:
  // The compiled optimizer, or nullptr before compile().
  optimizer<B>* compiled_optimizer() { return optimizer_state_ ? &*optimizer_state_ : nullptr; }
  const mesh_binding& pm() const noexcept { return this->mesh(); }
  // The metric accumulators as state: "loss/total", "loss/count", then each metric's.
  // The state tree, its tensors copies (get_state_tree) or the model's own (state_tree_view).
  state_tree<B> state_tree_of(bool copy) {
    state_tree<B> t{copy ? this->trainable_state() : this->trainable_state_view(),
                    copy ? this->non_trainable_state() : this->non_trainable_state_view(), {}, {}};
    if (!loss_) return t;
    optimizer_state_->build(this->trainable_variables());
    t.optimizer_variables = copy ? optimizer_state_->state() : optimizer_state_->state_view();
    t.metrics_variables = metrics_state();
    return t;
  }
  state_list<B> metrics_state() const {
    state_list<B> out;
    auto add = [&](const metrics::mean& m) {
      out.push_back({m.name() + "/total", {}, m.total()});
      out.push_back({m.name() + "/count", {}, m.count()});
    };
    add(loss_tracker_);
    for (const auto& m : metric_means_) add(m);
    return out;
  }

  // ---- what every process must hold alike (runtime/agreement.hpp) -----------------------------
  // Compared across the processes before a distributed fit, evaluate, predict or first
  // train_on_batch; a model on one device (or a one-process job) has nothing to compare.
  void agree(std::string_view where, const std::vector<fact>& facts) const {
    if (pm().size() > 1) runtime::require_agreement(where, facts);
  }
  static std::uint64_t model_fingerprint() {
    return hasher().text(typeid(Model).name()).result();
  }
  // The model's type (its layers and distribution), and what compile() gave it.
  std::vector<fact> model_facts() const {
    hasher metrics, optimizer;
    for (const auto& m : metrics_) metrics.value(m.fingerprint());
    std::visit(
        [&](const auto& o) {
          optimizer.text(o.name).value(o.learning_rate);
          if constexpr (requires { o.momentum; }) optimizer.value(o.momentum);
          if constexpr (requires { o.nesterov; }) optimizer.value(o.nesterov);
          if constexpr (requires { o.beta_1; }) optimizer.value(o.beta_1).value(o.beta_2);
          if constexpr (requires { o.rho; }) optimizer.value(o.rho).value(o.centered);
          if constexpr (requires { o.epsilon; }) optimizer.value(o.epsilon);
        },
        optimizer_state_->spec().value());
    // The loss's fingerprint holds its type and every argument (from_logits), not only its
    // kind: binary cross-entropy on logits and on probabilities plan alike and differ in every
    // value.
    return {fact::fingerprint("the model (its type)", model_fingerprint()),
            fact::fingerprint("the compiled loss", loss_->fingerprint()),
            fact::fingerprint("the compiled metrics", metrics.result()),
            fact::fingerprint("the compiled optimizer", optimizer.result())};
  }
  // The compiled loss as the planner knows it (none before compile).
  loss_kind plan_loss() const { return loss_ ? loss_->plan_kind() : loss_kind::none; }
  // The loss step carries the loss sum and one count per metric, as doubles (two floats each).
  std::size_t loss_values() const { return 2 * (1 + metrics_.size()); }
  // The model as the planner sees it with the compiled loss and metrics (an accuracy takes the
  // output's arg-max: over split classes each row's is reduced).
  model_desc described() const {
    model_desc d = Model::describe(plan_loss(), loss_values());
    d.argmax_metrics =
        std::any_of(metrics_.begin(), metrics_.end(), [](const auto& m) { return m.takes_argmax(); });
    return d;
  }
  // Progress output comes from the process at device 0 only.
  int shown_verbosity(int verbose) const { return pm().is_chief() ? verbose : 0; }

  // ---- the plan -------------------------------------------------------------------------------
  // Plans a training step on the bound mesh and turns its collectives into work: the gradient
  // all_reduces into buckets, the loss all_reduce into the reduction of the loss and metric
  // sums. A collective this model cannot perform yet is refused here, before any step runs.
  void replan() {
    const model_desc d = described();
    plan_ = plan_model(Dist::value, pm().shape(), d, dynamic_extent);
    if (!plan_.ok) throw value_error(tessel::explain(plan_, d));
    loss_steps_.clear();
    for (const auto& s : plan_) {
      const bool gradient = s.when == phase::backward && s.step.kind == collective::all_reduce &&
                            is_gradient_of_variable(s.role);
      const bool loss_sum = s.when == phase::forward && s.role == step_role::loss;
      if (loss_sum) loss_steps_.push_back(s.step);
      // Under model_parallel a layer with planned layouts runs its own steps, gradients included;
      // the loss and the metrics reduce the rows of an output whose classes are split.
      const bool by_layer = Model::model_parallel && !loss_sum && s.op < Model::layer_count &&
                            this->runs_plan_of(s.op);
      const bool by_loss = Model::model_parallel && s.op == Model::layer_count;
      // A layer's statistics (batch normalization's synchronized sums) it reduces itself, through
      // the resharder it is handed, under any distribution.
      const bool statistic = s.role == step_role::statistic && s.op < Model::layer_count;
      if (!by_layer && !by_loss && !loss_sum && !statistic && !(gradient && !Model::model_parallel))
        throw value_error("tessel::sequential: the plan needs " + to_string(s.step, plan_.mesh) +
                          " of '" + step_name(plan_, s) + "' in layer '" +
                          std::string(Model::layer_name(s.op)) +
                          "', which tessel does not execute yet; lay the layers out so that only "
                          "layers with variables need collectives");
    }
    build_buckets();
  }
  // The gradient buckets: every variable gradient whose planned steps are one all_reduce (all of
  // them under data_parallel; under model_parallel those partial over the batch axis only: the
  // others a layer reduces or reshards in its own steps). Such a variable is marked
  // reduced_in_bucket, so that its layer leaves the partial sum to the bucket. Under
  // model_parallel the layouts depend on the global batch: the buckets follow the plan of
  // `batch`, rebuilt only when the gradients they take change.
  using bucket_entry = typename gradient_buckets<B, mesh_type, communicator_type>::entry;
  std::vector<bucket_entry> bucket_entries(const model_plan& p) {
    std::vector<bucket_entry> entries;
    for (const auto& s : p) {
      if (s.when != phase::backward || !is_gradient_of_variable(s.role)) continue;
      std::size_t steps = 0;
      for (const auto& t : p) steps += t.op == s.op && t.role == s.role && t.index == s.index;
      if (steps != 1 || s.step.kind != collective::all_reduce) continue;
      entries.push_back({&this->get_variable(std::string(p.variables[s.index].path.view())),
                         s.step});
    }
    return entries;
  }
  void build_buckets(std::size_t batch = dynamic_extent) {
    std::vector<bucket_entry> entries =
        batch != dynamic_extent
            ? bucket_entries(plan_model(Dist::value, pm().shape(), described(), batch))
            : bucket_entries(plan_);
    bucket_batch_ = batch;
    for (variable<B>* v : this->trainable_variables()) v->reduced_in_bucket = false;
    for (const auto& e : entries) e.var->reduced_in_bucket = true;
    buckets_.build(pm(), std::move(entries), grad_options_, &this->resharding().log());
  }
  // Under model_parallel, before a training step on a global batch of `batch`: the buckets of
  // that batch's plan (rebuilt when its gradients differ from those of the buckets in place).
  void buckets_for(std::size_t batch) {
    if constexpr (Model::model_parallel) {
      if (batch == bucket_batch_) return;
      const model_plan p = plan_model(Dist::value, pm().shape(), described(), batch);
      if (!p.ok) return;  // the step refuses the batch, with the reason
      const auto entries = bucket_entries(p);
      bool same = entries.size() == buckets_.entry_count();
      for (std::size_t i = 0; same && i < entries.size(); ++i)
        same = buckets_.entry_at(i).var == entries[i].var &&
               buckets_.entry_at(i).step == entries[i].step;
      if (same) bucket_batch_ = batch;
      else build_buckets(batch);
    }
  }

  // ---- the batch split ----------------------------------------------------------------------
  struct shard {
    // rows: the whole batch, this process's, its first, and the largest block of any process
    std::size_t global = 0, local = 0, first = 0, block = 0;
  };
  // Contiguous blocks of the global batch along the batch axis, as Keras's DataParallel. A batch
  // that does not divide (the last partial batch of an epoch) is split as evenly as possible, as
  // tf.distribute splits it: the first `global % n` processes take one row more, and a process
  // may hold none. The loss is still the mean over the global batch, so the step equals one
  // device's.
  static shard block_of(std::size_t global, std::size_t n, std::size_t c) {
    const std::size_t base = global / n, extra = global % n;
    return {global, base + (c < extra ? 1 : 0), c * base + std::min(c, extra),
            base + (extra ? 1 : 0)};
  }
  shard shard_of(std::size_t global) const {
    const std::size_t n = pm().mesh().extent(batch_axis);
    if (Model::model_parallel && global % n != 0)
      throw value_error("The global batch size (" + std::to_string(global) +
                        ") is not divisible by the size of the batch axis '" +
                        std::string(pm().shape().names[batch_axis].view()) + "' (" +
                        std::to_string(n) + ") under model_parallel. Use a batch size that " +
                        "is a multiple of " + std::to_string(n) + " (drop_remainder in batch()).");
    return block_of(global, n, pm().coordinates()[batch_axis]);
  }
  // The rows of every process's `local` output, in order, into `out` (the whole batch).
  // Every process sends a block of s.block rows (the rows it holds, then zeros), so that the
  // planned all_gather of equal blocks serves batches that do not divide too.
  void gather_rows(const basic_dtensor<B>& y, const shard& s, std::span<float> out) {
    host_gather_.assign(s.block * output_features, 0.0f);
    B::download(y.local(), std::span<float>(host_gather_).first(s.local * output_features));
    const reshard_plan r = plan_reshard(y.layout(), layout_value::replicated(2), pm().shape(),
                                        shape_value{s.global, output_features});
    if (r.empty()) {
      std::copy_n(host_gather_.begin(), s.local * output_features, out.begin());
      return;
    }
    for (const auto& step : r)
      if (step.kind != collective::all_gather || r.size() != 1)
        throw value_error("tessel::sequential::predict: the output needs " +
                          to_string(step, plan_.mesh) + ", which predict does not perform");
    const std::size_t n = pm().mesh().extent(batch_axis);
    if (n * s.block == s.global) {
      comm::run_step(pm(), r[0], std::span<const float>(host_gather_), out);
      return;
    }
    gathered_.resize(n * host_gather_.size());
    comm::run_step(pm(), r[0], std::span<const float>(host_gather_), std::span<float>(gathered_));
    for (std::size_t c = 0; c < n; ++c) {
      const shard p = block_of(s.global, n, c);
      std::copy_n(gathered_.begin() + static_cast<std::ptrdiff_t>(c * host_gather_.size()),
                  p.local * output_features,
                  out.begin() + static_cast<std::ptrdiff_t>(p.first * output_features));
    }
  }
  // Starts the reduction of this process's loss and metric sums (the plan's "loss" steps).
  void start_scalar_reduction() {
    for (const auto& step : loss_steps_)
      this->resharding().log().add({step.kind, step.axis, 0, 0, scalars_.size() * sizeof(double)});
    if (loss_steps_.size() == 1) {
      scalar_request_ = comm::start_step(pm(), loss_steps_[0], std::span<const double>(scalars_),
                                         std::span<double>(scalars_));
    } else {
      for (const auto& step : loss_steps_)
        comm::run_step(pm(), step, std::span<const double>(scalars_), std::span<double>(scalars_));
    }
  }
  // Waits for the sums and updates the loss tracker and metrics with the whole batch's values;
  // returns the batch's mean loss.
  double finish_metrics(std::size_t global) {
    scalar_request_.wait();
    const double rows = static_cast<double>(global);
    const double loss = scalars_[0] / rows;
    loss_tracker_.update_state(loss, rows);
    for (std::size_t i = 0; i < metrics_.size(); ++i)
      metric_means_[i].update_state(scalars_[i + 1] / rows, rows);
    return loss;
  }

  template <class Dataset>
  static std::optional<std::size_t> known_steps(const Dataset& d) {
    const std::optional<std::size_t> n = d.cardinality();
    if (n && *n == std::numeric_limits<std::size_t>::max()) return std::nullopt;
    return n;
  }
  // Checks the targets of the whole batch (so that every process finds the same error), then
  // uploads rows [first, first + local).
  template <class Y>
  void upload_targets(const array<Y>& y, std::size_t rows, std::size_t first, std::size_t local) {
    data::check_shape(y, "y");
    if (y.rows() != rows)
      throw value_error("Data cardinality is ambiguous: x sizes: " + std::to_string(rows) +
                        ", y sizes: " + std::to_string(y.rows()) +
                        ". Make sure all arrays contain the same number of samples.");
    if (loss_->sparse_labels()) {
      if (y.size() != rows)
        throw value_error("A sparse loss (" + std::string(loss_->name()) +
                          ") takes one integer label per sample, shape (" + std::to_string(rows) +
                          ",); got shape " + shape_to_string(y.shape) +
                          ". Use categorical_crossentropy for one-hot targets.");
      host_labels_.resize(rows);
      for (std::size_t i = 0; i < rows; ++i) {
        const double v = static_cast<double>(y.values[i]);
        if (!(v >= 0 && v < static_cast<double>(output_features)) || v != std::floor(v))
          throw value_error("Received a label value of " + label_text(y.values[i]) +
                            " which is outside the valid range of [0, " +
                            std::to_string(output_features) + ") (sample " + std::to_string(i) +
                            " of the batch). Labels must be class indices in [0, " +
                            std::to_string(output_features) + ").");
        host_labels_[i] = static_cast<std::int32_t>(v);
      }
      if (labels_rows_ != local) {
        labels_ = B::make_indices("labels", local);
        labels_rows_ = local;
      }
      B::upload(std::span<const std::int32_t>(host_labels_).subspan(first, local), labels_);
    } else {
      if (y.size() != rows * output_features)
        throw value_error(
            "Arguments `target` and `output` must have the same shape. Received: "
            "target.shape=" +
            shape_to_string(y.shape) + ", output.shape=(" + std::to_string(rows) + ", " +
            std::to_string(output_features) +
            "). For class labels use sparse_categorical_crossentropy, or one-hot "
            "encode them with to_categorical.");
      host_targets_.assign(
          y.values.begin() + static_cast<std::ptrdiff_t>(first * output_features),
          y.values.begin() + static_cast<std::ptrdiff_t>((first + local) * output_features));
      targets_ = sized<B>(targets_store_, local, output_features, "targets");
      B::upload(std::span<const float>(host_targets_), targets_);
    }
  }
  template <class Y>
  static std::string label_text(Y v) {
    if constexpr (std::is_floating_point_v<Y>)
      return callbacks::python_float_repr(static_cast<double>(v));
    else
      return std::to_string(v);
  }
  // This process's metric counts, after the loss sum, into the device's sums (slot i + 1 for
  // metric i); then the step's one read-back of all of them.
  void local_sums(const basic_dtensor<B>& output) {
    const matrix& out = output.local();
    const bool split = !metrics_.empty() && splits_classes(output);
    for (std::size_t i = 0; i < metrics_.size(); ++i) {
      const metrics::metric_function<B>& m = metrics_[i];
      if (m.sparse_labels()) require_sparse(m);
      else if (!m.takes_argmax()) require_targets(m);
      if (split && !m.takes_argmax())
        throw value_error("Metric " + m.name() +
                          " sums whole rows, but the output's classes are split across devices; "
                          "lay the last layer's output out with its classes whole (a "
                          "\"<layer>/output\" rule with None last)");
      if (split) continue;
      m.local_sum(out, labels_, targets_, sums_, i + 1);
    }
    scalars_.resize(metrics_.size() + 1);
    B::download(sums_, std::span<double>(scalars_));
    if (split) split_metric_counts(output);
  }
  // The accuracies over split classes: every row's arg-max all_reduced over the class axes (one
  // key per row), then counted on the host against the labels (the targets' first arg-max). A
  // loss summed over the class axes too (squared error) takes the counts of one device per row.
  void split_metric_counts(const basic_dtensor<B>& output) {
    split_argmax(output, argmax_store_, host_pairs_, argmax_keys_, argmax_, this->resharding());
    const std::size_t first = output.shard().offset[0];
    std::size_t equal = 0;
    for (std::size_t r = 0; r < argmax_.size(); ++r) {
      std::size_t want = 0;
      if (loss_->sparse_labels()) {
        want = static_cast<std::size_t>(host_labels_[first + r]);
      } else {
        const float* t = host_targets_.data() + r * output_features;
        for (std::size_t j = 1; j < output_features; ++j)
          if (t[j] > t[want]) want = j;
      }
      equal += argmax_[r] == want;
    }
    const std::uint32_t classes = class_axes(output.layout());
    bool counted_once = true;
    for (const auto& step : loss_steps_)
      if ((classes >> step.axis) & 1u)
        counted_once = counted_once && this->resharding().coordinates()[step.axis] == 0;
    for (std::size_t i = 0; i < metrics_.size(); ++i)
      scalars_[i + 1] = counted_once ? static_cast<double>(equal) : 0.0;
  }
  void require_targets(const metrics::metric_function<B>& m) const {
    if (loss_->sparse_labels())
      throw value_error("Metric " + m.name() + " takes target vectors of the output's shape, but "
                        "the loss " + std::string(loss_->name()) +
                        " takes integer labels; use a loss on target vectors (one-hot encode the "
                        "labels with to_categorical).");
  }
  void require_sparse(const metrics::metric_function<B>& m) const {
    if (!loss_->sparse_labels())
      throw value_error("Metric " + m.name() + " takes integer labels, but the loss " +
                        std::string(loss_->name()) +
                        " takes target vectors; use "
                        "categorical_accuracy or \"accuracy\".");
  }
  template <class Dataset>
  logs run_evaluate(const Dataset& data, progbar_logger* bar, const std::vector<callback*>& cbs,
                    bool validating) {
    // Validation uses its own trackers so that the training metrics of the epoch survive.
    metrics::mean saved_loss = loss_tracker_;
    std::vector<metrics::mean> saved = metric_means_;
    reset_metrics();
    if (bar) bar->on_test_begin();
    for (callback* c : cbs) c->on_test_begin({});
    std::size_t step = 0;
    for (const auto& element : data) {
      const auto& [x, y] = element;
      for (callback* c : cbs) c->on_test_batch_begin(step, {});
      test_step(x, y);
      const logs l = metric_logs();
      if (bar) bar->on_test_batch_end(step, sorted_logs(l));
      for (callback* c : cbs) c->on_test_batch_end(step, l);
      ++step;
    }
    if (step == 0) {
      loss_tracker_ = saved_loss;
      metric_means_ = saved;
      if (validating) throw empty_data("fit", "validation_data", "evaluate");
      throw empty_data("evaluate", "the data", "evaluate");
    }
    const logs result = metric_logs();
    if (bar) bar->on_test_end(sorted_logs(result));
    for (callback* c : cbs) c->on_test_end(result);
    loss_tracker_ = saved_loss;
    metric_means_ = saved;
    return result;
  }
  template <class Y>
  void test_step(const array<float>& x, const array<Y>& y) {
    finish_metrics(forward_and_loss(x, y, false));
  }
  // Forward pass on this process's rows of the global batch, the loss's gradient w.r.t. the
  // output (left in loss_grad_, scaled for the mean over the global batch), and the start of the
  // reduction of the loss and metric sums. Returns the global batch size.
  template <class Y>
  std::size_t forward_and_loss(const array<float>& x, const array<Y>& y, bool training) {
    if (x.rows() == 0)
      throw value_error("a batch of 0 samples has no loss: pass at least one sample to " +
                        std::string(training ? "train_on_batch / compute_loss_and_gradients"
                                             : "evaluate") + ", x has shape " +
                        shape_to_string(x.shape));
    this->check_input_shape(x);
    const shard s = shard_of(x.rows());
    upload_targets(y, x.rows(), s.first, s.local);
    const basic_dtensor<B>& output =
        this->forward_rows(x, 0, s.first, s.local, s.global, training);
    const matrix& out = output.local();
    loss_grad_ = sized<B>(loss_grad_store_, B::rows(out), B::cols(out), "loss_gradient");
    const float scale = 1.0f / static_cast<float>(s.global);
    if (splits_classes(output)) {
      upload_target_columns(output);
      split_loss_and_gradient<B>(*loss_, output, labels_, targets_, loss_grad_, scale, sums_, 0,
                                 row_stats_, this->resharding());
    } else {
      loss_and_gradient<B>(*loss_, output, labels_, targets_, loss_grad_, scale, sums_, 0);
    }
    local_sums(output);
    start_scalar_reduction();
    return s.global;
  }
  // Whether the output's class dimension is split across devices (model_parallel with the last
  // layer's columns over a model axis): the loss and the metrics then reduce rows.
  bool splits_classes(const basic_dtensor<B>& output) {
    if constexpr (!Model::model_parallel) return false;
    else return this->resharding().moves(class_axes(output.layout()));
  }
  // The targets of this device's columns of the output (the uploaded ones hold whole rows).
  void upload_target_columns(const basic_dtensor<B>& output) {
    if (loss_->sparse_labels()) return;
    const block& b = output.shard();
    const std::size_t rows = b.extent[0], cols = b.extent[1];
    const std::array<std::size_t, 2> whole{rows, output_features}, offset{0, b.offset[1]},
        extent{rows, cols};
    host_columns_.resize(rows * cols);
    comm::detail::copy_block<float>(whole, offset, extent, host_targets_.data(),
                                    host_columns_.data(), true);
    targets_ = sized<B>(targets_store_, rows, cols, "targets");
    B::upload(std::span<const float>(host_columns_), targets_);
  }
  static void check_batch_size(const char* what, std::int64_t batch_size) {
    if (batch_size <= 0)
      throw value_error(std::string(what) + ": batch_size must be greater than zero, got " +
                        std::to_string(batch_size) +
                        "; pass a positive integer, the number of samples per batch (Keras's "
                        "default is 32)");
  }
  // Keras 3 fails on data with no batch too (its epoch iterator raises StopIteration): there is
  // no loss to report and nothing to train on, so say so instead of printing a loss of 0.
  static value_error empty_data(std::string_view what, std::string_view data,
                                std::string_view purpose) {
    return value_error(std::string(what) + ": " + std::string(data) +
                       " has no samples, so there is no batch to " + std::string(purpose) +
                       ". Check that the arrays have rows and that the dataset's pipeline (take, "
                       "filter, batch with drop_remainder) leaves at least one batch.");
  }
  void require_compiled(const char* what) const {
    if (!loss_)
      throw value_error(std::string("You must call `compile()` before calling `") + what +
                        "()`. For example: model.compile(\"adam\", "
                        "\"sparse_categorical_crossentropy\", {\"accuracy\"}).");
  }

  // The passes a dataset has started (its next epoch's shuffle key), where it counts them.
  template <class Dataset>
  static std::uint64_t passes_of(const Dataset& d) {
    if constexpr (requires { d.iterations(); }) return d.iterations();
    else return 0;
  }
  training_position position_{};
  std::optional<training_position> resume_;
  std::unique_ptr<async_checkpointer<trainer>> async_;  // the save in the background, if any
  matrix loss_grad_store_, loss_grad_, targets_store_, targets_;
  typename B::index_vector labels_;
  std::size_t labels_rows_ = 0;
  std::vector<std::int32_t> host_labels_;
  std::vector<float> host_targets_;
  std::optional<optimizer<B>> optimizer_state_;
  std::optional<loss_function<B>> loss_;
  std::vector<metrics::metric_function<B>> metrics_;
  metrics::mean loss_tracker_{"loss"};
  std::vector<metrics::mean> metric_means_;
  // distribution
  model_plan plan_{};
  std::vector<reshard_step> loss_steps_;
  gradient_options grad_options_{};
  gradient_buckets<B, mesh_type, communicator_type> buckets_;
  std::size_t bucket_batch_ = dynamic_extent;  // the global batch whose plan the buckets follow
  typename B::sums sums_;        // the step's loss and metric sums, on the device
  std::vector<double> scalars_;  // the same on the host, reduced over the batch axis
  typename communicator_type::request scalar_request_;
  bool agreed_ = false;  // the processes have compared what they hold (before the first step)
  std::vector<float> host_gather_, gathered_;
  // an output whose classes are split across devices
  row_statistics<B> row_stats_;
  std::vector<float> host_columns_, host_pairs_;
  matrix argmax_store_, prediction_store_;
  std::vector<std::uint64_t> argmax_keys_;
  std::vector<std::size_t> argmax_;
};

}  // namespace tessel
