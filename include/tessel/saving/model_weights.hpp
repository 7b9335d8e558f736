// model_weights: a model's save_weights and load_weights (Keras's model.save_weights and
// model.load_weights) in a .weights.h5 file (weights_file.hpp): the model's variables by layer
// and its optimizer's state, as Keras lays them out. A distributed model saves global values
// (a sharded variable or slot is gathered first, as get_weights gathers it) from the process at
// device 0 alone; every process loads, keeping its block of each variable. A failure on one
// process is an error on every one (none is left waiting in a collective).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../core/tensor_layout.hpp"
#include "../data/array.hpp"
#include "../model/distribute.hpp"
#include "../model/sequential.hpp"
#include "../optimizers.hpp"
#include "../state.hpp"
#include "keras_archive.hpp"
#include "model_config.hpp"
#include "model_view.hpp"
#include "sharded_weights.hpp"
#include "weights_file.hpp"

namespace tessel::saving {

// A model's weights file as values: `content` in Keras's layout, and where each of its
// variables is in the model's lists (get_weights' order; the optimizer's state() slots).
struct model_weights_layout {
  weights_content content;
  std::vector<std::size_t> weight_index;  // content's variables, layer by layer -> get_weights
  std::vector<std::size_t> slot_index;    // content's slots, in Keras's order -> state() slots
};

namespace detail {

// The Keras name of an optimizer ("adam", "sgd", "rm_sprop": its class name in snake case).
template <class B>
std::string keras_optimizer_name(const optimizer<B>& o) {
  return keras_snake_case(o.spec().class_name());
}

// `v`'s values for a save: a replicated tensor in host memory borrowed (no copy: the save writes
// from the model's own memory), any other downloaded (a sharded one gathered, on every process).
template <class B>
void take_values(const model_view<B>& m, const basic_dtensor<B>& t, saved_variable& v) {
  const std::size_t n = tessel::saving::detail::elements(v.shape);
  if constexpr (tessel::host_memory<B>) {  // a replicated block is its global values
    if (t.size() == n) {
      v.borrowed = std::span<const float>(t.local().data(), n);
      return;
    }
  }
  m.gather_to_host(t, v.values);
}

// Sets `t` (this process's block) from its variable's global values `global`: a replicated
// tensor straight from them, a sharded one from its block of them.
template <class B>
void assign_values(const basic_dtensor<B>& t, std::span<const float> global) {
  if (t.size() == global.size()) {
    B::upload(global, t.local());
    return;
  }
  const std::vector<float> block = block_of(t, global);
  B::upload(std::span<const float>(block), t.local());
}

}  // namespace detail

// The layout of `m`'s weights file: Keras's model.layers (a functional model's InputLayer
// first), each with its variables (trainable first, then the others, each in creation order),
// and the optimizer `opt` (if any) with its slots in Keras's order. The values are left empty.
template <class B>
model_weights_layout weights_layout(const model_view<B>& m, const optimizer<B>* opt) {
  model_weights_layout out;
  out.content.model_name = m.name;
  std::vector<std::string> classes, names;
  if (m.functional) {
    classes.push_back("input_layer");
    names.push_back("input_layer");
  }
  for (std::size_t i = 0; i < m.layer_names.size(); ++i) {
    classes.push_back(keras_snake_case(m.layer_classes[i]));
    names.push_back(m.layer_names[i]);
  }
  const std::vector<std::string> groups = keras_unique_names(classes);
  const std::vector<variable<B>*>& vars = m.variables;
  for (std::size_t l = 0; l < groups.size(); ++l) {
    saved_layer layer{groups[l], names[l], {}};
    const std::string prefix = names[l] + "/";
    for (const bool trainable : {true, false})
      for (std::size_t i = 0; i < vars.size(); ++i)
        if (vars[i]->trainable == trainable && vars[i]->path.starts_with(prefix)) {
          layer.variables.push_back({vars[i]->path, vars[i]->shape, {}});
          out.weight_index.push_back(i);
        }
    out.content.layers.push_back(std::move(layer));
  }
  // Each variable is in its layer's group once (its path starts with the layer's name).
  for (std::size_t i = 0; i < vars.size(); ++i)
    if (std::count(out.weight_index.begin(), out.weight_index.end(), i) != 1)
      throw value_error("weights file: variable '" + vars[i]->path +
                        "' belongs to no layer of model '" + m.name +
                        "' (its path does not start with a layer's name)");
  if (opt != nullptr) {
    saved_optimizer o{detail::keras_optimizer_name(*opt), 0, 0.0, {}, std::nullopt};
    if (opt->scheduled()) o.learning_rate.reset();
    if (opt->scalars() > 0) o.scalar = 0.0;
    const state_list<B> state = opt->state_view();
    out.slot_index = keras_slot_order(opt->keras_slot_passes());
    const std::size_t c = opt->counters();
    for (std::size_t k : out.slot_index)
      o.slots.push_back({state[k + c].path, state[k + c].shape, {}});
    out.content.optimizer = std::move(o);
  }
  return out;
}

namespace detail {
TESSEL_INLINE void check_weights_path(const std::string& filepath, const char* where);

// Takes every variable's values into `layout.content`, in the file's order (the layers'
// variables, then the optimizer's slots; its counters first), calling `taken()` after each: a
// sharded one gathered on every process (a collective), a replicated one in host memory
// borrowed, valid while the model is not changed. Every process calls it.
template <class B>
void take_model_values(const model_view<B>& m, const optimizer<B>* opt,
                       model_weights_layout& layout, const std::function<void()>& taken) {
  std::optional<state_list<B>> state;
  if (opt != nullptr) {
    state.emplace(opt->state_view());
    layout.content.optimizer->iterations = (*state)[0].integer();
    if (!opt->scheduled()) layout.content.optimizer->learning_rate = (*state)[1].real();
    if (opt->scalars() > 0) layout.content.optimizer->scalar = state->back().real();
  }
  const std::vector<variable<B>*>& vars = m.variables;
  std::size_t next = 0;
  for (auto& layer : layout.content.layers)
    for (auto& v : layer.variables) {
      take_values(m, vars[layout.weight_index[next++]]->value, v);
      taken();
    }
  if (opt == nullptr) return;
  saved_optimizer& o = *layout.content.optimizer;
  for (std::size_t k = 0; k < o.slots.size(); ++k) {
    take_values(m, (*state)[layout.slot_index[k] + opt->counters()].tensor(), o.slots[k]);
    taken();
  }
}

// How many of a file's variables have their values, for a writer on another thread to wait
// on; abandon() (the values will not come) makes its wait throw.
class taken_count {
 public:
  void add() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ++taken_;
    }
    changed_.notify_all();
  }
  void abandon() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      abandoned_ = true;
    }
    changed_.notify_all();
  }
  // Returns once `n` variables have their values.
  void wait_for(std::size_t n);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t taken_ = 0;
  bool abandoned_ = false;
};
}  // namespace detail

