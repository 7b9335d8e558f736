// state: a model's whole training state as one value (Keras's get_state_tree): the trainable
// and non-trainable variables, the optimizer's variables (its iteration count included), the
// metric accumulators and the random-stream counter, each a `state_variable` with its Keras path.
// A float32 variable is a sharded tensor (this device's block, with its global shape and layout);
// a counter or an accumulator is a scalar every process holds alike. The values are the state's
// own (copies): the stateless training step (Keras's stateless_call, a value-and-gradient
// function, optimizer.stateless_apply) reads them and returns new ones, and set_state_tree
// writes a state back into the model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/errors.hpp"
#include "layers/layer.hpp"
#include "tensor/dtensor.hpp"

namespace tessel {

// Whether the backend `B` keeps a tensor's values in host memory (backend::host), where saving
// can write them from the model's own memory instead of a copy.
template <class B>
inline constexpr bool host_memory = B::device_kind == std::string_view("cpu");

// One variable of the state: a float32 tensor (this device's block), an int64 counter or a
// float64 accumulator. Keras's dtypes are float32, int32 (an optimizer's iteration) and uint32
// (a seed generator's state): the counters are int64 here so that no run outgrows them, and the
// accumulators float64 as the trainer sums them, so that a state written back resumes exactly.
template <class B>
struct state_variable {
  std::string path;                  // Keras's path: "dense/kernel", "adam/iteration"
  std::vector<std::size_t> shape;    // the global shape; {} for a scalar
  std::variant<basic_dtensor<B>, std::int64_t, double> value;

  [[nodiscard]] bool is_tensor() const noexcept { return value.index() == 0; }
  [[nodiscard]] std::string_view dtype() const noexcept {
    constexpr std::string_view names[] = {"float32", "int64", "float64"};
    return names[value.index()];
  }
  [[nodiscard]] const basic_dtensor<B>& tensor() const { return get<basic_dtensor<B>>("a tensor"); }
  [[nodiscard]] std::int64_t integer() const { return get<std::int64_t>("an int64 counter"); }
  [[nodiscard]] double real() const { return get<double>("a float64 scalar"); }
  // This device's block on the host, row-major (a tensor), or the scalar as one value.
  [[nodiscard]] std::vector<float> numpy() const {
    if (const auto* t = std::get_if<basic_dtensor<B>>(&value)) {
      std::vector<float> out(t->size());
      B::download(t->local(), std::span<float>(out));
      return out;
    }
    if (const auto* i = std::get_if<std::int64_t>(&value)) return {static_cast<float>(*i)};
    return {static_cast<float>(std::get<double>(value))};
  }

