// trainer_core: the part of Keras's Trainer (keras/src/trainers/trainer.py) that does not depend
// on the model's type — compile, fit / evaluate / predict, train_on_batch and the custom-training-
// loop pieces, callbacks and progress output, the batch split across the batch axis, the gradient
// buckets and the reduction of the loss and metric sums. It is a class of the backend and the
// communicator alone: trainer<Model> (trainer.hpp) adds the model and answers the few questions
// the core asks of it (its forward and backward pass, its variables, its plan's description)
// through virtual functions, one call per step or per layer, never per element. So a program's
// models share one copy of this code, which tessel::tessel holds for the host backend
// (TESSEL_TRAINER_TEMPLATES) instead of every model and every translation unit compiling it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/auto_layout.hpp"
#include "../core/explain.hpp"
#include "../core/layer_planner.hpp"
#include "../core/memory_plan.hpp"
#include "../data/array.hpp"
#include "../data/dataset.hpp"
#include "../layers/layer.hpp"
#include "../losses.hpp"
#include "../metrics.hpp"
#include "../optimizers.hpp"
#include "../runtime/agreement.hpp"
#include "../runtime/collectives.hpp"
#include "../runtime/reshard.hpp"
#include "../saving/model_config.hpp"
#include "../state.hpp"
#include "replica_check.hpp"
#include "callbacks.hpp"
#include "gradient_buckets.hpp"
#include "sharded_state.hpp"
#include "logs.hpp"
#include "strategy_scope.hpp"
#include "progbar_logger.hpp"

