// graph: a model's graph as types — the nodes of a functional model (layers/node.hpp) ordered as
// Keras orders a functional model's layers (ops/function.py's map_graph: by depth, the longest
// path from the layer to the output, deepest first; layers of one depth in the order a
// depth-first walk from the output first reaches them), and as the edges the planner and the
// executor take (node 0 the model's input, node i + 1 the output of layer i). A sequential model
// is the chain.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../core/diagnostics.hpp"
#include "../core/fixed_string.hpp"
#include "../layers/node.hpp"
#include "executor.hpp"

namespace tessel {

template <class... T>
struct type_list {};

namespace detail {

template <class List, class T>
struct contains;
template <class... L, class T>
struct contains<type_list<L...>, T> : std::bool_constant<(std::is_same_v<L, T> || ...)> {};

template <class List, class T>
struct append;
template <class... L, class T>
struct append<type_list<L...>, T> {
  using type = type_list<L..., T>;
};

// Whether a node's input is the model's input, or another node (a layer's output).
template <class T>
struct is_node : std::false_type {};
template <class Layer, class... In>
struct is_node<node<Layer, In...>> : std::true_type {};

// How a diagnostic names a layer before the model has named it: its given name, else its class's.
template <class Layer>
constexpr name_string layer_label() {
  return Layer::given_name.empty() ? name_string(Layer::base_name) : Layer::given_name;
}

// The nodes reached from `Node` that are not in `Done`, appended to it after the nodes they read
// (post-order). `Input` is the model's input: every path must end there.
template <class Input, class Done, class Node>
struct visit;
template <class Input, class Done, class... Nodes>
struct visit_all;
template <class Input, class Done>
struct visit_all<Input, Done> {
  using type = Done;
};
template <class Input, class Done, class First, class... Rest>
struct visit_all<Input, Done, First, Rest...> {
  using type = typename visit_all<Input, typename visit<Input, Done, First>::type, Rest...>::type;
};
template <class Input, class Done, class Node>
struct visit {
  // Not a node: an input (the model's, checked by functional_graph) or not a layer's output.
  using type = Done;
};
template <class Input, class Done, class Layer, class... In>
struct visit<Input, Done, node<Layer, In...>> {
  static_assert(
      require<((is_node<In>::value || std::is_same_v<In, Input>)&&...),
              diagnostic::layer_reads_an_input_that_is_not_the_models<layer_label<Layer>()>>);
  using type = typename std::conditional_t<
      contains<Done, node<Layer, In...>>::value, std::type_identity<Done>,
      append<typename visit_all<Input, Done, In...>::type, node<Layer, In...>>>::type;
};

template <class List, class T>
struct index_of;
template <class T, class... L>
struct index_of<type_list<L...>, T> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<L, T>..., false};
    std::size_t i = 0;
    while (i < sizeof...(L) && !same[i]) ++i;
    return i;
  }();
};

// Keras's order of the nodes of a post-order walk (each after the nodes it reads; `inputs[i]`
// node i's inputs as node numbers, 0 the model's input and k + 1 node k): position p of the
// result is the post-order index of Keras's p-th layer. Deeper first (the depth of a node is the
// longest path from it to the output, the output's 0), ties in the order a depth-first walk from
// the output, reading each node's inputs in order, first reaches them (pre-order).
template <std::size_t N, std::size_t MaxInputs>
constexpr std::array<std::size_t, N> keras_layer_order(
    const std::array<std::array<std::uint8_t, MaxInputs>, N>& inputs,
    const std::array<std::uint8_t, N>& count) {
  std::array<std::size_t, N> order{}, depth{}, first_reached{};
  if constexpr (N > 0) {
    // A node follows every node it reads, so walking backwards visits each reader first.
    for (std::size_t i = N; i-- > 0;)
      for (std::size_t k = 0; k < count[i]; ++k)
        if (inputs[i][k] != 0 && depth[inputs[i][k] - 1u] < depth[i] + 1)
          depth[inputs[i][k] - 1u] = depth[i] + 1;
    // The pre-order walk from the output (node N - 1), with an explicit stack.
    std::array<bool, N> seen{};
    std::array<std::size_t, N * MaxInputs + 1> stack{};
    std::size_t top = 0, reached = 0;
    stack[top++] = N - 1;
    while (top > 0) {
      const std::size_t i = stack[--top];
      if (seen[i]) continue;
      seen[i] = true;
      first_reached[i] = reached++;
      for (std::size_t k = count[i]; k-- > 0;)  // pushed in reverse: read in order
        if (inputs[i][k] != 0 && !seen[inputs[i][k] - 1u]) stack[top++] = inputs[i][k] - 1u;
    }
    for (std::size_t i = 0; i < N; ++i) order[i] = i;
    // Insertion sort: N is small, and this runs when the program compiles.
    for (std::size_t i = 1; i < N; ++i)
      for (std::size_t j = i; j > 0; --j) {
        const std::size_t a = order[j - 1], b = order[j];
        const bool before = depth[b] > depth[a] ||
                            (depth[b] == depth[a] && first_reached[b] < first_reached[a]);
        if (!before) break;
        order[j - 1] = b;
        order[j] = a;
      }
  }
  return order;
}

