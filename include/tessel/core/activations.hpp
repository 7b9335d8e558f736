// activations: the element-wise functions a dense layer applies (Keras's names), as values the
// backends switch on. Resolved at compile time, so an unknown name does not compile. Shared
// vocabulary below both the backends and the layers (standard library only), so that a backend
// never includes a layer.
#pragma once

#include <string_view>

namespace tessel {

enum class activation_kind { linear, relu, sigmoid, tanh, softmax };

constexpr bool is_activation_name(std::string_view n) noexcept {
  return n == "linear" || n == "relu" || n == "sigmoid" || n == "tanh" || n == "softmax" ||
         n.empty();
}
constexpr activation_kind activation_from_name(std::string_view n) noexcept {
  if (n == "relu") return activation_kind::relu;
  if (n == "sigmoid") return activation_kind::sigmoid;
  if (n == "tanh") return activation_kind::tanh;
  if (n == "softmax") return activation_kind::softmax;
  return activation_kind::linear;
}
constexpr std::string_view activation_name(activation_kind a) noexcept {
  switch (a) {
    case activation_kind::relu: return "relu";
    case activation_kind::sigmoid: return "sigmoid";
    case activation_kind::tanh: return "tanh";
    case activation_kind::softmax: return "softmax";
    default: return "linear";
  }
}

}  // namespace tessel