// The model's weights file as values: every variable's global values (a sharded one gathered
// on every process; a replicated one in host memory borrowed, valid while the model is not
// changed) and the optimizer's counters and slots. Every process calls it.
template <class B>
weights_content model_weights_content(const model_view<B>& m, const optimizer<B>* opt) {
  model_weights_layout layout = weights_layout(m, opt);
  detail::take_model_values(m, opt, layout, [] {});
  return std::move(layout.content);
}

// Keras's model.save_weights(filepath, max_shard_size=...): every process calls it (a sharded
// variable is gathered from all of them); the process at device 0 writes the file, atomically:
// one .weights.h5 file, or with `options.max_shard_size` a .weights.json and its shards
// (sharded_weights.hpp). `opt` is the compiled optimizer (nullptr before compile: no optimizer
// group, as Keras writes none). On more than one process, a .weights.h5 file is written on a
// thread of its own while the variables are gathered, each as soon as it has its values: the
// gathers and the writes overlap, as in a one-process save the checksums and the disk do.
template <class B>
void save_model_weights(const model_view<B>& m, const optimizer<B>* opt,
                        const std::string& filepath, const save_weights_options& options = {}) {
  tessel::detail::on_every_process(m, "save_weights", [&] {
    if (!options.max_shard_size) detail::check_weights_path(filepath, "save_weights");
  });
  if (options.max_shard_size || m.size == 1) {
    const weights_content content = model_weights_content(m, opt);
    tessel::detail::on_every_process(m, "save_weights", [&] {
      if (!m.is_chief()) return;
      if (options.max_shard_size)
        write_sharded_weights(filepath, content, *options.max_shard_size);
      else
        write_weights_file(filepath, content);
    });
    return;
  }
  model_weights_layout layout = weights_layout(m, opt);
  detail::taken_count taken;
  std::exception_ptr write_error;
  std::thread writer;
  if (m.is_chief())
    writer = std::thread([&] {
      try {
        write_weights_file(filepath, layout.content, [&](std::size_t k) { taken.wait_for(k + 1); });
      } catch (...) {
        write_error = std::current_exception();
      }
    });
  try {
    detail::take_model_values(m, opt, layout, [&] { taken.add(); });
  } catch (...) {
    taken.abandon();
    if (writer.joinable()) writer.join();
    throw;
  }
  if (writer.joinable()) writer.join();
  tessel::detail::on_every_process(m, "save_weights", [&] {
    if (write_error) std::rethrow_exception(write_error);
  });
}

