// seeds/002's program: a CNN on Fashion-MNIST, trained by a custom loop made of Keras's stateless
// pieces (value_and_grad, then the optimizer's stateless_apply) on the replicated training state,
// each batch split over the mesh axis "batch" (one process per device):
//
//   Input(28, 28, 1) -> Rescaling(1/255)
//   -> [Conv2D -> BatchNormalization(center, no scale) -> ReLU] x 3
//      (12 filters 3x3 same, no bias; 24 filters 6x6 stride 2, no bias; 32 filters 6x6 stride 2
//       same, "large_k")
//   -> GlobalAveragePooling2D -> Dense(256, relu) -> Dropout(0.5) -> Dense(10)
//   Adam(1e-3), SparseCategoricalCrossentropy(from_logits=True), batch 64 (the last partial batch
//   dropped), 2 epochs; prints "Epoch N loss: ..." as the seed does, then the test accuracy.
//
//   mpiexec -n 2 seed_002_cnn [--epochs N] [--steps N (batches per epoch)]
//
// The seed calls model.stateless_call without training=True, so in its loop Keras normalizes
// with the moving statistics (0 and 1, never updated) and drops nothing. value_and_grad trains as
// fit does: batch normalization uses the global batch's statistics (synchronized over the
// processes) and updates its moving statistics, and dropout drops.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>

namespace {

using namespace tessel::layers;
using bn = batch_normalization<{.center = true, .scale = false}>;
using mesh_t = tessel::device_mesh<tessel::axis<"batch">>;
using model_t = tessel::sequential<
    tessel::data_parallel<mesh_t>, input<28, 28, 1>, rescaling<1.0 / 255.0>,
    conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
    conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
    conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>, bn, relu<>,
    global_average_pooling2d<>, dense<256, {.activation = "relu"}>, dropout<0.5>, dense<10>>;
// The data sharding: each batch split along its first dimension over "batch".
using batch_layout = tessel::tensor_layout<mesh_t, "batch", tessel::none, tessel::none, tessel::none>;

int run(int argc, char** argv) {
  std::size_t epochs = 2, steps = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--steps") == 0) steps = std::strtoul(argv[++i], nullptr, 10);
  }
  const bool chief = tessel::process_id() == 0;
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  const std::size_t n = train.first.shape[0], n_test = test.first.shape[0];
  // The seed's arrays: float32 pixel values 0..255 (the model rescales), int labels.
  const auto x_train = tessel::data::reshape(tessel::data::to_float(train.first, 1.0f), {n, 28, 28, 1});
  const auto y_train = tessel::data::to_int32(train.second);
  const auto x_test =
      tessel::data::reshape(tessel::data::to_float(test.first, 1.0f), {n_test, 28, 28, 1});
  const auto y_test = tessel::data::to_int32(test.second);
  if (chief)
    std::printf("x_train shape: (%zu, 28, 28, 1)\n%zu train samples\n%zu test samples\n", n, n,
                n_test);

  model_t model;
  model.compile(tessel::optimizers::adam{.learning_rate = 1e-3},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {"accuracy"});
  const auto devices = tessel::list_devices();
  if (chief) {
    std::string names;
    for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d;
    std::printf("Running on %zu devices: [%s]\n", devices.size(), names.c_str());
  }

  // The data sharding, drawn as the seed draws it: one batch as (64, 784) over "batch".
  constexpr std::size_t batch_size = 64;
  const auto first = tessel::data::slice_rows(x_train, 0, batch_size);
  const auto sharded = tessel::distribute_tensor<batch_layout>(first);
  if (chief) {
    tessel::layout_value flat = tessel::layout_value::replicated(2);
    flat.dims[0] = sharded.layout().dims[0];
    std::printf("Data sharding\n%s",
                tessel::visualize_sharding(tessel::shape_value{batch_size, 28 * 28}, flat,
                                           model.mesh().shape())
                    .c_str());
  }

  // The replicated training state, and the loop of the stateless pieces over it.
  tessel::state_tree<model_t::backend> state = model.get_state_tree();
  const std::size_t batches = steps > 0 ? std::min(steps, n / batch_size) : n / batch_size;
  for (std::size_t epoch = 0; epoch < epochs; ++epoch) {
    double loss_value = 0;
    for (std::size_t b = 0; b < batches; ++b) {
      const auto x = tessel::data::slice_rows(x_train, b * batch_size, (b + 1) * batch_size);
      const auto y = tessel::data::slice_rows(y_train, b * batch_size, (b + 1) * batch_size);
      auto [loss, grads, non_trainable] = model.value_and_grad(
          state.trainable_variables, state.non_trainable_variables, x, y);
      auto [trainable, optimizer_variables] = model.get_optimizer().stateless_apply(
          state.optimizer_variables, grads, state.trainable_variables);
      state.trainable_variables = std::move(trainable);
      state.non_trainable_variables = std::move(non_trainable);
      state.optimizer_variables = std::move(optimizer_variables);
      loss_value = loss;
    }
    if (chief) std::printf("Epoch %zu loss: %.7g\n", epoch, loss_value);
  }

  // The state back into the model, then the test set.
  model.set_state_tree(state);
  const tessel::logs result = model.evaluate(x_test, y_test, 64, 0);
  if (chief)
    std::printf("test loss: %.4f - test accuracy: %.4f\n", *tessel::find_log(result, "loss"),
                *tessel::find_log(result, "accuracy"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", tessel::process_id(), e.what());
    return 1;
  }
}
