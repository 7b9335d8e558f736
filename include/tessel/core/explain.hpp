// explain: a model's plan as text (model.explain(global_batch), examples/explain_seed_mlp): the
// variables with their layouts and shards, each layer's output layout, and every collective of a
// training step with its mesh axis and bytes.
#pragma once

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
TESSEL_INLINE std::string step_name(const model_plan& p, const planned_step& s);

// The plan as text: variables with their layouts and shards, each layer's output layout, and
// every collective of a training step with its mesh axis and bytes.
TESSEL_INLINE std::string explain(const model_plan& p, const model_desc& m);

// Definitions (compiled once in tessel::compiled; see core/compilation.hpp).
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

TESSEL_INLINE std::string step_name(const model_plan& p, const planned_step& s) {
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
    case step_role::statistic:
      return std::string(statistic_name(static_cast<statistic_kind>(s.index)));
    case step_role::loss: return "loss";
  }
  return "";
}

TESSEL_INLINE std::string explain(const model_plan& p, const model_desc& m) {
  using detail::pad;
  std::string s;
  s += "mesh " + to_string(p.mesh) + " (" + std::to_string(p.mesh.size()) + " devices), global batch " +
       std::to_string(p.batch) + "\n";
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
  s += "  " + pad("variable", 14) + pad("shape", 14) + pad("layout", 26) + "local shard\n";
  for (std::size_t i = 0; i < p.variable_count; ++i) {
    const auto& v = p.variables[i];
    s += "  " + pad(std::string(v.path.view()), 14) + pad(to_string(v.shape), 14) +
         pad(to_string(v.layout, p.mesh), 26) + to_string(v.local) + "\n";
  }
  s += "  " + pad("layer", 14) + pad("output shape", 18) + "output layout\n";
  for (std::size_t i = 0; i < p.activation_count; ++i) {
    const auto& a = p.activations[i];
    const std::string layer = i == 0 ? "input" : std::string(m.ops[i - 1].name.view());
    s += "  " + pad(layer, 14) + pad(to_string(a.shape), 18) + to_string(a.layout, p.mesh);
    if (a.uses > 1) s += "  (read by " + std::to_string(a.uses) + " layers: gradients summed)";
    s += "\n";
  }
  for (phase ph : {phase::forward, phase::backward}) {
    s += ph == phase::forward ? "  forward:\n" : "  backward:\n";
    std::size_t n = 0;
    for (const auto& st : p) {
      if (st.when != ph) continue;
      ++n;
      const std::string layer =
          st.op < m.count ? std::string(m.ops[st.op].name.view()) : std::string("loss");
      s += "    " + pad(layer, 10) + pad(step_name(p, st), 18) +
           pad(to_string(st.step, p.mesh), 30) + detail::bytes_text(st.step.bytes) + " buffer, " +
           detail::bytes_text(st.step.wire_bytes) + " sent per device\n";
    }
    if (n == 0) s += "    (no collectives)\n";
  }
  s += "  per step: " + std::to_string(p.collectives(phase::forward)) + " forward + " +
       std::to_string(p.collectives(phase::backward)) + " backward collectives, " +
       detail::bytes_text(p.wire_bytes(phase::forward)) + " + " +
       detail::bytes_text(p.wire_bytes(phase::backward)) + " sent per device\n";
  return s;
}
#endif

}  // namespace tessel
