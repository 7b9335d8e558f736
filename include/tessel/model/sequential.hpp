// sequential: Keras's Sequential model with its structure as a type. Layer names, shapes and
// parameter counts are computed when the type is formed (a dense layer on an unflattened input,
// or two layers with one name, do not compile); compile / fit / evaluate / predict follow Keras 3,
// and the custom-training-loop pieces (variables, loss and gradients, optimizer) are public.
#pragma once

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../backend/default.hpp"
#include "../core/diagnostics.hpp"
#include "../core/distribution.hpp"
#include "../core/model_plan.hpp"
#include "../core/shape.hpp"
#include "../data/array.hpp"
#include "../data/dataset.hpp"
#include "../layers/elementwise.hpp"
#include "../layers/layer.hpp"
#include "../losses.hpp"
#include "../metrics.hpp"
#include "../optimizers.hpp"
#include "../runtime/collectives.hpp"
#include "../runtime/process_mesh.hpp"
#include "callbacks.hpp"
#include "gradient_buckets.hpp"
#include "logs.hpp"
#include "progbar_logger.hpp"
#include "summary.hpp"

namespace tessel {

namespace utils {
namespace detail {
inline std::uint64_t& seed_ref() {
  static std::uint64_t seed = 1337;
  return seed;
}
}  // namespace detail
// keras.utils.set_random_seed: the seed of the models built after this call (initial weights,
// dropout masks). The default seed is fixed, so a program gives the same result every run.
inline void set_random_seed(std::uint64_t seed) { detail::seed_ref() = seed; }
inline std::uint64_t random_seed() { return detail::seed_ref(); }
}  // namespace utils

template <class T>
struct is_input : std::false_type {};
template <std::size_t... D>
struct is_input<layers::input<D...>> : std::true_type {};

namespace detail {

template <class... Layers>
struct layer_table {
  static constexpr std::size_t size = sizeof...(Layers);
  // Names (Keras's auto-naming), shapes, and the first broken rule (as an index), in one pass.
  struct result {
    std::array<layer_info, sizeof...(Layers) + 1> info{};
    std::size_t bad_input = size;  // a layer that cannot take its input
    std::size_t duplicate = size;  // a layer whose name an earlier layer has
  };
  static constexpr result compute(shape_value input) {
    result r;
    constexpr std::array<std::string_view, size + 1> bases{Layers::base_name..., ""};
    constexpr std::array<name_string, size + 1> given{Layers::given_name..., name_string{}};
    constexpr std::array<bool (*)(const shape_value&), size + 1> accepts{&Layers::accepts...,
                                                                         nullptr};
    constexpr std::array<shape_value (*)(const shape_value&), size + 1> outs{
        &Layers::output_shape..., nullptr};
    shape_value cur = input;
    for (std::size_t i = 0; i < size; ++i) {
      if (given[i].empty()) {
        std::size_t before = 0;
        for (std::size_t j = 0; j < i; ++j)
          if (given[j].empty() && bases[j] == bases[i]) ++before;
        r.info[i].name = auto_name(bases[i], before);
      } else {
        r.info[i].name = given[i];
      }
      for (std::size_t j = 0; j < i && r.duplicate == size; ++j)
        if (r.info[j].name.view() == r.info[i].name.view()) r.duplicate = i;
      r.info[i].input = cur;
      if (!accepts[i](cur) && r.bad_input == size) r.bad_input = i;
      cur = accepts[i](cur) ? outs[i](cur) : cur;
      r.info[i].output = cur;
    }
    return r;
  }
};

template <class Table, shape_value In>
struct checked_layers {
  static constexpr auto r = Table::compute(In);
  static constexpr name_string bad_name =
      r.bad_input < Table::size ? r.info[r.bad_input].name : name_string{};
  static constexpr std::size_t bad_rank =
      r.bad_input < Table::size ? r.info[r.bad_input].input.rank : 0;
  static constexpr name_string dup_name =
      r.duplicate < Table::size ? r.info[r.duplicate].name : name_string{};
  static_assert(
      require<r.bad_input == Table::size, diagnostic::layer_needs_flat_input<bad_name, bad_rank>>);
  static_assert(require<r.duplicate == Table::size, diagnostic::duplicate_layer_name<dup_name>>);
  static constexpr auto info = r.info;
};

}  // namespace detail

namespace detail {
// A backend names the communicator of its memory (NCCL for device memory, MPI for the host);
// without one, MPI's over host memory.
template <class B>
struct communicator_of {
  using type = comm::communicator;
};
template <class B>
  requires requires { typename B::communicator; }
struct communicator_of<B> {
  using type = typename B::communicator;
};
}  // namespace detail

// fit()'s keyword arguments, by Keras's names.
template <class Dataset>
struct fit_options {
  std::size_t epochs = 1;
  int verbose = 1;  // Keras's "auto" is 1
  std::vector<callback_ref> callbacks = {};
  std::optional<Dataset> validation_data = std::nullopt;
  std::size_t initial_epoch = 0;
};

// The primary template is reached only when the entry after the distribution is not an input.
template <class B, class Dist, class Input = void, class... Layers>
class basic_sequential {
  static_assert(require<is_input<Input>::value, diagnostic::sequential_needs_an_input<0>>);
};

template <class B, class Dist, std::size_t... InputDims, class... Layers>
class basic_sequential<B, Dist, layers::input<InputDims...>, Layers...> : public model_base {
  using table = detail::layer_table<Layers...>;
  using checked = detail::checked_layers<table, shape_value{InputDims...}>;
  static_assert(detail::is_distribution<Dist>,
                "tessel::sequential: the distribution must be data_parallel<...> or one_device");
  static_assert(Dist::value.kind == distribution_value::data,
                "tessel::sequential: training under model_parallel is not built yet; use "
                "data_parallel<...> (model_parallel layouts can be planned and printed with "
                "plan_model / explain)");
  static_assert(sizeof...(Layers) <= max_ops, "tessel::sequential: at most 32 layers");

