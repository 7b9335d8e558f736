// Convolutions split over channels under model_parallel equal one device, on a 2x2 mesh
// ("data" x "model", 4 processes). A conv2d kernel (kh, kw, in, filters) may be split over its
// filters (column parallel: each device computes its own output channels from the whole input)
// or over its input channels (row parallel: each device's partial sums over its channels,
// reduced over "model", the bias added once and the activation after the reduction), or over
// both on two axes. Each model trains 20 steps (RMSprop, and Adam) against the same model on
// one device: losses, accuracy, every weight (the moving statistics of a batch normalization
// fed by split channels included), predictions and evaluate within 1e-5; the collectives a
// further step runs are the plan's, with their bytes.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::compare;
using tessel::testing::data_set;
using tessel::testing::make_data;

using mesh_2x2 = device_mesh<axis<"data", 2>, axis<"model", 2>>;
// "col": filters split (its bias with them); "row": input channels split, so it reads "col"'s
// output as it lies; "out": filters split, feeding a batch normalization that needs its channels
// whole. ("out" has no bias: a bias right before a batch normalization has a gradient that is
// zero up to rounding, which RMSprop and Adam scale to full steps, on one device as here.)
using pair_map = layout_map<mesh_2x2, rule<"col/kernel", none, none, none, "model">,
                            rule<"col/bias", "model">, rule<"row/kernel", none, none, "model", none>,
                            rule<"out/kernel", none, none, none, "model">>;
template <class Dist>
using pair_model =
    sequential<Dist, input<8, 8, 3>,
               conv2d<8, 3, {.padding = "same", .activation = "relu", .name = "col"}>,
               conv2d<6, 3, {.strides = 2, .activation = "tanh", .name = "row"}>,
               conv2d<4, 2, {.padding = "same", .use_bias = false, .name = "out"}>, batch_normalization<>, relu<>,
               global_average_pooling2d<>, dense<4, {.activation = "softmax", .name = "head"}>>;

// One kernel split over its input channels on "data" and its filters on "model", its bias
// replicated (sliced to the filters): the batch is then whole on every device, and the partial
// sums are reduced over "data"; the head's output splits the rows over "data" again, as the
// targets are.
using both_map = layout_map<mesh_2x2, rule<"both/kernel", none, none, "data", "model">,
                            rule<"head/output", "data", none>>;
template <class Dist>
using both_model =
    sequential<Dist, input<6, 6, 4>, conv2d<6, {2, 3}, {.strides = {1, 2}, .name = "both"}>,
               max_pooling2d<2>, relu<>, global_average_pooling2d<>,
               dense<4, {.activation = "softmax", .name = "head"}>>;

}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() != 4) throw value_error("conv_model_parallel_test runs on 4 processes");
    const data_set d = make_data(64, 8 * 8 * 3, 4);
    const array<float> x = data::reshape(d.x, {64, 8, 8, 3});
    compare<pair_model<model_parallel<pair_map, "data">>, pair_model<one_device>>(
        "conv2d column- then row-parallel on 2x2", x, d.y);
    compare<pair_model<model_parallel<pair_map, "data">>, pair_model<one_device>>(
        "conv2d column- then row-parallel on 2x2, Adam", x, d.y, "adam");
    const data_set e = make_data(64, 6 * 6 * 4, 4);
    const array<float> xe = data::reshape(e.x, {64, 6, 6, 4});
    compare<both_model<model_parallel<both_map, "data">>, both_model<one_device>>(
        "conv2d split over input channels and filters on 2x2", xe, e.y);
    pair_model<model_parallel<pair_map, "data">> m;
    const std::string plan = m.explain(16);
    if (process_id() == 0) std::printf("%s\n", plan.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", process_id(), e.what());
    return 1;
  }
  return tessel::testing::finish("conv_model_parallel_test");
}
