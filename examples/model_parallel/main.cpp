// seeds/000's ModelParallel program on Fashion-MNIST: a 2-D mesh ("data" x "model"), d1's kernel
// split by columns over "model", d1's bias with it, d2's output laid out ("data", None); the
// batch split over "data". Built once per mesh shape (TESSEL_MESH_DATA x TESSEL_MESH_MODEL: 8x1,
// 4x2, 2x4, 1x8), run with `mpiexec -n 8`. Process 0 prints the summary, d1's kernel drawn by
// visualize_sharding, the progress and the test accuracy.
//
//   mpiexec -n 8 model_parallel_2x4 [--epochs N] [--samples N] [--verbose 0|1|2]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

#ifndef TESSEL_MESH_DATA
#define TESSEL_MESH_DATA 2
#endif
#ifndef TESSEL_MESH_MODEL
#define TESSEL_MESH_MODEL 4
#endif

namespace {

using namespace tessel::layers;
using tessel::none;
using tessel::rule;

// mesh_2d = DeviceMesh(shape=(2, 4), axis_names=["data", "model"])
using mesh = tessel::device_mesh<tessel::axis<"data", TESSEL_MESH_DATA>,
                                 tessel::axis<"model", TESSEL_MESH_MODEL>>;
// layout_map["d1/kernel"] = (None, "model"); layout_map["d1/bias"] = ("model",);
// layout_map["d2/output"] = ("data", None)
using layout_map = tessel::layout_map<mesh, rule<"d1/kernel", none, "model">,
                                      rule<"d1/bias", "model">, rule<"d2/output", "data", none>>;
// ModelParallel(layout_map, batch_dim_name="data")
using distribution = tessel::model_parallel<layout_map, "data">;
using model_t =
    tessel::sequential<distribution, input<28, 28, 1>, flatten<>,
                       dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                       dropout<0.4>, dense<10, {.activation = "softmax", .name = "d2"}>>;

int run(int argc, char** argv) {
  std::size_t epochs = 3, samples = 60000;
  int verbose = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--samples") == 0) samples = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--verbose") == 0) verbose = std::atoi(argv[++i]);
  }
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto images = [](const tessel::array<std::uint8_t>& x, std::size_t n) {
    return tessel::data::reshape(
        tessel::data::to_float(tessel::data::slice_rows(x, 0, n), 1.0f / 255.0f), {n, 28, 28, 1});
  };
  auto one_hot = [](const tessel::array<std::uint8_t>& y, std::size_t n) {
    return tessel::data::to_categorical(tessel::data::slice_rows(y, 0, n), 10);
  };
  samples = std::min<std::size_t>(samples, train.first.shape[0]);
  // Batches of 16, split over "data": every batch must divide, so the remainder is dropped.
  auto train_ds = tessel::from_tensor_slices(images(train.first, samples),
                                             one_hot(train.second, samples))
                      .shuffle(static_cast<std::int64_t>(samples), 1)
                      .batch(16, true);
  const std::size_t n_test = test.first.shape[0];
  auto test_ds =
      tessel::from_tensor_slices(images(test.first, n_test), one_hot(test.second, n_test))
          .batch(16, true);

  model_t model;
  model.compile({.loss = "mse", .metrics = {"accuracy"}});
  if (verbose) {
    model.summary();
    if (tessel::process_id() == 0)
      std::printf("d1/kernel:\n%s",
                  tessel::visualize_sharding(model.get_variable("d1/kernel"),
                                             model.mesh().shape())
                      .c_str());
  }
  model.fit(train_ds, {.epochs = epochs, .verbose = verbose});
  const tessel::logs result = model.evaluate(test_ds, verbose);
  if (tessel::process_id() == 0)
    std::printf("mesh %dx%d: test loss: %.4f - test accuracy: %.4f\n", TESSEL_MESH_DATA,
                TESSEL_MESH_MODEL, *tessel::find_log(result, "loss"),
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
