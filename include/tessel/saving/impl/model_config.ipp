// The definitions of saving/model_config.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include model_config.hpp.
namespace tessel::saving::detail {

TESSEL_INLINE std::string batch_shape(const shape_value& s) {
  std::string out = "[null";
  for (std::size_t d = 0; d < s.rank; ++d) out += ", " + std::to_string(s[d]);
  return out + "]";
}

// Keras's serialized learning-rate schedule: {"module": "keras.optimizers.schedules",
// "class_name": "CosineDecay", "config": {...}, "registered_name": null} (a user's: its module
// null, its registered name).
TESSEL_INLINE std::string schedule_config(const optimizers::schedule_config& s) {
  using layers::keras_config;
  keras_config o;
  for (const auto& [k, v] : s.values) {
    if (std::holds_alternative<std::monostate>(v)) {
      o.null(k);
    } else if (const double* d = std::get_if<double>(&v)) {
      o.field(k, *d);
    } else if (const bool* b = std::get_if<bool>(&v)) {
      o.field(k, *b);
    } else if (const std::int64_t* i = std::get_if<std::int64_t>(&v)) {
      o.field(k, *i);
    } else {
      std::string list = "[";
      for (double x : std::get<std::vector<double>>(v))
        list += (list.size() > 1 ? ", " : "") + keras_config::number(x);
      o.raw(k, list + "]");
    }
  }
  o.field("name", s.name);
  const std::string module =
      s.module.empty() ? std::string("null") : keras_config::quote(s.module);
  const std::string registered =
      s.module.empty() ? keras_config::quote(s.registered_name) : std::string("null");
  return R"({"module": )" + module + R"(, "class_name": )" + keras_config::quote(s.class_name) +
         R"(, "config": {)" + o.text() + R"(}, "registered_name": )" + registered + "}";
}

// Keras's optimizer config: the base Optimizer's arguments, then the optimizer's fields in their
// order (learning_rate, written first, as the current one, or its schedule). Keras's own
// optimizers by module; a user's by the name it is registered under ("user>Signum"), module null.
TESSEL_INLINE std::string optimizer_config(const compile_info& c) {
  using layers::keras_config;
  const optimizers::config& spec = c.optimizer;
  keras_config o;
  // Keras's auto name: the class name in snake case ("rm_sprop"; the variables' prefix is
  // `spec.name`, "rmsprop").
  o.field("name", keras_snake_case(spec.class_name));
  // Keras holds the learning rate as a float32 variable and writes that value.
  if (spec.schedule)
    o.raw("learning_rate", schedule_config(*spec.schedule));
  else
    o.field("learning_rate", static_cast<double>(static_cast<float>(c.learning_rate)));
  auto optional = [&](const char* k, double v) {
    if (v == 0.0)
      o.null(k);
    else
      o.field(k, v);
  };
  optional("weight_decay", spec.weight_decay);
  optional("clipnorm", spec.clipnorm);
  optional("global_clipnorm", spec.global_clipnorm);
  optional("clipvalue", spec.clipvalue);
  o.field("use_ema", spec.use_ema);
  o.field("ema_momentum", spec.ema_momentum);
  auto count = [&](const char* k, std::int64_t v) {
    if (v == 0)
      o.null(k);
    else
      o.field(k, v);
  };
  count("ema_overwrite_frequency", spec.ema_overwrite_frequency);
  o.null("loss_scale_factor");
  count("gradient_accumulation_steps", spec.gradient_accumulation_steps);
  auto write = [&](const std::string& k, const optimizers::value& v) {
    if (const bool* b = std::get_if<bool>(&v))
      o.field(k.c_str(), *b);
    else
      o.field(k.c_str(), std::get<double>(v));
  };
  for (const auto& entry : spec.values)
    if (entry.first != "learning_rate") write(entry.first, entry.second);
  const std::string module =
      spec.module.empty() ? std::string("null") : keras_config::quote(spec.module);
  const std::string registered =
      spec.module.empty() ? keras_config::quote(spec.registered_name) : std::string("null");
  return R"({"module": )" + module + R"(, "class_name": )" + keras_config::quote(spec.class_name) +
         R"(, "config": {)" + o.text() + R"(}, "registered_name": )" + registered + "}";
}

TESSEL_INLINE std::string loss_config(const compile_info& c) {
  using layers::keras_config;
  const bool sparse = c.loss == "sparse_categorical_crossentropy";
  if (!sparse && c.loss != "categorical_crossentropy") return keras_config::quote(c.loss);
  keras_config l;
  l.field("name", c.loss);
  l.field("reduction", "sum_over_batch_size");
  l.field("from_logits", c.loss_plan->name == "softmax_cross_entropy");
  if (sparse) {
    l.null("ignore_class");
  } else {
    l.field("label_smoothing", 0.0);
    l.field("axis", -1);
  }
  return R"({"module": "keras.losses", "class_name": )" +
         keras_config::quote(sparse ? "SparseCategoricalCrossentropy" : "CategoricalCrossentropy") +
         R"(, "config": {)" + l.text() + R"(}, "registered_name": null})";
}

TESSEL_INLINE std::string compile_config(const compile_info* c) {
  if (c == nullptr) return "{}";
  std::string metrics = "null";
  if (!c->metrics.empty()) {
    metrics = "[";
    for (std::size_t i = 0; i < c->metrics.size(); ++i)
      metrics += (i ? ", " : "") + layers::keras_config::quote(c->metrics[i]);
    metrics += "]";
  }
  return R"({"optimizer": )" + optimizer_config(*c) + R"(, "loss": )" + loss_config(*c) +
         R"(, "loss_weights": null, "metrics": )" + metrics +
         R"(, "weighted_metrics": null, "run_eagerly": false, "steps_per_execution": 1, )"
         R"("jit_compile": true})";
}

TESSEL_INLINE bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-6 * std::max(std::abs(x), std::abs(y));
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

TESSEL_INLINE bool compared_key(const std::string& k) {
  return k != "name" && k != "trainable" && k != "dtype" && !k.ends_with("_initializer") &&
         !k.ends_with("_regularizer") && !k.ends_with("_constraint") && k != "seed" &&
         k != "quantization_config";
}

TESSEL_INLINE bool nested_within(const nlohmann::json& v, int depth) {
  if (!v.is_object() && !v.is_array()) return true;
  if (depth == 0) return false;
  for (const auto& x : v)
    if (!nested_within(x, depth - 1)) return false;
  return true;
}

TESSEL_INLINE std::vector<long> inbound_positions(const nlohmann::json& layers,
                                                  const nlohmann::json& l) {
  std::vector<long> out;
  auto position = [&](const nlohmann::json& history) {
    const std::string from = history.is_array() && !history.empty() && history[0].is_string()
                                 ? history[0].get<std::string>()
                                 : std::string();
    for (std::size_t j = 0; j < layers.size(); ++j) {
      const auto config = layers[j].is_object() ? layers[j].find("config") : layers[j].end();
      const std::string config_name =
          config != layers[j].end() ? string_at(*config, "name") : std::string();
      if (string_at(layers[j], "name", config_name) == from) return static_cast<long>(j);
    }
    return -1L;
  };
  // Depth first, in order, with a stack of its own: a file's nesting may be as deep as it likes.
  std::vector<const nlohmann::json*> todo;
  if (l.is_object() && l.contains("inbound_nodes")) todo.push_back(&l["inbound_nodes"]);
  while (!todo.empty()) {
    const nlohmann::json& v = *todo.back();
    todo.pop_back();
    if (v.is_object() && v.contains("class_name") && v["class_name"] == "__keras_tensor__" &&
        v.contains("config") && v["config"].contains("keras_history")) {
      out.push_back(position(v["config"]["keras_history"]));
    } else if (v.is_object() || v.is_array()) {
      const std::size_t first = todo.size();
      for (const auto& x : v) todo.push_back(&x);
      std::reverse(todo.begin() + static_cast<std::ptrdiff_t>(first), todo.end());
    }
  }
  return out;
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE void check_model_config(const nlohmann::json& file, const nlohmann::json& ours,
                                      const std::string& head) {
  const std::string again = " Load a file saved from this model.";
  auto text = [](const nlohmann::json& v) {
    return detail::nested_within(v, 16) ? v.dump() : std::string("a value nested too deep to show");
  };
  const std::string kind = detail::string_at(file, "class_name", "?");
  if (kind != ours["class_name"])
    throw value_error(head + "the file holds a " + kind + " model, and this model is a " +
                      ours["class_name"].get<std::string>() + "." + again);
  if (!file.contains("config") || !file["config"].contains("layers") ||
      !file["config"]["layers"].is_array())
    throw value_error(head + "its config.json has no layer list (config.layers)." + again);
  const nlohmann::json& fl = file["config"]["layers"];
  const nlohmann::json& ol = ours["config"]["layers"];
  for (std::size_t i = 0; i < std::min(fl.size(), ol.size()); ++i) {
    const nlohmann::json& f = fl[i];
    const nlohmann::json& o = ol[i];
    const std::string name = o["config"]["name"].get<std::string>();
    const std::string label = i == 0 ? "the input layer"
                                     : "layer " + std::to_string(i - 1) + " ('" + name + "', " +
                                           o["class_name"].get<std::string>() + ")";
    const std::string fclass = detail::string_at(f, "class_name", "?");
    if (fclass != o["class_name"])
      throw value_error(head + label + " differs: the file has a " + fclass + " layer there." +
                        again);
    if (!f.contains("config") || !f["config"].is_object())
      throw value_error(head + label + " has no config in the file." + again);
    for (const auto& [k, v] : o["config"].items()) {
      if (!detail::compared_key(k)) continue;
      if (!f["config"].contains(k) || !detail::same_value(f["config"][k], v))
        throw value_error(head + label + " differs: " + k + " is " +
                          (f["config"].contains(k) ? text(f["config"][k]) : "missing") +
                          " in the file and " + text(v) + " in this model." + again);
    }
    if (o.contains("inbound_nodes") &&
        detail::inbound_positions(fl, f) != detail::inbound_positions(ol, o))
      throw value_error(head + label + " differs: it reads other layers in the file." + again);
  }
  if (fl.size() != ol.size())
    throw value_error(head + "the file's model has " + std::to_string(fl.size() - 1) +
                      " layers after its input, and this model " + std::to_string(ol.size() - 1) +
                      "." + again);
}

}  // namespace tessel::saving

namespace tessel::saving {

TESSEL_INLINE std::string model_config_json(const model_config_desc& d, const std::string& name,
                                            const compile_info* compiled) {
  using layers::keras_config;
  const bool functional = d.functional;
  const std::size_t n = d.names.size();
  // The shape of graph node k: 0 the model's input, i + 1 layer i's output.
  auto node_shape = [&](std::size_t k) { return k == 0 ? d.input_shape : d.outputs[k - 1]; };
  auto node_name = [&](std::size_t k) {
    return k == 0 ? std::string("input_layer") : std::string(d.names[k - 1]);
  };
  std::string list =
      R"({"module": "keras.layers", "class_name": "InputLayer", "config": )"
      R"({"batch_shape": )" +
      detail::batch_shape(d.input_shape) +
      R"(, "dtype": "float32", "sparse": false, "ragged": false, "name": )"
      R"("input_layer", "optional": false}, "registered_name": null)" +
      std::string(functional ? R"(, "name": "input_layer", "inbound_nodes": [])" : "") + "}";
  for (std::size_t i = 0; i < n; ++i) {
    const keras_config& c = d.configs[i];
    const std::string lname = std::string(d.names[i]);
    std::string entry = R"({"module": "keras.layers", "class_name": )" +
                        keras_config::quote(d.classes[i]) +
                        R"(, "config": {"name": )" + keras_config::quote(lname) +
                        R"(, "trainable": true, "dtype": )" + detail::dtype_policy +
                        (c.text().empty() ? "" : ", " + c.text()) + R"(}, "registered_name": null)";
    const std::size_t inputs = d.inputs[i].size();
    if (c.build_config) {
      std::string shapes;
      if (inputs > 1) {
        shapes = "[";
        for (std::size_t k = 0; k < inputs; ++k)
          shapes += (k ? ", " : "") + detail::batch_shape(node_shape(d.inputs[i][k]));
        shapes += "]";
      } else {
        shapes = detail::batch_shape(node_shape(d.inputs[i][0]));
      }
      entry += R"(, "build_config": {"input_shape": )" + shapes + "}";
    }
    if (functional) {
      std::string args;
      for (std::size_t k = 0; k < inputs; ++k) {
        const std::size_t from = d.inputs[i][k];
        args += std::string(k ? ", " : "") +
                R"({"class_name": "__keras_tensor__", "config": {"shape": )" +
                detail::batch_shape(node_shape(from)) +
                R"(, "dtype": "float32", "keras_history": [)" +
                keras_config::quote(node_name(from)) + ", 0, 0]}}";
      }
      if (inputs > 1) args = "[" + args + "]";
      entry += R"(, "name": )" + keras_config::quote(lname) + R"(, "inbound_nodes": [{"args": [)" +
               args + R"(], "kwargs": {}}])";
    }
    list += ", " + entry + "}";
  }
  const std::string input = detail::batch_shape(d.input_shape);
  if (functional)
    return R"({"module": "keras.src.models.functional", "class_name": "Functional", "config": )"
           R"({"name": )" +
           keras_config::quote(name) + R"(, "trainable": true, "layers": [)" + list +
           R"(], "input_layers": ["input_layer", 0, 0], "output_layers": [)" +
           keras_config::quote(node_name(n)) +
           R"(, 0, 0]}, "registered_name": "Functional", "build_config": {"input_shape": null}, )"
           R"("compile_config": )" +
           detail::compile_config(compiled) + "}";
  return R"({"module": "keras", "class_name": "Sequential", "config": {"name": )" +
         keras_config::quote(name) + R"(, "trainable": true, "dtype": )" + detail::dtype_policy +
         R"(, "layers": [)" + list + R"(], "build_input_shape": )" + input +
         R"(}, "registered_name": null, "build_config": {"input_shape": )" + input +
         R"(}, "compile_config": )" + detail::compile_config(compiled) + "}";
}

}  // namespace tessel::saving
