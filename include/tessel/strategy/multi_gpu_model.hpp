// keras.utils.multi_gpu_model(model, gpus=N), Keras 2's data parallelism: the model replicated on
// N devices, each batch split between them, the gradients summed. TensorFlow removed it in favour
// of MirroredStrategy, and that is what it is here: the model's type under
// mirrored_strategy<device_mesh<axis<"batch", N>>>, run on N processes (mpiexec -n N).
//
//   auto parallel_model = tessel::multi_gpu_model<2>(model);  // model's weights copied in
//   parallel_model->compile({.optimizer = "rmsprop", .loss = "categorical_crossentropy"});
//   parallel_model->fit(x, y, {.batch_size = 256, .epochs = 20});
//   model.set_weights(parallel_model->get_weights());  // Keras 2 shared them; here, copy back
#pragma once

#include <memory>

#include "../core/device_mesh.hpp"
#include "../core/diagnostics.hpp"
#include "../trainer/functional.hpp"
#include "../trainer/sequential.hpp"
#include "strategy.hpp"

namespace tessel {

namespace detail {
// A model's type with its distribution replaced by Dist.
template <class Model, class Dist>
struct redistributed {
  static_assert(always_false<Model>,
                "tessel::multi_gpu_model: the argument must be a tessel::sequential or "
                "tessel::functional model");
};
template <class B, class D, class... Entries, class Dist>
struct redistributed<trainer<sequential_model<B, D, Entries...>>, Dist> {
  using type = trainer<sequential_model<B, Dist, Entries...>>;
};
template <class B, class D, class Input, class Output, class Dist>
struct redistributed<trainer<functional_model<B, D, Input, Output>>, Dist> {
  using type = trainer<functional_model<B, Dist, Input, Output>>;
};
}  // namespace detail

// The model type multi_gpu_model<Gpus>(model) returns: Model's layers under a mirrored strategy
// of Gpus replicas.
template <class Model, int Gpus>
requires require<(Gpus >= 2), diagnostic::multi_gpu_model_needs_at_least_2_gpus<Gpus>>
using multi_gpu_model_t =
    typename detail::redistributed<Model,
                                   mirrored_strategy<device_mesh<axis<"batch", Gpus>>>>::type;

// A new model of Model's layers replicated on `Gpus` processes, holding `model`'s weights (not
// compiled: compile it, as Keras 2's). The job must have `Gpus` processes; otherwise the mesh's
// error says how many it has.
template <int Gpus, class Model>
[[nodiscard]] std::unique_ptr<multi_gpu_model_t<Model, Gpus>> multi_gpu_model(const Model& model) {
  auto parallel = std::make_unique<multi_gpu_model_t<Model, Gpus>>();
  parallel->set_weights(model.get_weights());
  return parallel;
}

}  // namespace tessel