 public:
  using backend = B;
  using distribution = Dist;
  using mesh_type = typename Dist::mesh;
  // The communicator of the mesh's axes: the backend's (B::communicator), else MPI's.
  using communicator_type = typename detail::communicator_of<B>::type;
  using mesh_binding = process_mesh<mesh_type, communicator_type>;
  using matrix = typename B::matrix;
  static constexpr std::size_t layer_count = sizeof...(Layers);
  static constexpr shape_value input_shape{InputDims...};
  static constexpr auto layer_infos = checked::info;
  static constexpr shape_value output_shape =
      layer_count ? layer_infos[layer_count - 1].output : input_shape;
  static constexpr std::size_t input_features = input_shape.elements();
  static constexpr std::size_t output_features = output_shape.elements();

  // The mesh axis the batch is split over, and the model as the planner sees it.
  static constexpr std::size_t batch_axis = Dist::value.batch_axis;
  // `loss_values`: the floats the loss step reduces (the loss sum and one count per metric, as
  // doubles).
  static constexpr model_desc describe(loss_kind loss = loss_kind::none,
                                       std::size_t loss_values = 1) {
    model_desc m{input_shape, {}, layer_count, loss, 4, false, loss_values};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((m.ops[I] = Layers::plan_op(layer_infos[I].name.view())), ...);
    }(std::make_index_sequence<layer_count>{});
    return m;
  }

  // Builds the model on the distribution's mesh, bound to the job's processes (a mesh whose size
  // differs from the number of processes is an error naming both). Every process draws the same
  // initial weights: they are keyed by the seed (device 0's, if processes set different ones)
  // and each variable's path, not by the process.
  explicit basic_sequential(std::string name = "sequential")
      : name_(std::move(name)),
        pm_(bind_mesh()),
        seed_(common_seed(pm_)),
        layers_(make_layers(std::make_index_sequence<layer_count>{})) {
    for (std::size_t j = 0; j < layer_count; ++j) {
      const std::string prefix = std::string(layer_infos[j].name.view()) + "/";
      for (auto& v : vars_)
        if (v.path.starts_with(prefix)) layer_vars_[j].push_back(&v);
    }
    replan();
  }
  basic_sequential(const basic_sequential&) = delete;
  basic_sequential& operator=(const basic_sequential&) = delete;

  const std::string& name() const { return name_; }

