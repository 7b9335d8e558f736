// model_config: a model's config.json as Keras's `serialize_keras_object(model)` writes it into a
// .keras archive (what `keras.saving.load_model` rebuilds the model from): a Sequential or a
// Functional model, each layer's config written by the layer itself (its keras_config trait,
// layers/keras_config.hpp), the layers' connections, and the compile config. And the check that a
// file's config describes the model it is loaded into: the first layer that differs is named,
// with what differs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../layers/keras_config.hpp"
#include "../losses.hpp"
#include "../model/sequential.hpp"
#include "../optimizers.hpp"
#include "weights_file.hpp"

namespace tessel::saving {

// What compile() was given, as Keras's compile_config records it (no value: not compiled).
struct compile_info {
  optimizers::config optimizer = optimizers::config_of(optimizers::rmsprop{});
  double learning_rate = 0.001;  // the optimizer's current one
  std::string loss;              // the loss's Keras name
  const loss_rule* loss_plan = &no_loss;  // its planning rule (from_logits: on logits)
  std::vector<std::string> metrics;
};

// Fails to compile, naming the layer type (the template argument in the diagnostic), when a layer
// has no keras_config trait: a .keras archive must describe every layer.
template <class Layer>
struct keras_archive_layer {
  static_assert(layers::has_keras_config<Layer>,
                "save(\".keras\"): a layer of this model has no keras_config trait (static void "
                "keras_config(layers::keras_config&)), so a .keras archive cannot describe it; "
                "the layer is keras_archive_layer's template argument");
  static constexpr bool ok = true;
};

namespace detail {
// A model's layers as types and its graph, recovered from its graph_model base.
template <class Graph, class... Layers>
struct model_layers {
  using graph_type = Graph;
  static constexpr bool all_described = (keras_archive_layer<Layers>::ok && ...);
  // Layer i's config fields and whether Keras records its build_config.
  static layers::keras_config config_of(std::size_t i) {
    layers::keras_config c;
    std::size_t k = 0;
    ((k++ == i ? Layers::keras_config(c) : void()), ...);
    return c;
  }
};
template <class B, class D, std::size_t... Dims, class G, class... L>
model_layers<G, L...> model_layers_of(const graph_model<B, D, layers::input<Dims...>, G, L...>*);

inline const char* dtype_policy =
    R"({"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, )"
    R"("registered_name": null})";

TESSEL_INLINE std::string batch_shape(const shape_value& s);

TESSEL_INLINE std::string optimizer_config(const compile_info& c);

// The loss as Keras serializes it: a cross-entropy over classes as its object (so that
// from_logits, which tessel knows from the loss's kind, goes with it), any other by its name.
TESSEL_INLINE std::string loss_config(const compile_info& c);

TESSEL_INLINE std::string compile_config(const compile_info* c);
}  // namespace detail

// A model as its config.json describes it, as values: its layers' names, Keras classes and
// config fields, and the graph's shapes and connections.
struct model_config_desc {
  bool functional = false;
  shape_value input_shape{};
  std::vector<std::string_view> names, classes;
  std::vector<layers::keras_config> configs;
  std::vector<shape_value> outputs;                 // layer i's output shape
  std::vector<std::vector<std::size_t>> inputs;     // the graph nodes layer i reads (0: input)
};

// The config.json of the model `d` describes, named `name` (compiled as `compiled` says, or not).
TESSEL_INLINE std::string model_config_json(const model_config_desc& d, const std::string& name,
                                            const compile_info* compiled);

// The config.json of a model of type Model named `name` (compiled as `compiled` says, or not).
template <class Model>
std::string model_config_json(const std::string& name, const compile_info* compiled) {
  using info = decltype(detail::model_layers_of(static_cast<const Model*>(nullptr)));
  static_assert(info::all_described);
  constexpr auto edges = info::graph_type::edges;
  model_config_desc d;
  d.functional = Model::keras_functional;
  d.input_shape = Model::input_shape;
  for (std::size_t i = 0; i < Model::layer_count; ++i) {
    d.names.push_back(Model::layer_name(i));
    d.classes.push_back(Model::layer_class_name(i));
    d.configs.push_back(info::config_of(i));
    d.outputs.push_back(Model::layer_infos[i].output);
    d.inputs.emplace_back(edges.inputs[i].begin(), edges.inputs[i].begin() + edges.count[i]);
  }
  return model_config_json(d, name, compiled);
}

// ---- the check on load -------------------------------------------------------------------------
namespace detail {
// Whether two config values are the same (numbers within float32's precision: Keras may write
// a float32 value where tessel writes the double).
TESSEL_INLINE bool same_value(const nlohmann::json& a, const nlohmann::json& b);
// The config keys that make a layer's type (not its name, dtype or how it was initialized).
TESSEL_INLINE bool compared_key(const std::string& k);
// The string at `key` of `v`, or `otherwise` where `v` is not an object or has no string there
// (a file's config may hold any JSON anywhere).
inline std::string string_at(const nlohmann::json& v, const char* key,
                             const std::string& otherwise = {}) {
  if (!v.is_object()) return otherwise;
  const auto it = v.find(key);
  return it != v.end() && it->is_string() ? it->get<std::string>() : otherwise;
}
// Whether `v` nests no deeper than `depth` levels (its text, written recursively, is then shown).
TESSEL_INLINE bool nested_within(const nlohmann::json& v, int depth);
// The layers a functional layer reads, as positions in the model's layer list.
TESSEL_INLINE std::vector<long> inbound_positions(const nlohmann::json& layers,
                                                  const nlohmann::json& l);
}  // namespace detail

// Checks that `file` (a config.json from `what`) describes the same model as `ours` (the model's
// own config): its kind, its input, its layers' classes, their arguments that make the type
// (units, filters, kernel sizes, ...) and their connections. A difference is an error naming the
// first layer that differs and what differs.
TESSEL_INLINE void check_model_config(const nlohmann::json& file, const nlohmann::json& ours,
                                      const std::string& head);

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/model_config.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
