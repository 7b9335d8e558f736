// node: a layer applied to the outputs of other nodes, as Keras's functional API calls a layer on
// tensors (`layers.Dense(64)(x)`). Every layer type has `on`: `dense<64>::on<x>` is the node of a
// dense layer reading x, `add<>::on<x, h>` one reading x and h. A model's graph is these types
// (model/graph.hpp orders them), so it is known when the program compiles.
#pragma once

namespace tessel {

template <class Layer, class... Inputs>
struct node {
  using layer = Layer;
};

}  // namespace tessel