template <class List, auto Order, class Indices>
struct permute;
template <class... L, auto Order, std::size_t... I>
struct permute<type_list<L...>, Order, std::index_sequence<I...>> {
  template <std::size_t K>
  using at = std::tuple_element_t<K, std::tuple<L...>>;
  using type = type_list<at<Order[I]>...>;
};

template <class Node>
struct node_inputs;
template <class Layer, class... In>
struct node_inputs<node<Layer, In...>> {
  using type = type_list<In...>;
};

}  // namespace detail

// The graph of a functional model from `Input` to `Output`: its layers in order, and its edges.
template <class Input, class Output>
struct functional_graph {
 private:
  template <class List>
  struct unpack;
  template <class... N>
  struct unpack<type_list<N...>> {
    using layers = type_list<typename N::layer...>;
    static constexpr std::size_t count = sizeof...(N);
    // The node a node's k-th input is: 0 the model's input, i + 1 the output of layer i.
    template <class T>
    static constexpr std::uint8_t node_number() {
      if constexpr (detail::is_node<T>::value)
        return static_cast<std::uint8_t>(detail::index_of<type_list<N...>, T>::value + 1);
      else
        return 0;
    }
    template <class Node>
    struct edges_of;
    template <class Layer, class... In>
    struct edges_of<node<Layer, In...>> {
      static constexpr std::array<std::uint8_t, sizeof...(In)> inputs{node_number<In>()...};
    };
    static constexpr graph_edges<sizeof...(N)> edges() {
      graph_edges<sizeof...(N)> g;
      std::size_t i = 0;
      auto one = [&]<class Node>(std::type_identity<Node>) {
        constexpr auto in = edges_of<Node>::inputs;
        for (std::size_t k = 0; k < in.size() && k < max_op_inputs; ++k) g.inputs[i][k] = in[k];
        g.count[i] = static_cast<std::uint8_t>(in.size());
        g.has_variables[i] = Node::layer::has_variables;
        ++i;
      };
      (one(std::type_identity<N>{}), ...);
      return g;
    }
  };
  // Each node after the nodes it reads, in the order a depth-first walk from the output reads
  // them; then in Keras's order.
  using post_order = typename detail::visit<Input, type_list<>, Output>::type;
  static constexpr auto post_order_edges = unpack<post_order>::edges();
  static constexpr auto keras_order =
      detail::keras_layer_order(post_order_edges.inputs, post_order_edges.count);

 public:
  using nodes = typename detail::permute<post_order, keras_order,
                                         std::make_index_sequence<unpack<post_order>::count>>::type;
  using layers = typename unpack<nodes>::layers;
  static constexpr std::size_t layer_count = unpack<nodes>::count;
  static constexpr graph_edges<layer_count> edges = unpack<nodes>::edges();
  static_assert(!std::is_same_v<Output, Input>,
                "tessel::functional: the output is the input itself; give the output node of "
                "the last layer");
  static_assert(detail::is_node<Output>::value,
                "tessel::functional: the output must be a layer applied to nodes, like "
                "layers::dense<10>::on<x>");
};

}  // namespace tessel