 private:
  template <class T>
  const T& get(const char* what) const {
    if (const T* p = std::get_if<T>(&value)) return *p;
    throw value_error("State variable '" + path + "' is a " + std::string(dtype()) +
                      (value.index() == 0 ? " tensor" : " scalar") + ", not " + what + ".");
  }
};

// A tensor with its own storage holding t's values: same global shape, layout and block.
template <class B>
basic_dtensor<B> copy_of(const basic_dtensor<B>& t, const std::string& label) {
  const typename B::matrix m = B::make_matrix(label, B::rows(t.local()), B::cols(t.local()));
  B::copy(t.local(), m);
  return t.like(m);
}

// A model variable's value as a state variable: a copy, or (copy false) the variable's own
// tensor, to check a given state against.
template <class B>
state_variable<B> state_of(const variable<B>& v, bool copy = true) {
  return {v.path, v.shape, copy ? copy_of(v.value, v.path) : v.value};
}
// A state variable with its own storage: a tensor's values copied, a scalar as it is.
template <class B>
state_variable<B> copy_of(const state_variable<B>& v) {
  return v.is_tensor() ? state_variable<B>{v.path, v.shape, copy_of(v.tensor(), v.path)} : v;
}

// A list of state variables in a fixed order (Keras's lists of variables), with lookup by path.
template <class B>
struct state_list : std::vector<state_variable<B>> {
  using std::vector<state_variable<B>>::vector;
  [[nodiscard]] const state_variable<B>* find(std::string_view path) const {
    for (const auto& v : *this)
      if (v.path == path) return &v;
    return nullptr;
  }
  [[nodiscard]] const state_variable<B>& operator[](std::string_view path) const {
    if (const auto* v = find(path)) return *v;
    throw value_error("No state variable '" + std::string(path) + "'.");
  }
  using std::vector<state_variable<B>>::operator[];
};

// Keras's state tree: get_state_tree()'s four groups, each in Keras's order.
template <class B>
struct state_tree {
  state_list<B> trainable_variables;
  state_list<B> non_trainable_variables;
  state_list<B> optimizer_variables;
  state_list<B> metrics_variables;
};

namespace detail {
// "(3, 4)", "()" for a scalar.
inline std::string shape_text(const std::vector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}
// Checks that `given` can stand for `expected` (a state variable the model holds, of the same
// path): the same path, dtype and shape, and for a tensor the same layout and block. `where`
// names the call and `group` the list, for the message.
template <class B>
void check_state_variable(const state_variable<B>& expected, const state_variable<B>& given,
                          std::string_view where, std::string_view group, std::size_t index) {
  auto fail = [&](const std::string& what) {
    throw value_error(std::string(where) + ": " + std::string(group) + "[" +
                      std::to_string(index) + "] " + what +
                      ". Pass the values in the order and with the shapes and layouts that "
                      "get_state_tree() gives them.");
  };
  if (given.path != expected.path)
    fail("is '" + given.path + "', where the model's is '" + expected.path + "'");
  if (given.value.index() != expected.value.index())
    fail("('" + given.path + "') is " + std::string(given.dtype()) + ", expected " +
         std::string(expected.dtype()));
  if (given.shape != expected.shape)
    fail("('" + given.path + "') has shape " + shape_text(given.shape) + ", expected " +
         shape_text(expected.shape));
  if (!expected.is_tensor()) return;
  const auto& a = expected.tensor();
  const auto& b = given.tensor();
  if (!(a.layout() == b.layout()) || !(a.global_shape() == b.global_shape()) ||
      !(a.shard().offset == b.shard().offset) || !(a.shard().extent == b.shard().extent) ||
      B::rows(a.local()) != B::rows(b.local()) || B::cols(a.local()) != B::cols(b.local()))
    fail("('" + given.path + "') is not laid out as the model's variable (its layout or this "
         "device's block differs)");
}
template <class B>
void check_state_list(const state_list<B>& expected, const state_list<B>& given,
                      std::string_view where, std::string_view group) {
  if (given.size() != expected.size())
    throw value_error(std::string(where) + ": " + std::string(group) + " has " +
                      std::to_string(given.size()) + " values, the model has " +
                      std::to_string(expected.size()) +
                      ". Pass the list get_state_tree() gives, in its order.");
  for (std::size_t i = 0; i < given.size(); ++i)
    check_state_variable(expected[i], given[i], where, group, i);
}
}  // namespace detail

// Compiled once for the host backend, in tessel::tessel (core/compilation.hpp).
#define TESSEL_STATE_TEMPLATES(prefix, B)                                                      \
  prefix template void detail::check_state_variable<B>(                                      \
      const state_variable<B>&, const state_variable<B>&, std::string_view, std::string_view,  \
      std::size_t);                                                                            \
  prefix template void detail::check_state_list<B>(const state_list<B>&, const state_list<B>&, \
                                                   std::string_view, std::string_view);
#if TESSEL_EXTERN_TEMPLATES
TESSEL_STATE_TEMPLATES(extern, backend::host)
#endif
#if TESSEL_EXTERN_CUDA_TEMPLATES
TESSEL_STATE_TEMPLATES(extern, backend::cuda)
#endif

}  // namespace tessel
