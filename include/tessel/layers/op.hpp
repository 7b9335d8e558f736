// op: the protocol every op of a model (a layer) follows at run time, written once and run by the
// model's executor (model/executor.hpp) under any distribution.
//
// An op type L gives, as its traits, its class and base names, the shapes it takes and gives, its
// parameter count and its plan op (the sharding rule, layers/plan/), and as `L::runtime<B>`:
//
//   runtime(const layer_info&, variable_store<B>&, seed)     adds its variables, in the order its
//                                                            rule lists them
//   const tensor& forward(const op_args<B>&, const pass_context&, Reduce&)
//       its result, from its operands and variables as it computes with them (the executor has
//       resharded each to the layout the plan chose). `args.whole`: no reshard follows, so the
//       op finishes its result itself (a dense layer's activation, fused into its GEMM); else
//       the executor reshards the result to the output's layout and calls finish().
//   void finish(tensor& y, const pass_context&, Reduce&)          optional: the epilogue on
//   void finish_backward(const tensor& y, const matrix& dy, ...)  the output, and its gradient
//   op_gradients<B> backward(const op_args<B>&, const matrix& dy, const op_grads<B>&,
//                            const pass_context&, Reduce&)
//       from the gradient of its result (of its output when args.whole), the gradients of its
//       variables written where `grads` says, and its operands' gradients returned (an empty
//       tensor where none is asked), each in the layout the plan recorded. dy is the op's
//       scratch: it may be changed in place, and returned as an operand's gradient.
//
// `Reduce` runs the row reductions of a dimension split across devices (runtime/reshard.hpp's
// tensor_resharder) and makes tensors of a layout (`make`); a local op ignores it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include <span>

#include "../comm/concept.hpp"
#include "../core/errors.hpp"
#include "../core/model_plan.hpp"
#include "../tensor/dtensor.hpp"
#include "layer.hpp"

namespace tessel {

// What the executor hands an op's forward and backward.
template <class B>
struct op_args {
  std::array<const basic_dtensor<B>*, max_op_inputs> operands{};  // as the op computes with them
  std::array<const basic_dtensor<B>*, max_op_variables> variables{};  // its variables, likewise
  std::size_t operand_count = 1;
  std::uint32_t wants_operand_gradients = 1;  // bit k: operand k's gradient is needed
  // The layouts the plan chose for this op; null where the op runs on its local blocks as they
  // come (one device, data parallelism: nothing is resharded around it).
  const op_layouts* layouts = nullptr;
  bool whole = true;           // the result is the output: the op finishes it itself
  bool adds_constants = true;  // this device adds what a partial result holds once (a bias)
};

// Where an op's backward writes its variables' gradients (matrices are handles to device memory):
// each variable's gradient block where nothing is resharded after (or a gradient bucket reduces
// it), else a buffer in the layout the plan recorded for the op's gradient of it. Bit v of
// `wanted` is set where variable v's gradient is wanted (a non-trainable one's is not).
template <class B>
struct op_grads {
  std::array<typename B::matrix, max_op_variables> variables{};
  std::uint8_t wanted = 0;
  [[nodiscard]] bool wants(std::size_t v) const noexcept { return (wanted >> v) & 1u; }
};

// The gradients of an op's operands, in the layouts the plan recorded (an empty tensor where
// none was asked for).
template <class B>
struct op_gradients {
  std::array<basic_dtensor<B>, max_op_inputs> operands{};
};

// An op's variables, in the order its rule lists them (none for an op without variables).
template <class B, class Op>
std::span<variable<B>* const> op_variables(const Op& op) {
  if constexpr (requires { op.variables(); }) return op.variables();
  else return {};
}

// What an op called alone reduces with: its blocks are whole (one device), so no dimension is
// split and nothing moves.
template <class B>
struct local_reducer {
  static constexpr bool moves(std::uint32_t) noexcept { return false; }
  template <class T>
  void reduce_rows(const T&, std::uint32_t, comm::reduce_op) const noexcept {}
  basic_dtensor<B> make(const shape_value&, const layout_value&, typename B::matrix&,
                        const char*) const {
    throw value_error("an op called alone runs on whole blocks: it has no layouts to make");
  }
};

// An op called alone on its operand's blocks, as a function (Keras's layer(x)): what a test of
// one layer does. Its variables are its own.
template <class B, class Op>
const basic_dtensor<B>& call_forward(Op& op, const basic_dtensor<B>& x, const pass_context& c) {
  op_args<B> a;
  a.operands[0] = &x;
  const auto vars = op_variables<B>(op);
  for (std::size_t v = 0; v < vars.size(); ++v) a.variables[v] = &vars[v]->value;
  local_reducer<B> r;
  return op.forward(a, c, r);
}
// Its backward after call_forward: each variable's gradient in the variable's `gradient`, and the
// input's gradient returned (empty unless `need_dx`).
template <class B, class Op>
typename B::matrix call_backward(Op& op, const basic_dtensor<B>& x, const typename B::matrix& dy,
                                 bool need_dx, const pass_context& c) {
  op_args<B> a;
  a.operands[0] = &x;
  a.wants_operand_gradients = need_dx ? 1 : 0;
  op_grads<B> g;
  const auto vars = op_variables<B>(op);
  for (std::size_t v = 0; v < vars.size(); ++v) {
    a.variables[v] = &vars[v]->value;
    g.variables[v] = vars[v]->gradient;
    if (vars[v]->trainable) g.wanted |= static_cast<std::uint8_t>(1u << v);
  }
  local_reducer<B> r;
  return op.backward(a, dy, g, c, r).operands[0].local();
}

}  // namespace tessel
