// trainer: Keras's Trainer (keras/src/trainers/trainer.py) on a model — compile, fit / evaluate /
// predict, train_on_batch and the custom-training-loop pieces, callbacks and progress output,
// saving. It works on any model meeting `trainable_model` (sequential_model, functional_model)
// and adds its API to the model's: `trainer<M>` is an M. What does not depend on the model's
// type is trainer_core's (trainer_core.hpp), compiled once per backend; trainer<M> adds what
// does: the answers to the core's questions about M, and the saving of M.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "../core/layer_planner.hpp"
#include "../data/array.hpp"
#include "../layers/layer.hpp"
#include "../model/sequential.hpp"
#include "../runtime/agreement.hpp"
#include "../saving/checkpoint.hpp"
#include "../saving/model_weights.hpp"
#include "../state.hpp"
#include "callbacks.hpp"
#include "trainer_core.hpp"

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
      { M::describe(&no_loss, std::size_t{1}) } -> std::same_as<model_desc>;
      { M::layer_name(std::size_t{0}) } -> std::convertible_to<std::string_view>;
      { M::model_parallel } -> std::convertible_to<bool>;
      { M::layer_count } -> std::convertible_to<std::size_t>;
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

template <trainable_model Model>
class trainer : public Model,
                public trainer_core<typename Model::backend, typename Model::communicator_type> {
  using B = typename Model::backend;
  using core = trainer_core<B, typename Model::communicator_type>;

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
  explicit trainer(Args&&... args) : Model(std::forward<Args>(args)...), core(facts()) {
    this->attach(this->mesh(), this->resharding());
    this->set_before_forward(static_cast<core*>(this), &core::before_forward);
  }
  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;
  ~trainer() override = default;

  // Keras's model.summary(), and once the model has trained, the memory plan per device of the
  // last global batch (the model's summary_text() is the table alone).
  std::string summary_text() const { return Model::summary_text() + this->memory_summary(); }
  void summary() const {
    if (this->mesh().is_chief()) std::cout << summary_text() << std::flush;
  }

  // ---- the model's state (the model's own accessors; for callbacks, model_base) ---------------
  // Under split weights (shard_state::weights) each reads or writes the whole weights, which the
  // first one after a training step gathers: on a distributed model every process calls it.
  std::vector<array<float>> get_weights() const override {
    const_cast<trainer*>(this)->whole_weights();
    return Model::get_weights();
  }
  void set_weights(const std::vector<array<float>>& w) override {
    this->whole_weights();
    Model::set_weights(w);
  }
  std::vector<variable<B>*> variables() {
    this->whole_weights();
    return Model::variables();
  }
  std::vector<variable<B>*> trainable_variables() {
    this->whole_weights();
    return Model::trainable_variables();
  }
  std::vector<variable<B>*> non_trainable_variables() { return Model::non_trainable_variables(); }
  variable<B>& get_variable(std::string_view path) {
    this->whole_weights();
    return Model::get_variable(path);
  }
  state_list<B> trainable_state() const {
    const_cast<trainer*>(this)->whole_weights();
    return Model::trainable_state();
  }
  state_list<B> non_trainable_state() const { return Model::non_trainable_state(); }
  state_list<B> trainable_state_view() const {
    const_cast<trainer*>(this)->whole_weights();
    return Model::trainable_state_view();
  }
  void assign_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                    std::string_view where = "set_state_tree") {
    this->whole_weights();
    Model::assign_state(trainable, non_trainable, where);
  }
  // (The caller's tensors stand for the variables: split weights are neither gathered nor
  // released while f runs.)
  template <class F>
  decltype(auto) with_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                            std::string_view where, F&& f) {
    const typename core::callers_state guard(this);
    return Model::with_state(trainable, non_trainable, where, std::forward<F>(f));
  }
  // The forward pass on this process alone (graph_model::call): under split weights, on the
  // whole weights, which the first read after a step gathers (every process calls it then).
  const matrix& call(const array<float>& x, bool training = false) {
    this->whole_weights();
    return Model::call(x, training);
  }
  bool is_chief() const override { return Model::is_chief(); }
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

  // ---- saving (saving/model_weights.hpp) ------------------------------------------------------
  // Keras's model.save_weights(filepath) and model.load_weights(filepath): a .weights.h5 file in
  // Keras 3's layout, with the compiled optimizer's state; every process calls them.
  void save_weights(const std::string& filepath) override {
    saving::save_model_weights(saving::view_of(*this), this->optimizer_to_save(), filepath);
  }
  void load_weights(const std::string& filepath) {
    saving::load_model_weights(saving::view_of(*this), this->optimizer_to_load(), filepath);
    this->optimizer_state_written();
  }
  // Keras's save_weights(filepath, max_shard_size=...): with a max_shard_size (GB), a
  // .weights.json and its .weights.h5 shards, as Keras writes them.
  void save_weights(const std::string& filepath, const saving::save_weights_options& options) {
    saving::save_model_weights(saving::view_of(*this), this->optimizer_to_save(), filepath,
                               options);
  }
  // Keras's model.save(filepath): a .keras archive (saving/keras_archive.hpp) that
  // keras.saving.load_model rebuilds the model from, with its compile config and weights;
  // load_weights(filepath) reads it back into a model of the same type.
  void save(const std::string& filepath) override {
    const std::optional<saving::compile_info> compiled = this->compiled_info();
    saving::save_model_archive(saving::view_of(*this), this->optimizer_to_save(),
                               compiled ? &*compiled : nullptr, filepath);
  }

 private:
  static trained_model_facts facts() {
    return {Model::distribution::value,
            Model::batch_axis,
            Model::output_shape,
            Model::output_features,
            Model::model_parallel,
            Model::layer_count,
            hasher().text(typeid(Model).name()).result(),
            Model::automatic_layouts};
  }
  // ---- the core's questions about the model (trainer_core.hpp) --------------------------------
  model_desc model_describe(const loss_rule* loss, std::size_t loss_values) const override {
    return Model::describe(loss, loss_values);
  }
  std::string_view model_layer_name(std::size_t i) const override { return Model::layer_name(i); }
  std::uint64_t model_seed() const override { return this->seed(); }
  void model_check_input_shape(const array<float>& x) const override {
    this->check_input_shape(x);
  }
  const basic_dtensor<B>& model_forward_rows(const array<float>& x, std::size_t x_row,
                                             std::size_t first, std::size_t rows,
                                             std::size_t batch, bool training) override {
    return this->forward_rows(x, x_row, first, rows, batch, training);
  }
  void model_backward(const matrix& dy,
                      const typename core::layer_hooks& on_layer) override {
    this->backward(dy, on_layer);
  }
  std::vector<variable<B>*> model_trainable_variables() override {
    return Model::trainable_variables();
  }
  variable<B>& model_variable(std::string_view path) override {
    return Model::get_variable(path);
  }
  std::uint64_t model_training_step() const override { return this->training_step(); }
  void model_set_training_step(std::uint64_t step) override { this->set_training_step(step); }
  state_list<B> model_state(bool trainable, bool copy) const override {
    if (trainable) return copy ? Model::trainable_state() : Model::trainable_state_view();
    return copy ? Model::non_trainable_state() : Model::non_trainable_state_view();
  }
  void model_assign_state(const state_list<B>& trainable,
                          const state_list<B>& non_trainable) override {
    Model::assign_state(trainable, non_trainable);
  }
  void model_with_state(const state_list<B>& trainable, const state_list<B>& non_trainable,
                        std::string_view where, const std::function<void()>& f) override {
    const typename core::callers_state guard(this);
    Model::with_state(trainable, non_trainable, where, f);
  }

  std::unique_ptr<async_checkpointer<trainer>> async_;  // the save in the background, if any
};

}  // namespace tessel