// Keras's model.save(filepath): a .keras archive (keras_archive.hpp) of the model's config
// (`compiled`: what compile() was given, or nullptr), the metadata and the weights file; every
// process calls it, the process at device 0 writes it.
template <class B>
void save_model_archive(const model_view<B>& m, const optimizer<B>* opt,
                        const compile_info* compiled, const std::string& filepath) {
  tessel::detail::on_every_process(m, "save",
                                   [&] { detail::check_archive_path(filepath, "save"); });
  const std::string config = m.config_json(compiled);
  const weights_content content = model_weights_content(m, opt);
  tessel::detail::on_every_process(m, "save", [&] {
    if (m.is_chief()) write_keras_archive(filepath, config, content);
  });
}

// Keras's model.load_weights(filepath): every process calls it and reads the file (a
// .weights.h5 file, a .keras archive whose config must describe this model, or sharded weights'
// .weights.json); the model's
// variables (and the optimizer's state, where the file has it and `opt` is the compiled
// optimizer) are replaced only once every process has read every value and found it fit.
template <class B>
void load_model_weights(const model_view<B>& m, optimizer<B>* opt, const std::string& filepath) {
  if (opt != nullptr) opt->build(m.trainable);
  model_weights_layout layout = weights_layout(m, static_cast<const optimizer<B>*>(opt));
  optimizer_found found = optimizer_found::none;
  tessel::detail::on_every_process(m, "load_weights", [&] {
    if (filepath.ends_with(".keras")) {
      const nlohmann::json ours = nlohmann::json::parse(m.config_json(nullptr));
      found = read_keras_archive(filepath, ours, layout.content, "load_weights");
    } else if (filepath.ends_with(".weights.json")) {
      found = read_sharded_weights(filepath, layout.content, "load_weights");
    } else {
      detail::check_weights_path(filepath, "load_weights");
      found = read_weights_file(filepath, layout.content, "load_weights");
    }
    if (found != optimizer_found::none && layout.content.optimizer->iterations < 0)
      throw value_error("load_weights: cannot load '" + filepath +
                        "': the optimizer's iteration count in it is " +
                        std::to_string(layout.content.optimizer->iterations) +
                        "; a count is at least 0. Load a file saved by save_weights.");
  });
  // Every process read the whole file and found every value fit: each now keeps its block of
  // each variable (the file's values, not a broadcast of one process's).
  const std::vector<variable<B>*>& vars = m.variables;
  std::size_t next = 0;
  for (auto& layer : layout.content.layers)
    for (auto& v : layer.variables)
      detail::assign_values(vars[layout.weight_index[next++]]->value,
                            std::span<const float>(v.values));
  if (opt != nullptr && found != optimizer_found::none) {
    state_list<B> state = opt->state_view();
    const saved_optimizer& o = *layout.content.optimizer;
    state[0].value = o.iterations;
    if (o.learning_rate) state[1].value = *o.learning_rate;
    if (found == optimizer_found::all)
      for (std::size_t k = 0; k < o.slots.size(); ++k)
        detail::assign_values(state[layout.slot_index[k] + o.counters()].tensor(),
                              std::span<const float>(o.slots[k].values));
    opt->set_state(state, "load_weights");
  }
  m.check_replicas("load_weights");
}

}  // namespace tessel::saving

// The weights-file code over one backend, compiled once for the host's (core/compilation.hpp).
#define TESSEL_MODEL_WEIGHTS_TEMPLATES(prefix, B)                                                 \
  prefix template void saving::save_model_weights<B>(const saving::model_view<B>&,                \
                                                     const optimizer<B>*, const std::string&,     \
                                                     const saving::save_weights_options&);        \
  prefix template void saving::save_model_archive<B>(                                             \
      const saving::model_view<B>&, const optimizer<B>*, const saving::compile_info*,             \
      const std::string&);                                                                        \
  prefix template void saving::load_model_weights<B>(const saving::model_view<B>&, optimizer<B>*, \
                                                     const std::string&);                         \
  prefix template saving::weights_content saving::model_weights_content<B>(                       \
      const saving::model_view<B>&, const optimizer<B>*);
#if TESSEL_EXTERN_TEMPLATES
namespace tessel {
TESSEL_MODEL_WEIGHTS_TEMPLATES(extern, backend::host)
}  // namespace tessel
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
namespace tessel {
TESSEL_MODEL_WEIGHTS_TEMPLATES(extern, backend::cuda)
}  // namespace tessel
#endif

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/model_weights.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
