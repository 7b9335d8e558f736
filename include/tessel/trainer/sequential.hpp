// The public sequential model: sequential_model (model/sequential.hpp) with its trainer
// (trainer/trainer.hpp), as Keras's Sequential is a Model and a Trainer at once.
#pragma once

#include "../backend/default.hpp"
#include "../core/distribution.hpp"
#include "../model/sequential.hpp"
#include "trainer.hpp"

namespace tessel {

// A sequential model on backend B under distribution Dist, with compile / fit / evaluate /
// predict: `basic_sequential<B, one_device, layers::input<4>, layers::dense<2>>`.
template <class B, class Dist, class... Entries>
using basic_sequential = trainer<sequential_model<B, Dist, Entries...>>;

namespace detail {
template <class First, class... Rest>
struct make_sequential {
  using type = basic_sequential<default_backend, one_device, First, Rest...>;
};
template <class First, class... Rest>
  requires is_distribution<First>
struct make_sequential<First, Rest...> {
  using type = basic_sequential<default_backend, First, Rest...>;
};
}  // namespace detail

// `sequential<layers::input<784>, layers::dense<256, {.activation = "relu"}>, ...>`: a model on
// its own process. With a distribution first, `sequential<data_parallel<>, layers::input<784>,
// ...>`, it is built distributed over the job's processes (Keras's set_distribution before
// building the model).
template <class First, class... Rest>
using sequential = typename detail::make_sequential<First, Rest...>::type;

}  // namespace tessel