  // ---- state ---------------------------------------------------------------------------------
  std::vector<variable<B>*> variables() {
    return pointers([](const variable<B>&) { return true; });
  }
  std::vector<variable<B>*> trainable_variables() {
    return pointers([](const variable<B>& v) { return v.trainable; });
  }
  std::vector<variable<B>*> non_trainable_variables() {
    return pointers([](const variable<B>& v) { return !v.trainable; });
  }
  variable<B>& get_variable(std::string_view path) {
    for (auto& v : vars_)
      if (v.path == path) return v;
    throw value_error("No variable named '" + std::string(path) + "' in model '" + name_ + "'.");
  }
  std::size_t count_params() const {
    std::size_t n = 0;
    for (const auto& v : vars_) n += v.size();
    return n;
  }
  std::vector<std::vector<float>> get_weights() const override {
    std::vector<std::vector<float>> out;
    for (const auto& v : vars_) out.push_back(v.numpy());
    return out;
  }
  // Loads weights. On a distributed model every process calls it, and the values of the
  // process at device 0 are broadcast, so the replicas stay identical.
  void set_weights(const std::vector<std::vector<float>>& w) override {
    if (w.size() != vars_.size())
      throw value_error("You called `set_weights(weights)` on model '" + name_ + "' with " +
                        std::to_string(w.size()) + " arrays, but the model has " +
                        std::to_string(vars_.size()) + " variables.");
    on_every_process("set_weights", [&] {
      std::size_t i = 0;
      for (auto& v : vars_) v.assign(w[i++]);
    });
    for (auto& v : vars_) pm_.broadcast_from_device_0(B::comm_span(v.value));
  }
  bool is_chief() const override { return pm_.is_chief(); }
  std::optional<bool> metric_increases(std::string_view name) const override {
    for (const auto& m : metrics_)
      if (m.name == name) return true;  // the accuracies
    return std::nullopt;
  }

  // ---- compile -------------------------------------------------------------------------------
  // compile()'s keyword arguments, with Keras's default optimizer.
  struct compile_options {
    optimizer_spec optimizer = "rmsprop";
    loss_spec loss = losses::mean_squared_error{};
    std::vector<metrics::metric_arg> metrics = {};
  };
  void compile(compile_options o) {
    compile(std::move(o.optimizer), std::move(o.loss), std::move(o.metrics));
  }
  void compile(optimizer_spec optimizer_, loss_spec loss,
               std::vector<metrics::metric_arg> metric_list = {}) {
    optimizer_state_.emplace(std::move(optimizer_));
    loss_.emplace(std::move(loss));
    metrics_.clear();
    for (const auto& m : metric_list) metrics_.push_back(m.resolve(loss_->sparse_labels()));
    metric_means_.assign(metrics_.size(), metrics::mean{});
    for (std::size_t i = 0; i < metrics_.size(); ++i)
      metric_means_[i] = metrics::mean(metrics_[i].name);
    replan();
  }

  // ---- distribution ---------------------------------------------------------------------------
  // The mesh bound to the processes, with one communicator per axis.
  const mesh_binding& mesh() const noexcept { return pm_; }
  // The communication plan of a training step (global batch unknown: bytes per sample unknown).
  const model_plan& plan() const noexcept { return plan_; }
  // The plan of a training step on a global batch of `global_batch`, as text: variables and
  // their layouts, and every collective with its mesh axis and bytes.
  std::string explain(std::size_t global_batch) const {
    const model_desc d = describe(plan_loss(), loss_values());
    return tessel::explain(plan_model(Dist::value, pm_.shape(), d, global_batch), d);
  }
  // Bucket size and overlap of the gradient reduction (DDP's bucket_cap_mb, default 25).
  // Gradient views taken before (copies of variable::gradient) do not follow the new buffer.
  void set_gradient_options(gradient_options o) {
    if (!(o.bucket_cap_mb > 0) || !std::isfinite(o.bucket_cap_mb))
      throw value_error("set_gradient_options: bucket_cap_mb must be a positive number of MB, "
                        "got " + std::to_string(o.bucket_cap_mb));
    grad_options_ = o;
    build_buckets();
  }
  const gradient_options& get_gradient_options() const noexcept { return grad_options_; }
  std::size_t gradient_bucket_count() const noexcept { return buckets_.size(); }
  const tessel::communication_stats& communication_stats() const noexcept {
    return buckets_.stats();
  }
  void reset_communication_stats() { buckets_.reset_stats(); }
  optimizer<B>& get_optimizer() {
    require_compiled("get_optimizer");
    return *optimizer_state_;
  }

