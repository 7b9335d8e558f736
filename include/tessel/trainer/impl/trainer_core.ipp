// trainer_core's members (trainer/trainer_core.hpp), defined outside the class so that
// `extern template` keeps every translation unit but tessel::tessel from compiling them: GCC
// compiles a member defined inside its class wherever it might inline it.
#pragma once

namespace tessel {
inline namespace TESSEL_LIMITS_NAMESPACE {

template <class B, class C>
trainer_core<B, C>::trainer_core(const trained_model_facts& facts) : facts_(facts) {}

template <class B, class C>
trainer_core<B, C>::~trainer_core() {}

template <class B, class C>
void trainer_core<B, C>::attach(const bound_mesh<C>& pm, tensor_resharder<B, C>& reshard) {
  pm_ = &pm;
  reshard_ = &reshard;
  replan();
}

// ---- compile ---------------------------------------------------------------------------------
template <class B, class C>
void trainer_core<B, C>::compile(compile_options o) {
  compile(std::move(o.optimizer), std::move(o.loss), std::move(o.metrics));
}

template <class B, class C>
void trainer_core<B, C>::compile(optimizer_function<B> optimizer_, loss_function<B> loss,
                                 std::vector<metrics::metric_arg<B>> metric_list) {
  optimizer_state_.emplace(std::move(optimizer_));
  norms_set_ = false;
  loss_.emplace(std::move(loss));
  metrics_.clear();
  for (const auto& m : metric_list) metrics_.push_back(m.resolve(loss_->sparse_labels()));
  metric_means_.assign(metrics_.size(), metrics::mean{});
  sums_ = B::make_sums("loss_and_metric_sums", 1 + metrics_.size());
  for (std::size_t i = 0; i < metrics_.size(); ++i)
    metric_means_[i] = metrics::mean(metrics_[i].name());
  // Compiled in a strategy's scope: its communication options' gradient buckets.
  if (detail::strategy_scope.gradient != nullptr) grad_options_ = *detail::strategy_scope.gradient;
  replan();
}

template <class B, class C>
std::optional<saving::compile_info> trainer_core<B, C>::compiled_info() const {
  if (!optimizer_state_ || !loss_) return std::nullopt;
  saving::compile_info compiled{optimizer_state_->spec().config(),
                                optimizer_state_->learning_rate(),
                                std::string(loss_->name()), loss_->plan_rule(), {}};
  for (const auto& m : metrics_) compiled.metrics.push_back(m.name());
  return compiled;
}

// ---- distribution ----------------------------------------------------------------------------
// The plan, then the bytes each process holds for the variables and the optimizer state (under
// central storage the parameter device alone holds the optimizer state).
template <class B, class C>
std::string trainer_core<B, C>::explain(std::size_t global_batch) const {
  const model_desc d = described();
  const model_plan p = plan_model(facts_.distribution, pm().shape(), d, global_batch);
  std::string text = tessel::explain(p, d);
  std::size_t variables = 0, trainable = 0;
  for (const auto& v : model_state(true, false))
    if (v.is_tensor()) trainable += v.tensor().size() * sizeof(float);
  variables = trainable;
  for (const auto& v : model_state(false, false))
    if (v.is_tensor()) variables += v.tensor().size() * sizeof(float);
  if (global_batch != dynamic_extent && global_batch != 0) {
    if (!p.ok) throw value_error(text);
    text += "memory plan per device: " + memory_text(memory_of(p)) + "\n";
  }
  if (facts_.automatic_layouts)
    text += "layouts chosen by auto_layout, as Keras code:\n" +
            layout_map_code(facts_.distribution);
  text += "memory per process: variables " + detail::bytes_text(variables);
  if (shards_.splits_weights())
    text += ", split over '" + std::string(pm().shape().names[facts_.batch_axis].view()) +
            "': 1/" + std::to_string(pm().axis(facts_.batch_axis).size()) + " of the trainable, " +
            detail::bytes_text(shards_.weight_part_values() * sizeof(float)) +
            ", on each process, gathered per layer";
  if (!optimizer_state_) return text + "; optimizer state: not compiled\n";
  // The gradients' norms (clipnorm, global_clipnorm) summed over the processes that hold parts.
  std::string clipping;
  if (const std::uint32_t axes = norm_axes();
      optimizer_state_->spec().config().clips_norms() && axes != 0) {
    clipping = std::string("gradient clipping (") +
               (optimizer_state_->spec().config().clipnorm > 0.0 ? "clipnorm" : "global_clipnorm") +
               "): the squared norms, " + std::to_string(model_state(true, false).size()) +
               " float64, summed by an all_reduce along";
    for (std::size_t a = 0; a < pm().axis_count(); ++a)
      if ((axes >> a & 1U) != 0)
        clipping += " '" + std::string(pm().shape().names[a].view()) + "'";
    clipping += " each step\n";
  }
  const std::size_t slots = optimizer_state_->slots_per_variable();
  const std::string state = detail::bytes_text(slots * trainable) + " (" +
                            std::string(optimizer_state_->name()) + ", " + std::to_string(slots) +
                            (slots == 1 ? " slot" : " slots") + " per trainable variable)";
  if (sharded() && pm().axis(facts_.batch_axis).size() > 1) {
    const auto n = pm().axis(facts_.batch_axis).size();
    return text + "; optimizer state " + state + ", split over '" +
           std::string(pm().shape().names[facts_.batch_axis].view()) + "': 1/" +
           std::to_string(n) + ", " +
           detail::bytes_text(shards_.empty() ? slots * trainable / static_cast<std::size_t>(n)
                                              : optimizer_state_values() * sizeof(float)) +
           " on each process\n" + clipping;
  }
  if (!central() || pm().size() == 1) return text + "; optimizer state " + state + "\n" + clipping;
  return text + " (a copy, broadcast from process " +
         std::to_string(facts_.distribution.variable_device) +
         " after each update); optimizer state " + state + " on process " +
         std::to_string(facts_.distribution.variable_device) +
         ", which holds the variables (central storage), 0 B on the others\n";
}

template <class B, class C>
void trainer_core<B, C>::set_gradient_options(gradient_options o) {
  if (!(o.bucket_cap_mb > 0) || !std::isfinite(o.bucket_cap_mb))
    throw value_error("set_gradient_options: bucket_cap_mb must be a positive number of MB, "
                      "got " + std::to_string(o.bucket_cap_mb));
  const gradient_options previous = grad_options_;
  grad_options_ = o;
  try {
    build_buckets(bucket_batch_);
  } catch (...) {
    grad_options_ = previous;  // (refused before the buckets changed)
    throw;
  }
}

template <class B, class C>
tessel::communication_stats trainer_core<B, C>::communication_stats() {
  tessel::communication_stats s = buckets_.stats();
  const collective_log& log = reshard_->log();
  for (const auto& t : log.totals)
    s.collectives.push_back(
        {t.kind, std::string(pm().shape().names[t.axis].view()), t.count, t.bytes});
  return s;
}

template <class B, class C>
void trainer_core<B, C>::reset_communication_stats() {
  buckets_.reset_stats();
  reshard_->log().clear();
}

template <class B, class C>
optimizer<B>& trainer_core<B, C>::get_optimizer() {
  require_compiled("get_optimizer");
  return *optimizer_state_;
}

template <class B, class C>
double trainer_core<B, C>::learning_rate() const {
  require_compiled("learning_rate");
  return static_cast<double>(static_cast<float>(optimizer_state_->learning_rate()));
}

template <class B, class C>
void trainer_core<B, C>::set_learning_rate(double learning_rate) {
  require_compiled("set_learning_rate");
  optimizer_state_->set_learning_rate(learning_rate);
}

template <class B, class C>
std::optional<bool> trainer_core<B, C>::metric_increases(std::string_view name) const {
  for (const auto& m : metrics_)
    if (m.name() == name) return m.increases();
  return std::nullopt;
}

// ---- the custom-training-loop pieces -----------------------------------------------------------
template <class B, class C>
template <class Y>
double trainer_core<B, C>::compute_loss_and_gradients(const array<float>& x, const array<Y>& y) {
  require_compiled("compute_loss_and_gradients");
  const double loss = loss_and_gradients(x, y, true);
  gradients_pending_ = true;
  return loss;
}

template <class B, class C>
template <class Y>
double trainer_core<B, C>::loss_and_gradients(const array<float>& x, const array<Y>& y,
                                              bool training) {
  const bool replica = per_replica();
  if (!agreed_) {
    agreed_ = true;
    std::vector<fact> f = model_facts();
    // A replica's rows may differ by one from another's: the rest of the shapes must agree.
    auto shape = [&](std::vector<std::size_t> s) {
      if (replica && !s.empty()) s[0] = 0;
      return shape_fingerprint(s);
    };
    if (!replica) f.push_back(fact::number("the global batch (x's rows)", x.rows()));
    f.push_back(fact::fingerprint("the shape of x", shape(x.shape)));
    f.push_back(fact::fingerprint("the shape of y", shape(y.shape)));
    agree("train_on_batch", f);
  }
  const shard s = replica ? replica_shard(x.rows()) : shard_of(x.rows());
  last_global_batch_ = s.global;
  buckets_for(s.global);
  // (Split weights: the parts, taken back from whole weights a reader made; not while the model
  // runs with a caller's state, whose tensors its variables are.)
  if (callers_state_ == 0) shards_.release();
  const std::size_t global = forward_and_loss(x, y, s, replica ? 0 : s.first, training);
  buckets_.begin();
  shards_.begin_backward();
  model_backward(loss_grad_,
                 {[this](std::span<variable<B>* const> layer_variables) {
                    if (callers_state_ == 0) shards_.gather_layer(layer_variables, false);
                    for (const variable<B>* v : layer_variables) buckets_.open(v);
                  },
                  [this](std::span<variable<B>* const> layer_variables) {
                    if (buckets_.empty()) return;
                    for (const variable<B>* v : layer_variables) buckets_.ready(v);
                    buckets_.progress();
                  }});
  buckets_.finish();
  // The next training call draws new dropout masks, as Keras's seed generator.
  if (training) model_set_training_step(model_training_step() + 1);
  const double loss = finish_metrics(global);
  return replica ? local_loss_ / static_cast<double>(global) : loss;
}

template <class B, class C>
bool trainer_core<B, C>::per_replica() const {
  return detail::strategy_scope.in_replica && !facts_.model_parallel;
}

template <class B, class C>
auto trainer_core<B, C>::replica_shard(std::size_t rows) const -> shard {
  const auto& group = pm().axis(facts_.batch_axis);
  const auto n = static_cast<std::size_t>(group.size());
  const auto me = static_cast<std::size_t>(group.rank());
  std::vector<std::uint64_t> all(n, rows);
  const std::uint64_t mine = rows;
  if (n > 1)
    group.all_gather(std::span<const std::uint64_t>(&mine, 1), std::span<std::uint64_t>(all));
  shard s{0, rows, 0, 0};
  for (std::size_t r = 0; r < n; ++r) {
    s.global += all[r];
    if (r < me) s.first += all[r];
    s.block = std::max<std::size_t>(s.block, all[r]);
  }
  return s;
}

// Under central storage the process that holds the variables updates them once, from the
// gradients reduced to it, and broadcasts them; the others hold no optimizer state.
template <class B, class C>
void trainer_core<B, C>::apply_gradients() {
  require_compiled("apply_gradients");
  if (optimizer_state_->spec().config().clips_norms() && !norms_set_) set_gradient_norms();
  if (!shards_.empty()) shards_.apply(*optimizer_state_);
  else if (holds_variables()) optimizer_state_->apply(model_trainable_variables());
  share_stored_variables();
  gradients_pending_ = false;
}

template <class B, class C>
void trainer_core<B, C>::finalize_variable_values() {
  if (!optimizer_state_ || !optimizer_state_->spec().config().use_ema) return;
  if (!shards_.empty()) shards_.finalize_variable_values(*optimizer_state_);
  else if (holds_variables())
    optimizer_state_->finalize_variable_values(model_trainable_variables());
  share_stored_variables();
}

// Under central storage: the updated variables broadcast from the process that holds them.
template <class B, class C>
void trainer_core<B, C>::share_stored_variables() {
  for (const auto& e : stored_) {
    const std::span<float> values = B::comm_span(e.var->value.local());
    comm::run_step(pm(), e.steps.first(), std::span<const float>(values), values);
    reshard_->log().add({e.steps.first().kind, e.steps.first().axis, 0, 0, values.size_bytes()});
  }
}

template <class B, class C>
std::uint32_t trainer_core<B, C>::norm_axes() const {
  if (central()) return 0;  // the process that updates holds the whole variables
  std::uint32_t axes = 0;
  for (const auto& v : model_state(true, false))
    if (v.is_tensor()) axes |= v.tensor().layout().sharded_axes();
  if (sharded()) axes |= std::uint32_t{1} << facts_.batch_axis;
  for (std::size_t a = 0; a < pm().axis_count(); ++a)
    if (pm().axis(a).size() == 1) axes &= ~(std::uint32_t{1} << a);
  return axes;
}

template <class B, class C>
bool trainer_core<B, C>::counts_norm_of(const variable<B>& v, std::uint32_t axes) const {
  // The processes that differ only on an axis the variable is not split over hold the same
  // block (a split state's parts differ on the batch axis): the first of them counts it.
  std::uint32_t same = axes & ~v.value.layout().sharded_axes();
  if (sharded()) same &= ~(std::uint32_t{1} << facts_.batch_axis);
  for (std::size_t a = 0; a < pm().axis_count(); ++a)
    if ((same >> a & 1U) != 0 && pm().coordinate(a) != 0) return false;
  return true;
}

template <class B, class C>
std::function<void(std::span<double>)> trainer_core<B, C>::norm_sum(std::uint32_t axes) {
  if (axes == 0) return {};
  return [this, axes](std::span<double> squares) {
    for (std::size_t a = 0; a < pm().axis_count(); ++a) {
      if ((axes >> a & 1U) == 0) continue;
      pm().axis(a).all_reduce(squares);
      reshard_->log().add({collective::all_reduce, static_cast<std::uint8_t>(a), 0, 0,
                           squares.size_bytes()});
    }
  };
}

template <class B, class C>
void trainer_core<B, C>::set_gradient_norms() {
  norms_set_ = true;
  const std::uint32_t axes = norm_axes();
  if (!shards_.empty()) {
    shards_.set_gradient_norms(
        [this, axes](const variable<B>& v) { return counts_norm_of(v, axes); }, norm_sum(axes));
    return;
  }
  typename optimizer<B>::gradient_norms norms;
  if (axes != 0) {
    const auto& vars = model_trainable_variables();
    norms.variables = vars.size();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const std::size_t n = optimizers::elements<B>(vars[i]->value.local());
      norms.segments.push_back({{0, n, i, counts_norm_of(*vars[i], axes)}});
    }
    norms.sum = norm_sum(axes);
  }
  optimizer_state_->set_gradient_norms(std::move(norms));
}

template <class B, class C>
bool trainer_core<B, C>::central() const noexcept {
  return facts_.distribution.central_storage();
}
template <class B, class C>
bool trainer_core<B, C>::holds_variables() const {
  return !central() || pm().coordinate(facts_.batch_axis) ==
                           static_cast<std::size_t>(facts_.distribution.variable_device);
}

template <class B, class C>
optimizer<B>* trainer_core<B, C>::optimizer_to_save() {
  if (!optimizer_state_) return nullptr;
  gather_shards();
  if (central()) {
    optimizer_state_->build(model_trainable_variables());
    share_central_state();
  }
  return &*optimizer_state_;
}

template <class B, class C>
optimizer<B>* trainer_core<B, C>::optimizer_to_load() {
  if (!optimizer_state_) return nullptr;
  gather_shards();
  return &*optimizer_state_;
}

// Under a split state (shard_state): the compiled optimizer's whole state gathered from the parts
// (a collective; nothing moves when it is current).
template <class B, class C>
void trainer_core<B, C>::gather_shards() {
  if (!shards_.empty()) shards_.gather_into(*optimizer_state_, model_trainable_variables());
}

template <class B, class C>
void trainer_core<B, C>::whole_weights() {
  draw_deferred();
  shards_.materialize();
}

template <class B, class C>
void trainer_core<B, C>::draw_deferred() {
  if (!deferred_) return;
  for (variable<B>* v : model_trainable_variables()) draw_values(*v);
  deferred_ = false;
}

template <class B, class C>
void trainer_core<B, C>::optimizer_state_written() {
  if (!shards_.empty() && optimizer_state_ && optimizer_state_->built())
    shards_.scatter_from(*optimizer_state_, model_trainable_variables());
}

// Under central storage, before the state is read: the others receive a copy of the optimizer
// state from the process that holds it (its slots, iteration and learning rate), so that every
// process reads, and a checkpoint saves, the one state.
template <class B, class C>
void trainer_core<B, C>::share_central_state() {
  if (!central() || pm().size() == 1) return;
  const auto& group = pm().axis(facts_.batch_axis);
  const int root = facts_.distribution.variable_device;
  state_list<B> s = optimizer_state_->state();
  for (auto& v : s) {
    if (auto* t = std::get_if<basic_dtensor<B>>(&v.value)) {
      group.broadcast(B::comm_span(t->local()), root);
    } else if (auto* i = std::get_if<std::int64_t>(&v.value)) {
      auto u = static_cast<std::uint64_t>(*i);
      group.broadcast(std::span<std::uint64_t>(&u, 1), root);
      *i = static_cast<std::int64_t>(u);
    } else {
      group.broadcast(std::span<double>(&std::get<double>(v.value), 1), root);
    }
  }
  if (!holds_variables()) optimizer_state_->set_state(s);
}

template <class B, class C>
template <class Y>
logs trainer_core<B, C>::train_on_batch(const array<float>& x, const array<Y>& y,
                                        bool reset_metrics) {
  if (reset_metrics) this->reset_metrics();
  compute_loss_and_gradients(x, y);
  apply_gradients();
  return metric_logs();
}

// ---- the training state as one value ---------------------------------------------------------
template <class B, class C>
void trainer_core<B, C>::assign_state_tree(const state_tree<B>& t) {
  const bool optimizer = !t.optimizer_variables.empty(), metrics = !t.metrics_variables.empty();
  if ((optimizer || metrics) && !loss_)
    throw value_error("set_state_tree: the state has optimizer or metric variables, but the "
                      "model is not compiled; call compile() as for the state's model first.");
  whole_weights();
  detail::on_every_process(pm(), "set_state_tree", [&] {
    if (optimizer) {
      optimizer_state_->build(model_trainable_variables());
      optimizer_state_->check_state(t.optimizer_variables);
    }
    if (metrics)
      detail::check_state_list(metrics_state(), t.metrics_variables, "set_state_tree",
                               "metrics_variables");
  });
  model_assign_state(t.trainable_variables, t.non_trainable_variables);
  if (optimizer) {
    optimizer_state_->set_state(t.optimizer_variables);
    optimizer_state_written();
  }
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

template <class B, class C>
typename trainer_core<B, C>::stateless_call_result trainer_core<B, C>::stateless_call(
    const state_list<B>& trainable, const state_list<B>& non_trainable, const array<float>& x,
    bool training) {
  if (x.rows() == 0)
    throw value_error("stateless_call: x has no samples (shape " + shape_to_string(x.shape) +
                      "); pass at least one.");
  model_check_input_shape(x);
  stateless_call_result r;
  model_with_state(trainable, non_trainable, "stateless_call", [&] {
    const shard s = shard_of(x.rows());
    r.y_pred =
        copy_of(model_forward_rows(x, s.first, s.first, s.local, s.global, training), "y_pred");
    if (training) model_set_training_step(model_training_step() + 1);
    r.non_trainable_variables = model_state(false, true);
  });
  return r;
}

template <class B, class C>
template <class Y>
typename trainer_core<B, C>::value_and_grad_result trainer_core<B, C>::value_and_grad(
    const state_list<B>& trainable, const state_list<B>& non_trainable, const array<float>& x,
    const array<Y>& y, bool training) {
  require_compiled("value_and_grad");
  if (buckets_.transient() || shards_.splits_weights())
    throw value_error(
        std::string("value_and_grad: under shard_state::") +
        (shards_.splits_weights() ? "weights" : "gradients") +
        " each process keeps only its part of the summed gradients (reduce-scattered), so there "
        "are no whole gradients to return; use shard_state::optimizer or shard_state::none for "
        "value_and_grad");
  // What the call changes of the model is put back: the metrics, and the gradients that
  // compute_loss_and_gradients left for apply_gradients (value_and_grad computes in the same
  // buffers).
  const metrics::mean loss_tracker = loss_tracker_;
  const std::vector<metrics::mean> means = metric_means_;
  std::vector<basic_dtensor<B>> pending;
  if (gradients_pending_)
    for (variable<B>* v : model_trainable_variables())
      pending.push_back(copy_of(v->value.like(v->gradient), v->path));
  struct restore_model {
    trainer_core* t;
    const metrics::mean& loss;
    const std::vector<metrics::mean>& means;
    const std::vector<basic_dtensor<B>>& pending;
    ~restore_model() {
      t->loss_tracker_ = loss;
      t->metric_means_ = means;
      std::size_t i = 0;
      if (!pending.empty())
        for (variable<B>* v : t->model_trainable_variables())
          B::copy(pending[i++].local(), v->gradient);
    }
  } guard{this, loss_tracker, means, pending};
  value_and_grad_result r;
  model_with_state(trainable, non_trainable, "value_and_grad", [&] {
    r.loss = loss_and_gradients(x, y, training);
    for (variable<B>* v : model_trainable_variables())
      r.grads.push_back({v->path, v->shape, copy_of(v->value.like(v->gradient), v->path)});
    r.non_trainable_variables = model_state(false, true);
  });
  return r;
}

template <class B, class C>
logs trainer_core<B, C>::metric_logs() const {
  logs l{{"loss", loss_tracker_.result()}};
  for (const auto& m : metric_means_) l.emplace_back(m.name(), m.result());
  return l;
}

template <class B, class C>
void trainer_core<B, C>::reset_metrics() {
  loss_tracker_.reset_state();
  for (auto& m : metric_means_) m.reset_state();
}

// ---- fit / evaluate / predict ----------------------------------------------------------------
template <class B, class C>
template <class Dataset>
history trainer_core<B, C>::fit(const Dataset& train, const fit_options<Dataset>& o) {
  require_compiled("fit");
  {
    std::vector<fact> f = model_facts();
    train_facts_ = train.facts();
    f.insert(f.end(), train_facts_.begin(), train_facts_.end());
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
  position_ = {o.initial_epoch, 0, passes_of(train), train_facts_};
  // A callback that fails here (csv_logger's file, on process 0 only) fails fit() on every
  // process, so that none goes on to wait in a training step for the others.
  detail::on_every_process(pm(), "a callback's on_train_begin", [&] {
    for (callback* c : cbs) c->on_train_begin({});
  });
  // A callback that restored a checkpoint (backup_and_restore) asked to go on from its
  // position: that epoch, drawing its order again, past the batches already done.
  std::size_t first_epoch = o.initial_epoch, done = 0;
  if (resume_) {
    detail::check_resume(*resume_, train_facts_);
    first_epoch = resume_->epoch;
    done = resume_->step;
    if constexpr (requires { train.set_iterations(resume_->data_pass); })
      train.set_iterations(resume_->data_pass);
  }
  logs epoch_logs;
  for (std::size_t epoch = first_epoch; epoch < o.epochs && !stop_training; ++epoch) {
    const std::size_t skip = epoch == first_epoch ? done : 0;
    if (skip == 0) reset_metrics();  // else the checkpoint's accumulators go on
    position_ = {epoch, skip, passes_of(train), train_facts_};
    // Keras's CallbackList calls the user's callbacks first, then History, then the progress bar.
    for (callback* c : cbs) c->on_epoch_begin(epoch, {});
    if (verbose) bar.on_epoch_begin(epoch);
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
    if (skip > 0 && step < skip && !stop_training)
      throw value_error("fit: the restored backup stopped after batch " + std::to_string(skip) +
                        " of epoch " + std::to_string(epoch + 1) + ", but this epoch's data has " +
                        std::to_string(step) +
                        " batches: the training data is not the data of the interrupted run. "
                        "Resume with that data, or remove the backup directory to train from the "
                        "start");
    position_ = {epoch + 1, 0, passes_of(train), train_facts_};
    epoch_logs = metric_logs();
    if (o.validation_data) {
      const logs v = run_evaluate(*o.validation_data, nullptr, cbs, true);
      for (const auto& [k, val] : v) epoch_logs.emplace_back("val_" + k, val);
    }
    logs shown = sorted_logs(epoch_logs);
    const std::size_t sorted_entries = shown.size();
    for (callback* c : cbs) c->on_epoch_logs(epoch, shown);
    for (callback* c : cbs) c->on_epoch_end(epoch, shown);
    if (verbose) bar.on_epoch_end(epoch, shown, sorted_entries);
  }
  // Keras's fit ends with the optimizer's finalize_variable_values (use_ema: the variables take
  // their moving averages), before on_train_end.
  if (o.epochs > 0) finalize_variable_values();
  for (callback* c : cbs) c->on_train_end(epoch_logs);
  wait_for_checkpoint();  // a save in the background ends with fit
  return hist;
}

template <class B, class C>
template <class Y>
history trainer_core<B, C>::fit(const array<float>& x, const array<Y>& y,
                                const array_fit_options& o) {
  check_batch_size("fit", o.batch_size);
  auto ds = from_tensor_slices(x, y);
  if (x.rows() == 0) throw empty_data("fit", "x", "train on");
  auto batched =
      o.shuffle ? ds.shuffle(static_cast<std::int64_t>(x.rows()), model_seed()).batch(o.batch_size)
                : ds.batch(o.batch_size);
  return fit(batched, fit_options<decltype(batched)>{.epochs = o.epochs,
                                                      .verbose = o.verbose,
                                                      .callbacks = o.callbacks,
                                                      .validation_data = std::nullopt,
                                                      .initial_epoch = o.initial_epoch});
}

template <class B, class C>
template <class Y>
logs trainer_core<B, C>::evaluate(const array<float>& x, const array<Y>& y,
                                  std::int64_t batch_size, int verbose) {
  check_batch_size("evaluate", batch_size);
  return evaluate(from_tensor_slices(x, y).batch(batch_size), verbose);
}

template <class B, class C>
template <class Dataset>
logs trainer_core<B, C>::evaluate(const Dataset& data, int verbose,
                                  std::vector<callback_ref> callbacks) {
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

template <class B, class C>
array<float> trainer_core<B, C>::predict(const array<float>& x, std::int64_t batch_size,
                                         int verbose) {
  check_batch_size("predict", batch_size);
  model_check_input_shape(x);
  const std::size_t n = x.rows();
  if (n == 0) throw empty_data("predict", "x", "predict");
  {
    std::vector<fact> f{fact::fingerprint("the model (its type)", facts_.type_fingerprint),
                        fact::number("the number of samples", n)};
    data::describe_samples(x, "x", f);
    f.push_back(fact::number("predict's batch_size", batch_size));
    agree("predict", f);
  }
  const std::size_t features = facts_.output_features;
  std::vector<std::size_t> shape{n};
  for (std::size_t i = 0; i < facts_.output_shape.rank; ++i)
    shape.push_back(facts_.output_shape[i]);
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
    shards_.begin_pass();
    const basic_dtensor<B>* y =
        &model_forward_rows(x, begin + s.first, s.first, s.local, s.global, false);
    basic_dtensor<B> whole_rows;
    if (splits_classes(*y)) {  // gathered over the class axes first: rows of every class
      layout_value rows = y->layout();
      rows.dims[rows.rank - 1] = {};
      whole_rows = (*reshard_)(*y, rows, prediction_store_, "prediction");
      y = &whole_rows;
    }
    gather_rows(*y, s,
                std::span<float>(out.values.data() + begin * features, (end - begin) * features));
    if (bar) bar->on_predict_batch_end(b);
  }
  if (bar) bar->on_predict_end();
  return out;
}

// ---- the state ---------------------------------------------------------------------------------
// The state tree, its tensors copies (get_state_tree) or the model's own (state_tree_view).
template <class B, class C>
state_tree<B> trainer_core<B, C>::state_tree_of(bool copy) {
  whole_weights();
  state_tree<B> t{model_state(true, copy), model_state(false, copy), {}, {}};
  if (!loss_) return t;
  gather_shards();
  optimizer_state_->build(model_trainable_variables());
  share_central_state();
  t.optimizer_variables = copy ? optimizer_state_->state() : optimizer_state_->state_view();
  t.metrics_variables = metrics_state();
  return t;
}

// The metric accumulators as state: "loss/total", "loss/count", then each metric's.
template <class B, class C>
state_list<B> trainer_core<B, C>::metrics_state() const {
  state_list<B> out;
  auto add = [&](const metrics::mean& m) {
    out.push_back({m.name() + "/total", {}, m.total()});
    out.push_back({m.name() + "/count", {}, m.count()});
  };
  add(loss_tracker_);
  for (const auto& m : metric_means_) add(m);
  return out;
}

// ---- what every process must hold alike (runtime/agreement.hpp) -------------------------------
// Compared across the processes before a distributed fit, evaluate, predict or first
// train_on_batch; a model on one device (or a one-process job) has nothing to compare.
template <class B, class C>
void trainer_core<B, C>::agree(std::string_view where, const std::vector<fact>& facts) const {
  if (pm().size() > 1) runtime::require_agreement(where, facts);
}

// The model's type (its layers and distribution), and what compile() gave it.
template <class B, class C>
std::vector<fact> trainer_core<B, C>::model_facts() const {
  hasher metrics;
  for (const auto& m : metrics_) metrics.value(m.fingerprint());
  // The loss's fingerprint holds its type and every argument (from_logits), not only its
  // kind: binary cross-entropy on logits and on probabilities plan alike and differ in every
  // value.
  return {fact::fingerprint("the model (its type)", facts_.type_fingerprint),
          fact::fingerprint("the compiled loss", loss_->fingerprint()),
          fact::fingerprint("the compiled metrics", metrics.result()),
          fact::fingerprint("the compiled optimizer", optimizer_state_->spec().fingerprint())};
}

// The model as the planner sees it with the compiled loss and metrics (an accuracy takes the
// output's arg-max: over split classes each row's is reduced).
template <class B, class C>
model_desc trainer_core<B, C>::described() const {
  model_desc d = model_describe(plan_loss(), loss_values());
  d.argmax_metrics =
      std::any_of(metrics_.begin(), metrics_.end(), [](const auto& m) { return m.takes_argmax(); });
  return d;
}

// ---- the plan ----------------------------------------------------------------------------------
// Plans a training step on the bound mesh and turns its collectives into work: the gradient
// all_reduces into buckets, the loss all_reduce into the reduction of the loss and metric sums.
// A collective this model cannot perform yet is refused here, before any step runs.
template <class B, class C>
void trainer_core<B, C>::replan() {
  const model_desc d = described();
  plan_ = plan_model(facts_.distribution, pm().shape(), d, dynamic_extent);
  if (!plan_.ok) throw value_error(tessel::explain(plan_, d));
  loss_steps_.clear();
  std::vector<bucket_entry> stored;
  // Each step goes where the planner's tag says (step_runner); the layers, the loss and the
  // buckets find their own steps in the plan, and a split state's all-gathers are the
  // sharded_state's.
  for (const auto& s : plan_) {
    // Central storage: a variable broadcast from where it lives after the update.
    if (s.runner == step_runner::after_update && s.step.kind == collective::broadcast)
      stored.push_back({&model_variable(std::string(plan_.variables[s.index].path.view())),
                        {{s.step}, 1},
                        s.op});
    if (s.runner == step_runner::loss_reduction) loss_steps_.push_back(s.step);
    if (s.runner == step_runner::none)
      throw value_error("tessel::sequential: the plan needs " + to_string(s.step, plan_.mesh) +
                        " of '" + step_name(plan_, s) + "' in layer '" +
                        std::string(model_layer_name(s.op)) +
                        "', which tessel does not execute yet; lay the layers out so that only "
                        "layers with variables need collectives");
  }
  stored_ = std::move(stored);
  build_buckets();
}

// The gradient buckets: every variable gradient whose planned steps are one all_reduce (all of
// them under data_parallel; under model_parallel those partial over the batch axis only: the
// others a layer reduces or reshards in its own steps). Such a variable is marked
// reduced_in_bucket, so that its layer leaves the partial sum to the bucket. Under
// model_parallel the layouts depend on the global batch: the buckets follow the plan of
// `batch`, rebuilt only when the gradients they take change.
template <class B, class C>
auto trainer_core<B, C>::bucket_entries(const model_plan& p) -> std::vector<bucket_entry> {
  std::vector<bucket_entry> entries;
  for (const planned_step* s = p.begin(); s != p.end(); ++s) {
    if (s->when != phase::backward || !is_gradient_of_variable(s->role)) continue;
    // The gradient's steps, from its first: one all_reduce, a reduce, or a reduce then a
    // broadcast over one axis (the distribution's cross_device_ops, central storage).
    gradient_steps g;
    bool first = true, fits = true;
    for (const planned_step* t = p.begin(); t != p.end(); ++t) {
      if (t->op != s->op || t->role != s->role || t->index != s->index) continue;
      if (t < s) first = false;
      if (g.count == g.steps.size()) fits = false;
      else g.steps[g.count++] = t->step;
    }
    if (!first || !fits) continue;
    const collective a = g.steps[0].kind, b = g.steps[1].kind;
    const bool one = g.count == 1 && (a == collective::all_reduce || a == collective::reduce ||
                                      a == collective::reduce_scatter);
    const bool to_one = g.count == 2 && a == collective::reduce && b == collective::broadcast &&
                        g.steps[0].axis == g.steps[1].axis;
    if (!one && !to_one) continue;
    entries.push_back({&model_variable(std::string(p.variables[s->index].path.view())), g, s->op});
  }
  return entries;
}

template <class B, class C>
void trainer_core<B, C>::build_buckets(std::size_t batch) {
  // (Split weights: the layers the plan gathers again before backward.)
  std::vector<std::size_t> backward_gathers;
  const auto entries_of = [&](const model_plan& p) {
    for (const planned_step& s : p)
      if (s.runner == step_runner::split_weights && s.when == phase::backward)
        backward_gathers.push_back(s.op);
    return bucket_entries(p);
  };
  std::vector<bucket_entry> entries =
      batch != dynamic_extent
          ? entries_of(plan_model(facts_.distribution, pm().shape(), described(), batch))
          : entries_of(plan_);
  const auto& group = pm().axis(facts_.batch_axis);
  const std::size_t parts = sharded() ? static_cast<std::size_t>(group.size()) : 1;
  // (Split weights are gathered a bucket at a time: a bucket holds one layer at most.)
  const bool per_layer = facts_.distribution.shard == shard_state::weights;
  buckets_.require_keepable(entries, parts, grad_options_, gradients_pending_, per_layer);
  // (Split weights: the variables' values whole, for the buckets' new layout; those not drawn yet
  // (variable_store::defer) stay so, for the split to draw each process's parts alone.)
  shards_.materialize();
  bucket_batch_ = batch;
  for (variable<B>* v : model_trainable_variables()) v->reduced_in_bucket = false;
  for (const auto& e : entries) e.var->reduced_in_bucket = true;
  // A state split over the batch axis keeps its values through a rebuild: gathered whole before,
  // split again after.
  const bool keep = !shards_.empty() && optimizer_state_;
  if (keep) gather_shards();
  buckets_.build(pm(), std::move(entries), grad_options_, &reshard_->log(), parts,
                 gradients_pending_, per_layer);
  shards_.clear();
  norms_set_ = false;  // (the split state's parts are new)
  // (On one process nothing is split: the optimizer updates the whole model.)
  if (!sharded() || !optimizer_state_ || group.size() == 1) return;
  if (buckets_.places().size() != model_trainable_variables().size()) {
    // The trainable variables the buckets do not take, named (the first three).
    std::string names;
    std::size_t missing = 0;
    for (const variable<B>* v : model_trainable_variables()) {
      if (v->reduced_in_bucket) continue;
      if (++missing <= 3) names += std::string(missing > 1 ? ", '" : "'") + v->path + "'";
    }
    if (missing > 3) names += " and " + std::to_string(missing - 3) + " more";
    throw value_error(
        "tessel: shard_state splits the optimizer state over the gradient buckets, but the "
        "gradient buckets do not take these trainable variables' gradients: " +
        names + " (" + std::to_string(missing) + " of " +
        std::to_string(model_trainable_variables().size()) +
        "). Their plan needs more than the one reduction over the batch axis (explain() lists "
        "the steps). Lay them out so that their gradients need that reduction only (split a bias "
        "as the kernel before it), or use shard_state::none for this model");
  }
  shards_.build(buckets_, group, static_cast<int>(facts_.batch_axis), optimizer_state_->spec(),
                &reshard_->log(), !gradients_pending_,
                facts_.distribution.shard == shard_state::weights, backward_gathers);
  if (keep) optimizer_state_written();
}

template <class B, class C>
std::string trainer_core<B, C>::memory_text(const memory_plan& m) {
  return "weights " + detail::bytes_text(m.weights) + ", gradients " +
         detail::bytes_text(m.gradients) + ", optimizer state " +
         detail::bytes_text(m.optimizer_state) + ", activations " +
         detail::bytes_text(m.activations) + ", activation gradients " +
         detail::bytes_text(m.activation_gradients) + ", communication buffers " +
         detail::bytes_text(m.communication) + "; peak " + detail::bytes_text(m.peak()) +
         " (largest: " + std::string(m.largest()) + ")";
}

// summary()'s last line, once the model has trained: the memory plan of the last global batch.
template <class B, class C>
std::string trainer_core<B, C>::memory_summary() const {
  if (last_global_batch_ == 0) return {};
  return " Memory plan per device (global batch " + std::to_string(last_global_batch_) +
         "): " + memory_text(memory(last_global_batch_)) + "\n";
}

template <class B, class C>
memory_plan trainer_core<B, C>::memory(std::size_t global_batch) const {
  const model_desc d = described();
  const model_plan p = plan_model(facts_.distribution, pm().shape(), d, global_batch);
  if (!p.ok) throw value_error(tessel::explain(p, d));
  return memory_of(p);
}

template <class B, class C>
memory_plan trainer_core<B, C>::memory_of(const model_plan& p) const {
  return plan_memory(p, facts_.distribution,
                     optimizer_state_ ? optimizer_state_->slots_per_variable() : 0, sizeof(float),
                     grad_options_);
}

template <class B, class C>
std::size_t trainer_core<B, C>::optimizer_state_values() const {
  if (!shards_.empty()) return shards_.parts_optimizer().state_values();
  return optimizer_state_ ? optimizer_state_->state_values() : 0;
}

template <class B, class C>
bool trainer_core<B, C>::sharded() const noexcept {
  return facts_.distribution.splits_state();
}

// Under model_parallel, before a training step on a global batch of `batch`: the buckets of
// that batch's plan (rebuilt when its gradients differ from those of the buckets in place).
template <class B, class C>
void trainer_core<B, C>::buckets_for(std::size_t batch) {
  if (!facts_.model_parallel || batch == bucket_batch_) return;
  const model_plan p = plan_model(facts_.distribution, pm().shape(), described(), batch);
  if (!p.ok) return;  // the step refuses the batch, with the reason
  const auto entries = bucket_entries(p);
  bool same = entries.size() == buckets_.entry_count();
  for (std::size_t i = 0; same && i < entries.size(); ++i)
    same = buckets_.entry_at(i).var == entries[i].var &&
           buckets_.entry_at(i).steps == entries[i].steps;
  if (same) bucket_batch_ = batch;
  else build_buckets(batch);
}

// ---- the batch split ---------------------------------------------------------------------------
// Contiguous blocks of the global batch along the batch axis, as Keras's DataParallel. A batch
// that does not divide (the last partial batch of an epoch) is split as evenly as possible, as
// tf.distribute splits it: the first `global % n` processes take one row more, and a process may
// hold none. The loss is still the mean over the global batch, so the step equals one device's.
template <class B, class C>
auto trainer_core<B, C>::block_of(std::size_t global, std::size_t n, std::size_t c) -> shard {
  const row_split r = split_batch_rows(global, n, c);
  return {global, r.count, r.first, r.largest};
}

template <class B, class C>
auto trainer_core<B, C>::shard_of(std::size_t global) const -> shard {
  const std::size_t axis = facts_.batch_axis, n = pm().shape().sizes[axis];
  if (facts_.model_parallel && global % n != 0)
    throw value_error("The global batch size (" + std::to_string(global) +
                      ") is not divisible by the size of the batch axis '" +
                      std::string(pm().shape().names[axis].view()) + "' (" + std::to_string(n) +
                      ") under model_parallel. Use a batch size that " +
                      "is a multiple of " + std::to_string(n) + " (drop_remainder in batch()).");
  return block_of(global, n, pm().coordinate(axis));
}

// The rows of every process's `local` output, in order, into `out` (the whole batch).
// Every process sends a block of s.block rows (the rows it holds, then zeros), so that the
// planned all_gather of equal blocks serves batches that do not divide too.
template <class B, class C>
void trainer_core<B, C>::gather_rows(const basic_dtensor<B>& y, const shard& s,
                                     std::span<float> out) {
  const std::size_t features = facts_.output_features;
  host_gather_.assign(s.block * features, 0.0f);
  B::download(y.local(), std::span<float>(host_gather_).first(s.local * features));
  const reshard_plan r = plan_reshard(y.layout(), layout_value::replicated(2), pm().shape(),
                                      shape_value{s.global, features});
  if (r.empty()) {
    std::copy_n(host_gather_.begin(), s.local * features, out.begin());
    return;
  }
  for (const auto& step : r)
    if (step.kind != collective::all_gather || r.size() != 1)
      throw value_error("tessel::sequential::predict: the output needs " +
                        to_string(step, plan_.mesh) + ", which predict does not perform");
  const std::size_t n = pm().shape().sizes[facts_.batch_axis];
  if (n * s.block == s.global) {
    comm::run_step(pm(), r[0], std::span<const float>(host_gather_), out);
    return;
  }
  gathered_.resize(n * host_gather_.size());
  comm::run_step(pm(), r[0], std::span<const float>(host_gather_), std::span<float>(gathered_));
  for (std::size_t c = 0; c < n; ++c) {
    const shard p = block_of(s.global, n, c);
    std::copy_n(gathered_.begin() + static_cast<std::ptrdiff_t>(c * host_gather_.size()),
                p.local * features,
                out.begin() + static_cast<std::ptrdiff_t>(p.first * features));
  }
}

// Starts the reduction of this process's loss and metric sums (the plan's "loss" steps).
template <class B, class C>
void trainer_core<B, C>::start_scalar_reduction() {
  for (const auto& step : loss_steps_)
    reshard_->log().add({step.kind, step.axis, 0, 0, scalars_.size() * sizeof(double)});
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
template <class B, class C>
double trainer_core<B, C>::finish_metrics(std::size_t global) {
  scalar_request_.wait();
  const double rows = static_cast<double>(global);
  const double loss = scalars_[0] / rows;
  loss_tracker_.update_state(loss, rows);
  for (std::size_t i = 0; i < metrics_.size(); ++i)
    metric_means_[i].update_state(scalars_[i + 1] / rows, rows);
  return loss;
}

template <class B, class C>
template <class Dataset>
std::optional<std::size_t> trainer_core<B, C>::known_steps(const Dataset& d) {
  const std::optional<std::size_t> n = d.cardinality();
  if (n && *n == std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return n;
}

// Checks the targets of the whole batch (so that every process finds the same error), then
// uploads rows [first, first + local).
template <class B, class C>
template <class Y>
void trainer_core<B, C>::upload_targets(const array<Y>& y, std::size_t rows, std::size_t first,
                                        std::size_t local) {
  const std::size_t features = facts_.output_features;
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
      if (!(v >= 0 && v < static_cast<double>(features)) || v != std::floor(v))
        throw value_error("Received a label value of " + label_text(y.values[i]) +
                          " which is outside the valid range of [0, " + std::to_string(features) +
                          ") (sample " + std::to_string(i) +
                          " of the batch). Labels must be class indices in [0, " +
                          std::to_string(features) + ").");
      host_labels_[i] = static_cast<std::int32_t>(v);
    }
    if (labels_rows_ != local) {
      labels_ = B::make_indices("labels", local);
      labels_rows_ = local;
    }
    B::upload(std::span<const std::int32_t>(host_labels_).subspan(first, local), labels_);
  } else {
    if (y.size() != rows * features)
      throw value_error(
          "Arguments `target` and `output` must have the same shape. Received: "
          "target.shape=" +
          shape_to_string(y.shape) + ", output.shape=(" + std::to_string(rows) + ", " +
          std::to_string(features) +
          "). For class labels use sparse_categorical_crossentropy, or one-hot "
          "encode them with to_categorical.");
    host_targets_.assign(
        y.values.begin() + static_cast<std::ptrdiff_t>(first * features),
        y.values.begin() + static_cast<std::ptrdiff_t>((first + local) * features));
    targets_ = sized<B>(targets_store_, local, features, "targets");
    B::upload(std::span<const float>(host_targets_), targets_);
  }
}

template <class B, class C>
template <class Y>
std::string trainer_core<B, C>::label_text(Y v) {
  if constexpr (std::is_floating_point_v<Y>)
    return callbacks::python_float_repr(static_cast<double>(v));
  else
    return std::to_string(v);
}

// This process's metric counts, after the loss sum, into the device's sums (slot i + 1 for
// metric i); then the step's one read-back of all of them.
template <class B, class C>
void trainer_core<B, C>::local_sums(const basic_dtensor<B>& output) {
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
template <class B, class C>
void trainer_core<B, C>::split_metric_counts(const basic_dtensor<B>& output) {
  const std::size_t features = facts_.output_features;
  split_argmax(output, argmax_store_, host_pairs_, argmax_keys_, argmax_, *reshard_);
  const std::size_t first = output.shard().offset[0];
  std::size_t equal = 0;
  for (std::size_t r = 0; r < argmax_.size(); ++r) {
    std::size_t want = 0;
    if (loss_->sparse_labels()) {
      want = static_cast<std::size_t>(host_labels_[first + r]);
    } else {
      const float* t = host_targets_.data() + r * features;
      for (std::size_t j = 1; j < features; ++j)
        if (t[j] > t[want]) want = j;
    }
    equal += argmax_[r] == want;
  }
  const std::uint32_t classes = class_axes(output.layout());
  bool counted_once = true;
  for (const auto& step : loss_steps_)
    if ((classes >> step.axis) & 1u)
      counted_once = counted_once && reshard_->coordinates()[step.axis] == 0;
  for (std::size_t i = 0; i < metrics_.size(); ++i)
    scalars_[i + 1] = counted_once ? static_cast<double>(equal) : 0.0;
}

template <class B, class C>
void trainer_core<B, C>::require_targets(const metrics::metric_function<B>& m) const {
  if (loss_->sparse_labels())
    throw value_error("Metric " + m.name() + " takes target vectors of the output's shape, but "
                      "the loss " + std::string(loss_->name()) +
                      " takes integer labels; use a loss on target vectors (one-hot encode the "
                      "labels with to_categorical).");
}

template <class B, class C>
void trainer_core<B, C>::require_sparse(const metrics::metric_function<B>& m) const {
  if (!loss_->sparse_labels())
    throw value_error("Metric " + m.name() + " takes integer labels, but the loss " +
                      std::string(loss_->name()) +
                      " takes target vectors; use "
                      "categorical_accuracy or \"accuracy\".");
}

template <class B, class C>
template <class Dataset>
logs trainer_core<B, C>::run_evaluate(const Dataset& data, progbar_logger* bar,
                                      const std::vector<callback*>& cbs, bool validating) {
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

template <class B, class C>
template <class Y>
void trainer_core<B, C>::test_step(const array<float>& x, const array<Y>& y) {
  finish_metrics(forward_and_loss(x, y, false));
}

// Forward pass on this process's rows of the global batch, the loss's gradient w.r.t. the
// output (left in loss_grad_, scaled for the mean over the global batch), and the start of the
// reduction of the loss and metric sums. Returns the global batch size.
template <class B, class C>
template <class Y>
std::size_t trainer_core<B, C>::forward_and_loss(const array<float>& x, const array<Y>& y,
                                                 bool training) {
  const shard s = shard_of(x.rows());
  return forward_and_loss(x, y, s, s.first, training);
}

template <class B, class C>
template <class Y>
std::size_t trainer_core<B, C>::forward_and_loss(const array<float>& x, const array<Y>& y,
                                                 const shard& s, std::size_t x_row,
                                                 bool training) {
  if (s.global == 0)
    throw value_error("a batch of 0 samples has no loss: pass at least one sample to " +
                      std::string(training ? "train_on_batch / compute_loss_and_gradients"
                                           : "evaluate") + ", x has shape " +
                      shape_to_string(x.shape));
  model_check_input_shape(x);
  upload_targets(y, x.rows(), x_row, s.local);
  shards_.begin_pass();
  const basic_dtensor<B>& output =
      model_forward_rows(x, x_row, s.first, s.local, s.global, training);
  const matrix& out = output.local();
  loss_grad_ = sized<B>(loss_grad_store_, B::rows(out), B::cols(out), "loss_gradient");
  const float scale = 1.0f / static_cast<float>(s.global);
  if (splits_classes(output)) {
    upload_target_columns(output);
    split_loss_and_gradient<B>(*loss_, output, labels_, targets_, loss_grad_, scale, sums_, 0,
                               row_stats_, *reshard_);
  } else {
    loss_and_gradient<B>(*loss_, output, labels_, targets_, loss_grad_, scale, sums_, 0);
  }
  local_sums(output);
  local_loss_ = scalars_.empty() ? 0.0 : scalars_[0];
  start_scalar_reduction();
  return s.global;
}

// Whether the output's class dimension is split across devices (model_parallel with the last
// layer's columns over a model axis): the loss and the metrics then reduce rows.
template <class B, class C>
bool trainer_core<B, C>::splits_classes(const basic_dtensor<B>& output) {
  return facts_.model_parallel && reshard_->moves(class_axes(output.layout()));
}

// The targets of this device's columns of the output (the uploaded ones hold whole rows).
template <class B, class C>
void trainer_core<B, C>::upload_target_columns(const basic_dtensor<B>& output) {
  if (loss_->sparse_labels()) return;
  const block& b = output.shard();
  const std::size_t rows = b.extent[0], cols = b.extent[1];
  const std::array<std::size_t, 2> whole{rows, facts_.output_features}, offset{0, b.offset[1]},
      extent{rows, cols};
  host_columns_.resize(rows * cols);
  comm::detail::copy_block<float>(whole, offset, extent, host_targets_.data(),
                                  host_columns_.data(), true);
  targets_ = sized<B>(targets_store_, rows, cols, "targets");
  B::upload(std::span<const float>(host_columns_), targets_);
}

template <class B, class C>
void trainer_core<B, C>::check_batch_size(const char* what, std::int64_t batch_size) {
  if (batch_size <= 0)
    throw value_error(std::string(what) + ": batch_size must be greater than zero, got " +
                      std::to_string(batch_size) +
                      "; pass a positive integer, the number of samples per batch (Keras's "
                      "default is 32)");
}

// Keras 3 fails on data with no batch too (its epoch iterator raises StopIteration): there is no
// loss to report and nothing to train on, so say so instead of printing a loss of 0.
template <class B, class C>
value_error trainer_core<B, C>::empty_data(std::string_view what, std::string_view data,
                                           std::string_view purpose) {
  return value_error(std::string(what) + ": " + std::string(data) +
                     " has no samples, so there is no batch to " + std::string(purpose) +
                     ". Check that the arrays have rows and that the dataset's pipeline (take, "
                     "filter, batch with drop_remainder) leaves at least one batch.");
}

template <class B, class C>
void trainer_core<B, C>::require_compiled(const char* what) const {
  if (!loss_)
    throw value_error(std::string("You must call `compile()` before calling `") + what +
                      "()`. For example: model.compile(\"adam\", "
                      "\"sparse_categorical_crossentropy\", {\"accuracy\"}).");
}

// The passes a dataset has started (its next epoch's shuffle key), where it counts them.
template <class B, class C>
template <class Dataset>
std::uint64_t trainer_core<B, C>::passes_of(const Dataset& d) {
  if constexpr (requires { d.iterations(); }) return d.iterations();
  else return 0;
}

}  // namespace TESSEL_LIMITS_NAMESPACE

// Compiled once for the host backend and MPI's communicator at the default limits, in
// tessel::tessel: the core, and its members over the labels and datasets most programs use
// (float targets and int32 class labels).
#define TESSEL_TRAINER_LABEL_TEMPLATES(prefix, B, C, Y)                                         \
  prefix template double trainer_core<B, C>::compute_loss_and_gradients(const array<float>&,    \
                                                                        const array<Y>&);       \
  prefix template double trainer_core<B, C>::loss_and_gradients(const array<float>&,            \
                                                                const array<Y>&, bool);         \
  prefix template logs trainer_core<B, C>::train_on_batch(const array<float>&, const array<Y>&, \
                                                          bool);                                \
  prefix template trainer_core<B, C>::value_and_grad_result trainer_core<B, C>::value_and_grad( \
      const state_list<B>&, const state_list<B>&, const array<float>&, const array<Y>&, bool);  \
  prefix template history trainer_core<B, C>::fit(                                              \
      const array<float>&, const array<Y>&, const trainer_core<B, C>::array_fit_options&);      \
  prefix template logs trainer_core<B, C>::evaluate(const array<float>&, const array<Y>&,       \
                                                    std::int64_t, int);                         \
  prefix template history trainer_core<B, C>::fit(const dataset<float, Y>&,                     \
                                                  const fit_options<dataset<float, Y>>&);       \
  prefix template logs trainer_core<B, C>::evaluate(const dataset<float, Y>&, int,              \
                                                    std::vector<callback_ref>);
#define TESSEL_TRAINER_TEMPLATES(prefix, B, C)                \
  prefix template class trainer_core<B, C>;                   \
  TESSEL_TRAINER_LABEL_TEMPLATES(prefix, B, C, float)         \
  TESSEL_TRAINER_LABEL_TEMPLATES(prefix, B, C, std::int32_t)
#if TESSEL_EXTERN_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_TRAINER_TEMPLATES(extern, backend::host, comm::communicator)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES && TESSEL_DEFAULT_LIMITS
TESSEL_TRAINER_TEMPLATES(extern, backend::cuda, comm::cuda_communicator)
#endif

}  // namespace tessel