namespace tessel {

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

// What the core knows of its model's type, as values (trainer<Model> gives them once).
struct trained_model_facts {
  distribution_value distribution{};
  std::size_t batch_axis = 0;
  shape_value output_shape{};
  std::size_t output_features = 0;
  bool model_parallel = false;
  std::size_t layer_count = 0;
  std::uint64_t type_fingerprint = 0;  // the model's type: its layers and distribution
  bool automatic_layouts = false;      // the layouts were chosen by auto_layout
};

// The core holds the planner's arrays (model_plan): its name carries their limits, as the
// planner's compiled functions' do (core/model_plan.hpp).
inline namespace TESSEL_LIMITS_NAMESPACE {

template <class B, class C>
class trainer_core : public model_base {
 public:
  using matrix = typename B::matrix;

  // ---- compile -------------------------------------------------------------------------------
  // compile()'s keyword arguments, with Keras's default optimizer.
  // A loss or metric is one of the library's, its Keras name, or any type of the protocols in
  // losses.hpp and metrics.hpp.
  struct compile_options {
    optimizer_function<B> optimizer = "rmsprop";
    loss_function<B> loss = losses::mean_squared_error{};
    std::vector<metrics::metric_arg<B>> metrics = {};
  };
  void compile(compile_options o);
  void compile(optimizer_function<B> optimizer_, loss_function<B> loss,
               std::vector<metrics::metric_arg<B>> metric_list = {});

  // ---- distribution ---------------------------------------------------------------------------
  // The communication plan of a training step (global batch unknown: bytes per sample unknown).
  const model_plan& plan() const noexcept { return plan_; }
  // The plan of a training step on a global batch of `global_batch`, as text: variables and
  // their layouts, and every collective with its mesh axis and bytes.
  std::string explain(std::size_t global_batch) const;
  // Bucket size and overlap of the gradient reduction (DDP's bucket_cap_mb, default 25).
  // Gradient views taken before (copies of variable::gradient) do not follow the new buffer.
  void set_gradient_options(gradient_options o);
  const gradient_options& get_gradient_options() const noexcept { return grad_options_; }
  std::size_t gradient_bucket_count() const noexcept { return buckets_.size(); }
  // The optimizer-state values this process keeps: all of them, or under shard_state its parts.
  std::size_t optimizer_state_values() const;
  // The bytes each device needs to train on a global batch of `global_batch` (memory_plan),
  // from the plan, with the compiled optimizer's slots (none before compile()).
  tessel::memory_plan memory(std::size_t global_batch) const;
  // summary()'s memory line, for the last global batch trained (empty before the first step).
  std::string memory_summary() const;
  // The communication since the last reset: the gradient buckets' timing and every collective
  // run, by kind and mesh axis with its bytes (the log of collectives() counted).
  tessel::communication_stats communication_stats();
  void reset_communication_stats();
  optimizer<B>& get_optimizer();

  // ---- for callbacks (model_base) -------------------------------------------------------------
  std::optional<bool> metric_increases(std::string_view name) const override;
  double learning_rate() const override;
  void set_learning_rate(double learning_rate) override;
  training_position position() const override { return position_; }
  void resume_from(const training_position& p) override { resume_ = p; }

  // ---- the custom-training-loop pieces ------------------------------------------------------
  // Loss of the batch and the gradient of every trainable variable (in variable::gradient), as
  // Keras's `compute_loss_and_updates` + `jax.grad` give them. Updates the compiled metrics.
  // On a distributed model x and y are the global batch: each process takes its block of rows
  // along the batch axis, and the gradients (reduced in buckets during the backward pass), the
  // loss and the metrics are those of the whole batch.
  // Inside a data-parallel strategy's `run` (TensorFlow's replica context) x and y are instead
  // this replica's rows (an experimental_distribute_dataset element): the replicas' rows, in
  // replica order, make the global batch; the gradients and metrics are still the whole batch's,
  // and the loss returned is this replica's share of the batch's mean (its per-example losses
  // over the global batch size, tf.nn.compute_average_loss), which strategy.reduce(sum, ...)
  // turns into the mean.
  template <class Y>
  double compute_loss_and_gradients(const array<float>& x, const array<Y>& y);
  // The loss and gradients of one batch, the forward pass in training or inference mode (the
  // gradient of what the model computes in that mode: batch normalization with its moving
  // statistics, dropout off, no new random draws, when not training).
  template <class Y>
  double loss_and_gradients(const array<float>& x, const array<Y>& y, bool training);
  // One optimizer step on the gradients computed last (Keras's optimizer.apply).
  void apply_gradients();
  // One training step on one batch. As in Keras, the metrics are reset first unless
  // reset_metrics is false, so the logs are this batch's loss (before the update) and metrics.
  template <class Y>
  logs train_on_batch(const array<float>& x, const array<Y>& y, bool reset_metrics = true);

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
  // anything changes; a group that is empty is left as it is. Then the processes check that they
  // hold the same values where they hold copies of one value (require_same_replicas).
  void set_state_tree(const state_tree<B>& t) {
    assign_state_tree(t);
    require_same_replicas("set_state_tree");
  }
  // set_state_tree without the processes' check (a load that checks once it has read everything).
  void assign_state_tree(const state_tree<B>& t);
  // After a load: every process holds the same values where the layouts say it holds a copy of
  // one value (every variable, optimizer slot and accumulator under data_parallel; the blocks of
  // processes at the same coordinates of a variable's split axes under model_parallel), or every
  // process throws collective_value_error naming the variable and the processes. One all_gather
  // of two words per state variable, and a checksum of this process's blocks; nothing on one
  // process.
  void require_same_replicas(std::string_view where) {
    detail::require_same_replicas(state_tree_view(), pm(), where);
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
                                       bool training = false);
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
                                       const array<Y>& y, bool training = true);

  logs metric_logs() const;
  void reset_metrics();

  // ---- fit / evaluate / predict -------------------------------------------------------------
  template <class Dataset>
  history fit(const Dataset& train, const fit_options<Dataset>& o = {});
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
  history fit(const array<float>& x, const array<Y>& y, const array_fit_options& o);
  template <class Y>
  logs evaluate(const array<float>& x, const array<Y>& y, std::int64_t batch_size = 32,
                int verbose = 1);
  // Returns the loss and metrics over the whole dataset (Keras's evaluate with return_dict).
  template <class Dataset>
  logs evaluate(const Dataset& data, int verbose = 1, std::vector<callback_ref> callbacks = {});
  // The model's outputs for every sample of x, batch by batch (Keras's predict). On a
  // distributed model each process computes its block of every batch and every process gets
  // the whole result.
  array<float> predict(const array<float>& x, std::int64_t batch_size = 32, int verbose = 0);

 protected:
  // What the backward pass calls before and after each layer's backward, with its variables.
  struct layer_hooks {
    std::function<void(std::span<variable<B>* const>)> before, after;
    void before_layer(std::span<variable<B>* const> v) const { before(v); }
    void operator()(std::span<variable<B>* const> v) const { after(v); }
  };
  explicit trainer_core(const trained_model_facts& facts);
  ~trainer_core() override;
  trainer_core(const trainer_core&) = delete;
  trainer_core& operator=(const trainer_core&) = delete;
  // The model's mesh and resharder, once it is built; then plans a training step.
  void attach(const bound_mesh<C>& pm, tensor_resharder<B, C>& reshard);
  // The compiled optimizer, or nullptr before compile().
  optimizer<B>* compiled_optimizer() { return optimizer_state_ ? &*optimizer_state_ : nullptr; }
  // The compiled optimizer as a save reads it on every process (save_weights, save): under
  // central storage its state copied from the parameter device first, so that the process that
  // writes (process 0) writes the one state. A collective: every process calls it.
  optimizer<B>* optimizer_to_save();
  // The compiled optimizer as a load writes it, then, after the load, its state handed on: under
  // a state split over the processes (shard_state) the whole state is gathered first (a
  // collective: every process calls it), so that what a load leaves unwritten and what the
  // processes' check reads is current, and each process takes its parts of the loaded state.
  optimizer<B>* optimizer_to_load();
  void gather_shards();
  // Under split weights (shard_state::weights), before the model's variables are read or written
  // outside a training step: the weights gathered whole (a collective: every process calls it;
  // nothing moves when they are whole already), or drawn whole where they have not been drawn
  // (variable_store::defer; each process draws alone). They stay whole until the next training
  // step.
  void whole_weights();
  // What the model calls before each layer's forward (model.set_before_forward): under split
  // weights, the layer's weights gathered (`self` is the trainer_core); weights not drawn yet
  // drawn whole first (a pass before compile).
  static void before_forward(void* self, std::span<variable<B>* const> v) {
    auto* t = static_cast<trainer_core*>(self);
    if (t->callers_state_ != 0) return;
    t->draw_deferred();
    t->shards_.gather_layer(v, true);
  }
  // While the model runs with a caller's state (with_state: stateless_call, value_and_grad), its
  // variables are the caller's tensors: split weights are neither gathered nor released.
  struct callers_state {
    trainer_core* t;
    explicit callers_state(trainer_core* core) : t(core) { ++t->callers_state_; }
    ~callers_state() { --t->callers_state_; }
    callers_state(const callers_state&) = delete;
    callers_state& operator=(const callers_state&) = delete;
  };
  void optimizer_state_written();
  // What compile() gave, as a .keras archive records it (nullopt before compile()).
  std::optional<saving::compile_info> compiled_info() const;

 private:
  // A memory plan as explain() and summary() print it.
  static std::string memory_text(const memory_plan& m);
  // The memory of a planned step, with the compiled optimizer's slots.
  memory_plan memory_of(const model_plan& p) const;
  // ---- what the core asks of its model (trainer<Model> answers from the Model) ---------------
  virtual model_desc model_describe(const loss_rule* loss, std::size_t loss_values) const = 0;
  virtual std::string_view model_layer_name(std::size_t i) const = 0;
  virtual std::uint64_t model_seed() const = 0;
  virtual void model_check_input_shape(const array<float>& x) const = 0;
  virtual const basic_dtensor<B>& model_forward_rows(const array<float>& x, std::size_t x_row,
                                                     std::size_t first, std::size_t rows,
                                                     std::size_t batch, bool training) = 0;
  // Before and after each layer's backward, `on_layer` gets that layer's variables.
  virtual void model_backward(const matrix& dy, const layer_hooks& on_layer) = 0;
  virtual std::vector<variable<B>*> model_trainable_variables() = 0;
  virtual variable<B>& model_variable(std::string_view path) = 0;
  virtual std::uint64_t model_training_step() const = 0;
  virtual void model_set_training_step(std::uint64_t step) = 0;
  // The trainable (or non-trainable) state: copies, or (copy false) the model's own tensors.
  virtual state_list<B> model_state(bool trainable, bool copy) const = 0;
  virtual void model_assign_state(const state_list<B>& trainable,
                                  const state_list<B>& non_trainable) = 0;
  // Runs f with the model's variables standing for these values (graph_model::with_state).
  virtual void model_with_state(const state_list<B>& trainable,
                                const state_list<B>& non_trainable, std::string_view where,
                                const std::function<void()>& f) = 0;

  const bound_mesh<C>& pm() const noexcept { return *pm_; }
  state_tree<B> state_tree_of(bool copy);
  state_list<B> metrics_state() const;
  void agree(std::string_view where, const std::vector<fact>& facts) const;
  std::vector<fact> model_facts() const;
  const loss_rule* plan_loss() const { return loss_ ? loss_->plan_rule() : &no_loss; }
  // The loss step carries the loss sum and one count per metric, as doubles (two floats each).
  std::size_t loss_values() const { return 2 * (1 + metrics_.size()); }
  model_desc described() const;
  // Progress output comes from the process at device 0 only.
  int shown_verbosity(int verbose) const { return pm().is_chief() ? verbose : 0; }
  void replan();
  using bucket_entry = typename gradient_buckets<B, C>::entry;
  std::vector<bucket_entry> bucket_entries(const model_plan& p);
  void build_buckets(std::size_t batch = dynamic_extent);
  // Every trainable variable not drawn yet drawn whole (layers/layer.hpp, draw_values): on each
  // process alone, no collective.
  void draw_deferred();
  void buckets_for(std::size_t batch);
  // Central storage (distribution_value::variable_device): the variables and the optimizer
  // state on one process of the batch axis.
  bool central() const noexcept;
  // Whether the optimizer state is split over the batch axis (shard_state).
  bool sharded() const noexcept;
  // This process updates the variables: under central storage only where they live.
  bool holds_variables() const;
  void share_central_state();
  // Under central storage, after the variables changed where they live: broadcast to the others.
  void share_stored_variables();
  // Keras's optimizer.finalize_variable_values at the end of fit (use_ema: the variables take
  // their moving averages), wherever the variables and the state are.
  void finalize_variable_values();
  // clipnorm and global_clipnorm where this process holds parts of the variables (split over
  // mesh axes, or a split state's parts): the mesh axes over which the squared norms are summed
  // (a bit per axis; 0: each process has whole gradients), whether this process counts a
  // variable's values (one process among those that hold the same block), and the sum, one
  // all_reduce of one float64 per variable along each of those axes, recorded in the log. Worked
  // out once per compile and per change of buckets, not every step.
  std::uint32_t norm_axes() const;
  bool counts_norm_of(const variable<B>& v, std::uint32_t axes) const;
  std::function<void(std::span<double>)> norm_sum(std::uint32_t axes);
  void set_gradient_norms();

  // ---- the batch split ----------------------------------------------------------------------
  struct shard {
    // rows: the whole batch, this process's, its first, and the largest block of any process
    std::size_t global = 0, local = 0, first = 0, block = 0;
  };
  static shard block_of(std::size_t global, std::size_t n, std::size_t c);
  shard shard_of(std::size_t global) const;
  void gather_rows(const basic_dtensor<B>& y, const shard& s, std::span<float> out);
  void start_scalar_reduction();
  double finish_metrics(std::size_t global);
  template <class Dataset>
  static std::optional<std::size_t> known_steps(const Dataset& d);
  template <class Y>
  void upload_targets(const array<Y>& y, std::size_t rows, std::size_t first, std::size_t local);
  template <class Y>
  static std::string label_text(Y v);
  void local_sums(const basic_dtensor<B>& output);
  void split_metric_counts(const basic_dtensor<B>& output);
  void require_targets(const metrics::metric_function<B>& m) const;
  void require_sparse(const metrics::metric_function<B>& m) const;
  template <class Dataset>
  logs run_evaluate(const Dataset& data, progbar_logger* bar, const std::vector<callback*>& cbs,
                    bool validating);
  template <class Y>
  void test_step(const array<float>& x, const array<Y>& y);
  template <class Y>
  std::size_t forward_and_loss(const array<float>& x, const array<Y>& y, bool training);
  // The same on `s`'s rows, which x holds from its row x_row on.
  template <class Y>
  std::size_t forward_and_loss(const array<float>& x, const array<Y>& y, const shard& s,
                               std::size_t x_row, bool training);
  // Inside strategy.run, on a data-parallel model: x holds this replica's rows.
  bool per_replica() const;
  // This replica's rows of the global batch, from every replica's count (one all_gather).
  shard replica_shard(std::size_t rows) const;
  bool splits_classes(const basic_dtensor<B>& output);
  void upload_target_columns(const basic_dtensor<B>& output);
  static void check_batch_size(const char* what, std::int64_t batch_size);
  static value_error empty_data(std::string_view what, std::string_view data,
                                std::string_view purpose);
  void require_compiled(const char* what) const;
  template <class Dataset>
  static std::uint64_t passes_of(const Dataset& d);

  trained_model_facts facts_;
  const bound_mesh<C>* pm_ = nullptr;
  tensor_resharder<B, C>* reshard_ = nullptr;
  training_position position_{};
  std::vector<fact> train_facts_;  // the training data of the fit in progress (dataset::facts())
  bool gradients_pending_ = false;  // compute_loss_and_gradients' gradients, not yet applied
  bool norms_set_ = false;  // set_gradient_norms done for this optimizer and these buckets
  int callers_state_ = 0;           // runs with a caller's state (callers_state) under way
  // Whether a trainable variable may still be undrawn (variable_store::defer): until the split
  // weights draw their parts (compile), or draw_deferred draws them whole.
  bool deferred_ = true;
  std::optional<training_position> resume_;
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
  gradient_buckets<B, C> buckets_;
  // The optimizer state split over the batch axis (shard_state), when the distribution asks.
  sharded_state<B, C> shards_;
  std::vector<bucket_entry> stored_;  // central storage: the variables broadcast after an update
  std::size_t bucket_batch_ = dynamic_extent;  // the global batch whose plan the buckets follow
  std::size_t last_global_batch_ = 0;          // the last training step's (0: none yet)
  typename B::sums sums_;        // the step's loss and metric sums, on the device
  double local_loss_ = 0;        // this process's loss sum of the last step, before the reduction
  std::vector<double> scalars_;  // the same on the host, reduced over the batch axis
  typename C::request scalar_request_;
  bool agreed_ = false;  // the processes have compared what they hold (before the first step)
  std::vector<float> host_gather_, gathered_;
  // an output whose classes are split across devices
  row_statistics<B> row_stats_;
  std::vector<float> host_columns_, host_pairs_;
  matrix argmax_store_, prediction_store_;
  std::vector<std::uint64_t> argmax_keys_;
  std::vector<std::size_t> argmax_;
};

}  // namespace TESSEL_LIMITS_NAMESPACE

}  // namespace tessel

#include "impl/trainer_core.ipp"
