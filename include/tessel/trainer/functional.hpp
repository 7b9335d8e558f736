// The public functional model: functional_model (model/sequential.hpp) with its trainer, as
// Keras's `keras.Model(inputs, outputs)` is a Model and a Trainer at once.
#pragma once

#include "../backend/default.hpp"
#include "../core/distribution.hpp"
#include "../model/sequential.hpp"
#include "trainer.hpp"

namespace tessel {

// A functional model on backend B under distribution Dist, from its input to its output node.
template <class B, class Dist, class Input, class Output>
using basic_functional = trainer<functional_model<B, Dist, Input, Output>>;

namespace detail {
template <class... Args>
struct make_functional {
  static_assert(sizeof...(Args) == 2 || sizeof...(Args) == 3,
                "tessel::functional: give the input and the output, functional<x, y>, or a "
                "distribution first, functional<data_parallel<>, x, y>");
};
template <class Input, class Output>
struct make_functional<Input, Output> {
  using type = basic_functional<default_backend, one_device, Input, Output>;
};
template <class Dist, class Input, class Output>
requires is_distribution<Dist>
struct make_functional<Dist, Input, Output> {
  using type = basic_functional<default_backend, Dist, Input, Output>;
};
}  // namespace detail

// Keras's functional API: the graph is written as nodes, each a layer called on the nodes it
// reads, and the model is the graph from its input to its output:
//
//   using x = layers::input<16>;
//   using h = layers::dense<16>::on<layers::dense<32, {.activation = "relu"}>::on<x>>;
//   using y = layers::dense<4>::on<layers::relu<>::on<layers::add<>::on<x, h>>>;
//   tessel::functional<x, y> model;                      // keras.Model(x, y)
//   tessel::functional<data_parallel<>, x, y> model;     // built distributed
template <class... Args>
using functional = typename detail::make_functional<Args...>::type;

}  // namespace tessel
