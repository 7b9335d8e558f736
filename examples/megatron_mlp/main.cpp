// A transformer-style MLP block split as Megatron-LM splits it, trained on Fashion-MNIST: an
// embedding dense (replicated), the block's dense 4x up (column-parallel: kernel columns and bias
// over "model") and dense down (row-parallel: kernel rows over "model"), then a classifier head.
// The block needs exactly one all_reduce over "model" forward (down's partial output) and one
// backward (up's input gradient), which the printed plan shows. Built once per mesh shape
// (TESSEL_MESH_DATA x TESSEL_MESH_MODEL: 1x4, pure model parallelism, and 2x2), run with
// `mpiexec -n 4`.
//
//   mpiexec -n 4 megatron_mlp_2x2 [--epochs N] [--samples N] [--verbose 0|1|2]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tessel/tessel.hpp>

#ifndef TESSEL_MESH_DATA
#define TESSEL_MESH_DATA 2
#endif
#ifndef TESSEL_MESH_MODEL
#define TESSEL_MESH_MODEL 2
#endif

namespace {

using namespace tessel::layers;
using tessel::none;
using tessel::rule;

using mesh = tessel::device_mesh<tessel::axis<"data", TESSEL_MESH_DATA>,
                                 tessel::axis<"model", TESSEL_MESH_MODEL>>;
using layout_map = tessel::layout_map<mesh, rule<"up/kernel", none, "model">,
                                      rule<"up/bias", "model">, rule<"down/kernel", "model", none>>;
using model_t = tessel::sequential<
    tessel::model_parallel<layout_map, "data">, input<784>,
    dense<256, {.activation = "relu", .name = "embed"}>,
    dense<1024, {.activation = "relu", .name = "up"}>,
    dense<256, {.activation = "tanh", .name = "down"}>,
    dense<10, {.activation = "softmax", .name = "head"}>>;

int run(int argc, char** argv) {
  std::size_t epochs = 1, samples = 60000;
  int verbose = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--samples") == 0) samples = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--verbose") == 0) verbose = std::atoi(argv[++i]);
  }
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto flat = [](const tessel::array<std::uint8_t>& x, std::size_t n) {
    return tessel::data::reshape(
        tessel::data::to_float(tessel::data::slice_rows(x, 0, n), 1.0f / 255.0f), {n, 784});
  };
  samples = std::min<std::size_t>(samples, train.first.shape[0]);
  const std::size_t n_test = test.first.shape[0];
  auto train_ds =
      tessel::from_tensor_slices(flat(train.first, samples),
                                 tessel::data::to_int32(tessel::data::slice_rows(train.second, 0,
                                                                                 samples)))
          .shuffle(static_cast<std::int64_t>(samples), 1)
          .batch(32, true);
  auto test_ds = tessel::from_tensor_slices(flat(test.first, n_test),
                                            tessel::data::to_int32(test.second))
                     .batch(32, true);

  model_t model;
  model.compile("adam", "sparse_categorical_crossentropy", {"accuracy"});
  if (verbose && tessel::process_id() == 0) std::printf("%s", model.explain(32).c_str());
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