  // ---- the custom-training-loop pieces ------------------------------------------------------
  // Forward pass on a batch; returns the output (rows = batch) in device memory.
  // It runs on this process alone, on every row of x.
  const matrix& call(const array<float>& x, bool training = false) {
    upload_inputs(x, 0, x.rows());
    pass_.training = training;
    pass_.first_row = 0;
    return forward(input_);
  }
  // Loss of the batch and the gradient of every trainable variable (in variable::gradient), as
  // Keras's `compute_loss_and_updates` + `jax.grad` give them. Updates the compiled metrics.
  // On a distributed model x and y are the global batch: each process takes its block of rows
  // along the batch axis, and the gradients (reduced in buckets during the backward pass), the
  // loss and the metrics are those of the whole batch.
  template <class Y>
  double compute_loss_and_gradients(const array<float>& x, const array<Y>& y) {
    require_compiled("compute_loss_and_gradients");
    const std::size_t global = forward_and_loss(x, y, true);
    buckets_.begin();
    backward(loss_grad_);
    buckets_.finish();
    ++pass_.step;  // the next training call draws new dropout masks, as Keras's seed generator
    return finish_metrics(global);
  }
  // The counter of training calls that keys dropout masks. Setting it replays a call's masks
  // (Keras's stateless_call takes its seed state as an argument for the same purpose).
  std::uint64_t training_step() const { return pass_.step; }
  void set_training_step(std::uint64_t step) { pass_.step = step; }
  // One optimizer step on the gradients computed last (Keras's optimizer.apply).
  void apply_gradients() {
    require_compiled("apply_gradients");
    optimizer_state_->apply(trainable_variables());
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
    history hist;
    std::vector<callback*> cbs{&hist};
    for (const auto& c : o.callbacks) cbs.push_back(c.get());
    for (callback* c : cbs) c->set_model(this);
    const int verbose = shown_verbosity(o.verbose);
    if (known_steps(train) == std::size_t{0}) throw empty_data("fit", "the training data", "train on");
    progbar_logger bar(verbose, o.epochs, known_steps(train));
    stop_training = false;
    bar.on_train_begin();
    // A callback that fails here (csv_logger's file, on process 0 only) fails fit() on every
    // process, so that none goes on to wait in a training step for the others.
    on_every_process("a callback's on_train_begin", [&] {
      for (callback* c : cbs) c->on_train_begin({});
    });
    logs epoch_logs;
    for (std::size_t epoch = o.initial_epoch; epoch < o.epochs && !stop_training; ++epoch) {
      reset_metrics();
      if (verbose) bar.on_epoch_begin(epoch);
      for (callback* c : cbs) c->on_epoch_begin(epoch, {});
      std::size_t step = 0;
      for (const auto& element : train) {
        const auto& [x, y] = element;
        for (callback* c : cbs) c->on_train_batch_begin(step, {});
        const logs l = train_on_batch(x, y, false);
        if (verbose) bar.on_train_batch_end(step, sorted_logs(l));
        for (callback* c : cbs) c->on_train_batch_end(step, l);
        ++step;
        if (stop_training) break;
      }
      if (step == 0) throw empty_data("fit", "the training data", "train on");
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
    return hist;
  }

  // fit(x, y, batch_size=32, shuffle=True, ...) on arrays, as Keras's fit takes NumPy arrays.
  struct array_fit_options {
    std::size_t batch_size = 32;
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
    auto batched = o.shuffle ? ds.shuffle(static_cast<std::int64_t>(x.rows()), seed_)
                                   .batch(static_cast<std::int64_t>(o.batch_size))
                             : ds.batch(static_cast<std::int64_t>(o.batch_size));
    return fit(batched, fit_options<decltype(batched)>{.epochs = o.epochs,
                                                        .verbose = o.verbose,
                                                        .callbacks = o.callbacks,
                                                        .validation_data = std::nullopt,
                                                        .initial_epoch = o.initial_epoch});
  }
  template <class Y>
  logs evaluate(const array<float>& x, const array<Y>& y, std::size_t batch_size = 32,
                int verbose = 1) {
    check_batch_size("evaluate", batch_size);
    return evaluate(from_tensor_slices(x, y).batch(static_cast<std::int64_t>(batch_size)),
                    verbose);
  }

  // Returns the loss and metrics over the whole dataset (Keras's evaluate with return_dict).
  template <class Dataset>
  logs evaluate(const Dataset& data, int verbose = 1, std::vector<callback_ref> callbacks = {}) {
    require_compiled("evaluate");
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
  array<float> predict(const array<float>& x, std::size_t batch_size = 32, int verbose = 0) {
    check_batch_size("predict", batch_size);
    check_input_shape(x);
    const std::size_t n = x.rows();
    if (n == 0) throw empty_data("predict", "x", "predict");
    std::vector<std::size_t> shape{n};
    for (std::size_t i = 0; i < output_shape.rank; ++i) shape.push_back(output_shape[i]);
    array<float> out(shape);
    std::optional<progbar_logger> bar;
    const std::size_t steps = (n + batch_size - 1) / batch_size;
    verbose = shown_verbosity(verbose);
    if (verbose) {
      bar.emplace(verbose, 1, steps);
      bar->on_predict_begin();
    }
    for (std::size_t b = 0; b < steps; ++b) {
      const std::size_t begin = b * batch_size, end = std::min(n, begin + batch_size);
      const shard s = shard_of(end - begin);
      upload_inputs(x, begin + s.first, s.local);
      pass_.training = false;
      pass_.first_row = s.first;
      const matrix& y = forward(input_);
      gather_rows(y, s, std::span<float>(out.values.data() + begin * output_features,
                                         (end - begin) * output_features));
      if (bar) bar->on_predict_batch_end(b);
    }
    if (bar) bar->on_predict_end();
    return out;
  }

  // ---- summary -------------------------------------------------------------------------------
  std::string summary_text() const {
    std::vector<summary_row> rows;
    std::size_t index = 0;
    auto add = [&](std::string_view name, std::string_view cls, const shape_value& out,
                   std::size_t params) {
      summary_row r;
      r.layer = std::string(name) + " (" + std::string(cls) + ")";
      r.output_shape = "(None" + [&] {
        std::string s;
        for (std::size_t i = 0; i < out.rank; ++i) s += ", " + std::to_string(out[i]);
        return s;
      }() + ")";
      r.params = params;
      for (const auto& v : vars_)
        if (v.path.starts_with(std::string(name) + "/"))
          r.layouts.push_back(v.path.substr(name.size() + 1) + " " + replicated_layout(v.shape));
      rows.push_back(std::move(r));
      ++index;
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (add(layer_infos[I].name.view(), Layers::class_name, layer_infos[I].output,
           Layers::param_count(layer_infos[I].input)),
       ...);
    }
    (std::make_index_sequence<layer_count>{});
    std::size_t trainable = 0, non_trainable = 0;
    for (const auto& v : vars_) (v.trainable ? trainable : non_trainable) += v.size();
    return format_summary(name_, rows, trainable, non_trainable);
  }
  // Printed by the process at device 0 only.
  void summary() const {
    if (pm_.is_chief()) std::cout << summary_text() << std::flush;
  }

 private:
  static mesh_binding bind_mesh() {
    if constexpr (std::is_same_v<Dist, one_device>) return mesh_binding::local();
    else return mesh_binding::bind();
  }
  // The compiled loss as the planner knows it (none before compile).
  loss_kind plan_loss() const { return loss_ ? loss_->plan_kind() : loss_kind::none; }
  // The loss step carries the loss sum and one count per metric, as doubles (two floats each).
  std::size_t loss_values() const { return 2 * (1 + metrics_.size()); }
  // Every process starts from device 0's seed: processes given different seeds
  // (set_random_seed(1000 + rank)) would otherwise build different replicas.
  static std::uint64_t common_seed(const mesh_binding& pm) {
    std::uint64_t s = utils::random_seed();
    pm.broadcast_from_device_0(std::span<std::uint64_t>(&s, 1));
    return s;
  }
  // Runs `f` on every process; if it throws on any, it throws on all (the original error where
  // it happened), so that no process goes on to a collective the others never reach.
  template <class F>
  void on_every_process(const char* what, F&& f) const {
    std::exception_ptr error;
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
    const int failed = pm_.count(error != nullptr);
    if (error) std::rethrow_exception(error);
    if (failed > 0)
      throw runtime_error(std::string(what) + " failed on " + std::to_string(failed) +
                          " other process(es); their error says why");
  }
  // Progress output comes from the process at device 0 only.
  int shown_verbosity(int verbose) const { return pm_.is_chief() ? verbose : 0; }

  // ---- the plan -------------------------------------------------------------------------------
  // Plans a training step on the bound mesh and turns its collectives into work: the gradient
  // all_reduces into buckets, the loss all_reduce into the reduction of the loss and metric
  // sums. A collective this model cannot perform yet is refused here, before any step runs.
  void replan() {
    const model_desc d = describe(plan_loss(), loss_values());
    plan_ = plan_model(Dist::value, pm_.shape(), d, dynamic_extent);
    if (!plan_.ok) throw value_error(tessel::explain(plan_, d));
    loss_steps_.clear();
    for (const auto& s : plan_) {
      const bool gradient = s.when == phase::backward && s.step.kind == collective::all_reduce &&
                            is_gradient_of_variable(s.role);
      const bool loss_sum = s.when == phase::forward && s.role == step_role::loss;
      if (loss_sum) loss_steps_.push_back(s.step);
      if (!gradient && !loss_sum)
        throw value_error("tessel::sequential: the plan needs " + to_string(s.step, plan_.mesh) +
                          " of '" + std::string(role_name(s.role)) + "' in layer '" +
                          std::string(layer_infos[s.op].name.view()) +
                          "', which data-parallel training does not perform");
    }
    build_buckets();
  }
  void build_buckets() {
    std::vector<typename gradient_buckets<B, mesh_type, communicator_type>::entry> entries;
    for (const auto& s : plan_) {
      if (s.when != phase::backward) continue;
      const std::string leaf = s.role == step_role::kernel_gradient ? "/kernel" : "/bias";
      entries.push_back(
          {&get_variable(std::string(layer_infos[s.op].name.view()) + leaf), s.step});
    }
    buckets_.build(pm_, std::move(entries), grad_options_);
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
    return block_of(global, pm_.mesh().extent(batch_axis), pm_.coordinates()[batch_axis]);
  }
  // The rows of every process's `local` output, in order, into `out` (the whole batch).
  // Every process sends a block of s.block rows (the rows it holds, then zeros), so that the
  // planned all_gather of equal blocks serves batches that do not divide too.
  void gather_rows(const matrix& local, const shard& s, std::span<float> out) {
    host_gather_.assign(s.block * output_features, 0.0f);
    B::download(local, std::span<float>(host_gather_).first(s.local * output_features));
    const reshard_plan r = plan_reshard(plan_.activations[plan_.activation_count - 1].layout,
                                        layout_value::replicated(2), pm_.shape(),
                                        shape_value{s.global, output_features});
    if (r.empty()) {
      std::copy_n(host_gather_.begin(), s.local * output_features, out.begin());
      return;
    }
    for (const auto& step : r)
      if (step.kind != collective::all_gather || r.size() != 1)
        throw value_error("tessel::sequential::predict: the output needs " +
                          to_string(step, plan_.mesh) + ", which predict does not perform");
    const std::size_t n = pm_.mesh().extent(batch_axis);
    if (n * s.block == s.global) {
      comm::run_step(pm_, r[0], std::span<const float>(host_gather_), out);
      return;
    }
    gathered_.resize(n * host_gather_.size());
    comm::run_step(pm_, r[0], std::span<const float>(host_gather_), std::span<float>(gathered_));
    for (std::size_t c = 0; c < n; ++c) {
      const shard p = block_of(s.global, n, c);
      std::copy_n(gathered_.begin() + static_cast<std::ptrdiff_t>(c * host_gather_.size()),
                  p.local * output_features,
                  out.begin() + static_cast<std::ptrdiff_t>(p.first * output_features));
    }
  }
  // Starts the reduction of this process's loss and metric sums (the plan's "loss" steps).
  void start_scalar_reduction() {
    if (loss_steps_.size() == 1) {
      scalar_request_ = comm::start_step(pm_, loss_steps_[0], std::span<const double>(scalars_),
                                         std::span<double>(scalars_));
    } else {
      for (const auto& step : loss_steps_)
        comm::run_step(pm_, step, std::span<const double>(scalars_), std::span<double>(scalars_));
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

  // Single device: every variable is whole on it.
  static std::string replicated_layout(const std::vector<std::size_t>& shape) {
    std::string s = "(";
    for (std::size_t i = 0; i < shape.size(); ++i) s += i ? ", None" : "None";
    return s + (shape.size() == 1 ? ",)" : ")");
  }
  // ---- layers -----------------------------------------------------------------------------------
  template <std::size_t... I>
  std::tuple<typename Layers::template runtime<B>...> make_layers(std::index_sequence<I...>) {
    return {typename Layers::template runtime<B>(layer_infos[I], vars_, seed_)...};
  }
  // Layer I computes its input gradient only when some layer before it has variables.
  template <std::size_t I>
  static constexpr bool needs_input_gradient() {
    constexpr std::array<bool, layer_count + 1> has{Layers::has_variables..., false};
    for (std::size_t j = 0; j < I; ++j)
      if (has[j]) return true;
    return false;
  }
  const matrix& forward(const matrix& x) {
    const matrix* cur = &x;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((inputs_[I] = cur, cur = &std::get<I>(layers_).forward(*cur, pass_)), ...);
    }
    (std::make_index_sequence<layer_count>{});
    return *cur;
  }
  // Layers before the first one with variables run no backward: nothing needs their gradient,
  // and the layer after them returned none (an activation there would read an empty dy).
  template <std::size_t I>
  static constexpr bool needs_backward() {
    constexpr std::array<bool, layer_count + 1> has{Layers::has_variables..., false};
    return has[I] || needs_input_gradient<I>();
  }
  void backward(const matrix& dy) {
    const matrix* g = &dy;
    auto step = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      if constexpr (needs_backward<J>()) {
        g = &std::get<J>(layers_).backward(*inputs_[J], *g, needs_input_gradient<J>(), pass_);
        if (!buckets_.empty()) {
          for (const variable<B>* v : layer_vars_[J]) buckets_.ready(v);
          buckets_.progress();
        }
      }
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (step(std::integral_constant<std::size_t, layer_count - 1 - I>{}), ...);
    }
    (std::make_index_sequence<layer_count>{});
  }

  // The steps of one pass, when finite and known (a repeated dataset never ends: no target).
  template <class Dataset>
  static std::optional<std::size_t> known_steps(const Dataset& d) {
    const std::optional<std::size_t> n = d.cardinality();
    if (n && *n == std::numeric_limits<std::size_t>::max()) return std::nullopt;
    return n;
  }
  // ---- data -------------------------------------------------------------------------------------
  // x's values against its shape, then its shape against the model's input.
  void check_input_shape(const array<float>& x) const {
    data::check_shape(x, "x");
    bool ok = x.rank() == input_shape.rank + 1;
    for (std::size_t i = 0; ok && i < input_shape.rank; ++i) ok = x.shape[i + 1] == input_shape[i];
    if (!ok) {
      std::string expected = "(None";
      for (std::size_t i = 0; i < input_shape.rank; ++i)
        expected += ", " + std::to_string(input_shape[i]);
      expected += ")";
      throw value_error("Input 0 of layer \"" + std::string(layer_infos[0].name.view()) +
                        "\" is incompatible with the layer: expected shape=" + expected +
                        ", found shape=" + shape_to_string(x.shape) +
                        ". Reshape the data so that each sample has the model's input shape.");
    }
  }
  // Rows [first, first + rows) of x.
  void upload_inputs(const array<float>& x, std::size_t first, std::size_t rows) {
    check_input_shape(x);
    input_ = sized<B>(input_store_, rows, input_features, "input");
    B::upload(std::span<const float>(x.values).subspan(first * input_features,
                                                       rows * input_features),
              input_);
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
  // This process's sums: the loss, then each metric's count of hits.
  void local_sums(const matrix& out, double loss_sum) {
    scalars_.assign(metrics_.size() + 1, 0.0);
    scalars_[0] = loss_sum;
    for (std::size_t i = 0; i < metrics_.size(); ++i) {
      const std::size_t hits =
          metrics_[i].kind == metrics::metric_kind::sparse_categorical_accuracy
              ? (require_sparse(metrics_[i]), B::count_argmax_equal(out, labels_, targets_))
              : B::count_argmax_equal(out, typename B::index_vector(), targets_);
      scalars_[i + 1] = static_cast<double>(hits);
    }
  }
  void require_sparse(const metrics::metric_spec& m) const {
    if (!loss_->sparse_labels())
      throw value_error("Metric " + m.name + " takes integer labels, but the loss " +
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
    const shard s = shard_of(x.rows());
    upload_inputs(x, s.first, s.local);
    upload_targets(y, x.rows(), s.first, s.local);
    pass_.training = training;
    pass_.first_row = s.first;
    const matrix& out = forward(input_);
    loss_grad_ = sized<B>(loss_grad_store_, s.local, output_features, "loss_gradient");
    const double loss_sum = loss_and_gradient<B>(*loss_, out, labels_, targets_, loss_grad_,
                                                 1.0f / static_cast<float>(s.global));
    local_sums(out, loss_sum);
    start_scalar_reduction();
    return s.global;
  }
  static void check_batch_size(const char* what, std::size_t batch_size) {
    if (batch_size == 0)
      throw value_error(std::string(what) +
                        ": batch_size must be greater than zero, got 0; pass the number of "
                        "samples per batch (Keras's default is 32)");
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
  template <class P>
  std::vector<variable<B>*> pointers(P pred) {
    std::vector<variable<B>*> out;
    for (auto& v : vars_)
      if (pred(v)) out.push_back(&v);
    return out;
  }

  std::string name_;
  mesh_binding pm_;
  std::uint64_t seed_;
  variable_store<B> vars_;
  std::tuple<typename Layers::template runtime<B>...> layers_;
  std::array<const matrix*, layer_count + 1> inputs_{};
  pass_context pass_{.training = false, .step = 0, .first_row = 0, .seed = 0};
  matrix input_store_, input_, loss_grad_store_, loss_grad_, targets_store_, targets_;
  typename B::index_vector labels_;
  std::size_t labels_rows_ = 0;
  std::vector<std::int32_t> host_labels_;
  std::vector<float> host_targets_;
  std::optional<optimizer<B>> optimizer_state_;
  std::optional<loss_spec> loss_;
  std::vector<metrics::metric_spec> metrics_;
  metrics::mean loss_tracker_{"loss"};
  std::vector<metrics::mean> metric_means_;
  // distribution
  model_plan plan_{};
  std::vector<reshard_step> loss_steps_;
  std::array<std::vector<variable<B>*>, layer_count> layer_vars_{};
  gradient_options grad_options_{};
  gradient_buckets<B, mesh_type, communicator_type> buckets_;
  std::vector<double> scalars_;
  typename communicator_type::request scalar_request_;
  std::vector<float> host_gather_, gathered_;
};

namespace detail {
template <class First, class... Rest>
struct make_sequential {
  using type = basic_sequential<default_backend, one_device, First, Rest...>;
};
template <class First, class... Rest>
  requires is_distribution<First>
struct make_sequential<First, Rest...> {
  using type = basic_sequential<default_backend, First, Rest...>;
};
}  // namespace detail

// `sequential<layers::input<784>, layers::dense<256, {.activation = "relu"}>, ...>`: a model on
// its own process. With a distribution first, `sequential<data_parallel<>, layers::input<784>,
// ...>`, it is built distributed over the job's processes (Keras's set_distribution before
// building the model).
template <class First, class... Rest>
using sequential = typename detail::make_sequential<First, Rest...>::type;

}  // namespace tessel
