// explain: a model's plan as text (model.explain(global_batch), examples/explain_seed_mlp): the
// variables with their layouts and shards, each layer's output layout, and every collective of a
// training step with its mesh axis and bytes.
#pragma once

#include <algorithm>

#include <cstddef>
#include <string>

#include "compilation.hpp"
#include "model_plan.hpp"

namespace tessel {

namespace detail {
TESSEL_INLINE std::string bytes_text(std::size_t b);
TESSEL_INLINE std::string pad(std::string s, std::size_t w);
}  // namespace detail

// What a step moves, as `explain` names it: "input" (operand k > 0: "input k"), "output", their
// gradients, a variable by the last part of its path (with " gradient" for its gradient), a
// statistic ("row max"), "loss".
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE std::string step_name(const model_plan& p, const planned_step& s);
}

// The plan as text: variables with their layouts and shards, each layer's output layout, and
// every collective of a training step with its mesh axis and bytes.
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE std::string explain(const model_plan& p, const model_desc& m);
}

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::string bytes_text(std::size_t b) {
  if (b == unknown_bytes) return "?";
  if (b < 10 * 1024) return std::to_string(b) + " B";
  if (b < 10 * 1024 * 1024) return std::to_string((b + 512) / 1024) + " KiB";
  return std::to_string((b + 512 * 1024) / (1024 * 1024)) + " MiB";
}
TESSEL_INLINE std::string pad(std::string s, std::size_t w) {
  // Pad by displayed characters: every byte that does not start a UTF-8 sequence continues one.
  std::size_t shown = 0;
  for (unsigned char c : s) shown += (c & 0xC0) != 0x80;
  if (shown < w) s.append(w - shown, ' ');
  return s;
}
}  // namespace detail
#endif

#if TESSEL_PLAN_DEFINITIONS
inline namespace TESSEL_LIMITS_NAMESPACE {
TESSEL_PLAN_INLINE std::string step_name(const model_plan& p, const planned_step& s) {
  auto operand = [&] { return s.index == 0 ? std::string("input") : "input " + std::to_string(s.index); };
  auto leaf = [&] {
    if (s.index >= p.variable_count) return std::string("variable");
    const std::string_view path = p.variables[s.index].path.view();
    const std::size_t slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
  };
  switch (s.role) {
    case step_role::operand: return operand();
    case step_role::output: return "output";
    case step_role::operand_gradient: return operand() + " gradient";
    case step_role::output_gradient: return "output gradient";
    case step_role::variable: return leaf();
    case step_role::variable_gradient: return leaf() + " gradient";
    case step_role::statistic: return std::string(s.label);
    case step_role::loss: return "loss";
  }
  return "";
}

TESSEL_PLAN_INLINE std::string explain(const model_plan& p, const model_desc& m) {
  using detail::pad;
  std::string s;
  s += "mesh " + to_string(p.mesh) + " (" + std::to_string(p.mesh.size()) + " devices), global batch " +
       (p.batch == dynamic_extent ? std::string("any") : std::to_string(p.batch)) + "\n";
  if (!p.ok) {
    // The batch split is checked on the model's input, before any layer.
    const bool input = p.error.starts_with("the global batch");
    s += (input ? std::string("cannot split the input batch")
                : "cannot plan layer '" + std::string(m.ops[p.error_op].name.view()) + "'") +
         ": " + std::string(p.error);
    if (!p.error_path.empty()) s += " (path '" + std::string(p.error_path.view()) + "'";
    if (!p.error_key.empty())
      s += ", keys '" + std::string(p.error_key.view()) + "' and '" +
           std::string(p.other_error_key.view()) + "'";
    if (!p.error_path.empty()) s += ")";
    return s + "\n";
  }
  // Each column as wide as its widest entry (at least its usual width), so that long names
  // keep the columns apart.
  const auto shown = [](const std::string& t) {
    std::size_t n = 0;
    for (unsigned char c : t) n += (c & 0xC0) != 0x80;
    return n;
  };
  std::size_t path_w = 14, shape_w = 14, layout_w = 26;
  for (std::size_t i = 0; i < p.variable_count; ++i) {
    const auto& v = p.variables[i];
    path_w = std::max(path_w, shown(std::string(v.path.view())) + 1);
    shape_w = std::max(shape_w, shown(to_string(v.shape)) + 1);
    layout_w = std::max(layout_w, shown(to_string(v.layout, p.mesh)) + 1);
  }
  s += "  " + pad("variable", path_w) + pad("shape", shape_w) + pad("layout", layout_w) +
       "local shard\n";
  for (std::size_t i = 0; i < p.variable_count; ++i) {
    const auto& v = p.variables[i];
    s += "  " + pad(std::string(v.path.view()), path_w) + pad(to_string(v.shape), shape_w) +
         pad(to_string(v.layout, p.mesh), layout_w) + to_string(v.local) + "\n";
  }
  const auto layer_name = [&](std::size_t op) {
    return op < m.count ? std::string(m.ops[op].name.view()) : std::string("loss");
  };
  std::size_t layer_w = 14, out_w = 18;
  for (std::size_t i = 0; i < p.activation_count; ++i) {
    if (i > 0) layer_w = std::max(layer_w, shown(layer_name(i - 1)) + 1);
    out_w = std::max(out_w, shown(to_string(p.activations[i].shape)) + 1);
  }
  s += "  " + pad("layer", layer_w) + pad("output shape", out_w) + "output layout\n";
  for (std::size_t i = 0; i < p.activation_count; ++i) {
    const auto& a = p.activations[i];
    const std::string layer = i == 0 ? "input" : layer_name(i - 1);
    s += "  " + pad(layer, layer_w) + pad(to_string(a.shape), out_w) + to_string(a.layout, p.mesh);
    if (a.uses > 1) s += "  (read by " + std::to_string(a.uses) + " layers: gradients summed)";
    s += "\n";
  }
  std::size_t step_layer_w = 10, step_w = 18, what_w = 30;
  for (const auto& st : p) {
    step_layer_w = std::max(step_layer_w, shown(layer_name(st.op)) + 1);
    step_w = std::max(step_w, shown(step_name(p, st)) + 1);
    what_w = std::max(what_w, shown(to_string(st.step, p.mesh)) + 1);
  }
  for (phase ph : {phase::forward, phase::backward}) {
    s += ph == phase::forward ? "  forward:\n" : "  backward:\n";
    std::size_t n = 0;
    for (const auto& st : p) {
      if (st.when != ph) continue;
      ++n;
      s += "    " + pad(layer_name(st.op), step_layer_w) + pad(step_name(p, st), step_w) +
           pad(to_string(st.step, p.mesh), what_w) + detail::bytes_text(st.step.bytes) +
           " buffer, " + detail::bytes_text(st.step.wire_bytes) + " sent per device\n";
    }
    if (n == 0) s += "    (no collectives)\n";
  }
  s += "  per step: " + std::to_string(p.collectives(phase::forward)) + " forward + " +
       std::to_string(p.collectives(phase::backward)) + " backward collectives, " +
       detail::bytes_text(p.wire_bytes(phase::forward)) + " + " +
       detail::bytes_text(p.wire_bytes(phase::backward)) + " sent per device\n";
  return s;
}
}  // namespace TESSEL_LIMITS_NAMESPACE
#endif

}  // namespace tessel
