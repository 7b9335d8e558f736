// model_view: a model as the saving code sees it, its type erased. Checkpoints, weights files and
// .keras archives are written and read by code templated on the backend alone, compiled once in
// tessel::tessel for the host backend (src/tessel_templates.cpp), not once per
// model type in every translation unit; a model hands it this view: its processes, its state,
// its layers' names and its variables, and the few things only its type knows (gathering a
// sharded variable, its Keras config).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/device_mesh.hpp"
#include "../layers/layer.hpp"
#include "../runtime/process_mesh.hpp"
#include "../state.hpp"
#include "../tensor/dtensor.hpp"
#include "model_config.hpp"

namespace tessel::saving {

template <class B>
struct model_view {
  // ---- the processes (model.mesh()): what on_every_process and the checkpoint's blocks need
  mesh_value shape{};
  std::size_t device = 0, size = 1;
  std::vector<std::size_t> coordinates;
  // bound_mesh::first_failure: the processes that failed, the first of them and its error
  std::function<process_failure(bool, std::uint64_t, std::string_view)> first_failure_of;
  [[nodiscard]] process_failure first_failure(bool failed, std::uint64_t kind,
                                              std::string_view message) const {
    return first_failure_of(failed, kind, message);
  }
  [[nodiscard]] bool is_chief() const noexcept { return device == 0; }

  // ---- the state (get_state_tree without copies, set_state_tree): checkpoints
  std::function<state_tree<B>()> state_tree_view;
  std::function<void(const state_tree<B>&)> set_state_tree;  // without the check below
  // The processes' check that they hold the same values where they hold copies of one value
  // (trainer_core::require_same_replicas), run once a load has written everything.
  std::function<void(std::string_view)> require_same_replicas;
  void check_replicas(std::string_view where) const {
    if (require_same_replicas) require_same_replicas(where);
  }

  // ---- the layers and variables: weights files and archives
  std::string name;
  bool functional = false;                 // Keras lists an InputLayer first
  std::vector<std::string> layer_classes;  // Keras's class name of each layer ("Dense")
  std::vector<std::string> layer_names;
  std::vector<variable<B>*> variables;  // every variable, in creation order
  std::vector<variable<B>*> trainable;  // the trainable ones (the optimizer's)
  // A variable's global values on every process (a collective when it is sharded).
  std::function<void(const basic_dtensor<B>&, std::vector<float>&)> gather_to_host;
  // The model's config as Keras's model.to_json() writes it, with `compiled`'s compile config.
  std::function<std::string(const compile_info*)> config_json;
};

// The view of `m` (a trainer: a model with its state). It refers to `m`, which must outlive it.
template <class Model>
model_view<typename Model::backend> view_of(Model& m) {
  using B = typename Model::backend;
  model_view<B> v;
  const auto& pm = m.mesh();
  v.shape = pm.shape();
  v.device = pm.device();
  v.size = pm.size();
  v.coordinates.assign(pm.coordinates().begin(), pm.coordinates().end());
  v.first_failure_of = [&pm](bool failed, std::uint64_t kind, std::string_view message) {
    return pm.first_failure(failed, kind, message);
  };
  v.state_tree_view = [&m] { return m.state_tree_view(); };
  v.set_state_tree = [&m](const state_tree<B>& t) { m.assign_state_tree(t); };
  v.require_same_replicas = [&m](std::string_view where) { m.require_same_replicas(where); };
  v.name = m.name();
  v.functional = Model::keras_functional;
  for (std::size_t i = 0; i < Model::layer_count; ++i) {
    v.layer_classes.emplace_back(Model::layer_class_name(i));
    v.layer_names.emplace_back(Model::layer_name(i));
  }
  v.variables = m.variables();
  v.trainable = m.trainable_variables();
  v.gather_to_host = [&m](const basic_dtensor<B>& t, std::vector<float>& out) {
    m.resharding().gather_to_host(t, out);
  };
  v.config_json = [name = m.name()](const compile_info* compiled) {
    return model_config_json<Model>(name, compiled);
  };
  return v;
}

}  // namespace tessel::saving
