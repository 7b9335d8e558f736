// seeds/000's DataParallel program on Fashion-MNIST: the model's weights replicated on every
// device of a 1-D mesh, each global batch of 16 split into equal blocks along it, the gradients
// all-reduced every step. One process per device, launched by mpiexec:
//
//   mpiexec -n 2 data_parallel [--epochs N] [--verbose 0|1|2] [--train-samples N]
//
// The mesh is chosen when the program compiles, by TESSEL_EXAMPLE_DEVICES:
//   0 (default)  data_parallel<>: 1-D mesh "batch" sized at run time, one device per process
//                (Keras: DataParallel(), every device)
//   N > 0        data_parallel<device_mesh<axis<"data", N>>>: a static N-device mesh, which
//                must be launched on N processes (Keras: DataParallel(device_mesh=DeviceMesh(
//                shape=(N,), axis_names=["data"])))
// examples/CMakeLists.txt builds it as data_parallel, data_parallel_2 and data_parallel_4.
//
// The model, as in the seed: Input(28, 28, 1) -> Flatten -> Dense(200, relu, no bias, "d1")
//   -> Dropout(0.4) -> Dense(10, softmax, "d2"); compile(loss="mse") (Keras's default optimizer,
//   RMSprop) with accuracy; batch 16; 3 epochs; then the test set. Started without mpiexec it is
// the same program on one device.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>

#ifndef TESSEL_EXAMPLE_DEVICES
#define TESSEL_EXAMPLE_DEVICES 0
#endif

namespace {

using namespace tessel::layers;

template <std::size_t Devices>
struct distribution_for {
  using mesh = tessel::device_mesh<tessel::axis<"data", Devices>>;
  using type = tessel::data_parallel<mesh>;
};
template <>
struct distribution_for<0> {
  using type = tessel::data_parallel<>;
};
using distribution = distribution_for<TESSEL_EXAMPLE_DEVICES>::type;

using model_t =
    tessel::sequential<distribution, input<28, 28, 1>, flatten<>,
                       dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                       dropout<0.4>, dense<10, {.activation = "softmax", .name = "d2"}>>;

constexpr std::size_t global_batch = 16;

int run(int argc, char** argv) {
  std::size_t epochs = 3;
  int verbose = 1;
  std::size_t train_samples = 60000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0)
      epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--verbose") == 0)
      verbose = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--train-samples") == 0)
      train_samples = std::strtoul(argv[++i], nullptr, 10);
  }
  if (train_samples == 0)
    throw tessel::value_error("--train-samples must be a positive number of samples");

  // Every process loads the whole data set and draws the same shuffled order (seed 1); the
  // model gives each process its block of rows of every global batch.
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto images = [](const tessel::array<std::uint8_t>& x) {
    return tessel::data::reshape(tessel::data::to_float(x, 1.0f / 255.0f), {x.shape[0], 28, 28, 1});
  };
  auto one_hot = [](const tessel::array<std::uint8_t>& y) {
    return tessel::data::to_categorical(y, 10);
  };
  auto train_ds = tessel::from_tensor_slices(images(train.first), one_hot(train.second))
                      .take(static_cast<std::int64_t>(train_samples))
                      .shuffle(60000, 1)
                      .batch(global_batch)
                      .prefetch(2);
  auto test_ds =
      tessel::from_tensor_slices(images(test.first), one_hot(test.second)).batch(global_batch);

  // keras.distribution.set_distribution(data_parallel), then the model: its weights are
  // replicated on every device of the mesh.
  model_t model;
  model.compile({.loss = "mse", .metrics = {"accuracy"}});

  const bool chief = tessel::process_id() == 0;
  if (chief) {
    std::string devices;
    for (const std::string& d : tessel::list_devices())
      devices += (devices.empty() ? "" : ", ") + d;
    // The mesh as bound to the processes, and as declared when it differs (an axis sized at
    // run time shows as '?').
    const std::string bound = tessel::to_string(model.mesh().shape());
    const std::string declared = tessel::to_string(model_t::mesh_type::value);
    std::printf("devices: %s\nmesh: %s%s\n%s\n", devices.c_str(), bound.c_str(),
                declared == bound ? "" : (" (declared " + declared + ")").c_str(),
                model.explain(global_batch).c_str());
    std::fflush(stdout);
  }
  if (verbose) model.summary();

  model.fit(train_ds, {.epochs = epochs, .verbose = verbose});
  const tessel::logs result = model.evaluate(test_ds, verbose);
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
    return guard.fail(e);
  }
}
