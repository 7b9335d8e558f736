// Model-parallel training equals one device: seeds/000's ModelParallel program (d1's kernel split
// by columns over "model", its output laid out ("data", None) at d2) on the 8-device meshes 8x1,
// 4x2, 2x4 and 1x8 and on a 2x2x2 mesh with d1 split over two axes; a Megatron pair (column-
// then row-parallel) on 2x4, 4x2, 8x1 and 1x8 (and on 2x2 when run on 4 processes); and
// classifiers whose class dimension stays split across "model" (vocab-parallel softmax, cross-
// entropies on logits and on probabilities, squared error, accuracy), each trained for 20 steps
// (RMSprop, and Adam; dropout) against the same model on one device: losses, metrics, every
// weight (gathered by get_weights), predictions and evaluate. The collectives a further step ran
// are the plan's, with their bytes, and communication_stats() counts them by kind and mesh axis.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <tuple>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::argmax_labels;
using tessel::testing::batch;
using tessel::testing::check;
using tessel::testing::compare;
using tessel::testing::data_set;
using tessel::testing::make_data;
using tessel::testing::rel;

template <std::size_t D, std::size_t M>
using seed_map =
    layout_map<device_mesh<axis<"data", D>, axis<"model", M>>, rule<"d1/kernel", none, "model">,
               rule<"d1/bias", "model">, rule<"d2/output", "data", none>>;
template <class Dist>
using seed_model = sequential<Dist, input<28, 28, 1>, flatten<>,
                              dense<200, {.activation = "relu", .use_bias = false, .name = "d1"}>,
                              dropout<0.4>, dense<10, {.activation = "softmax", .name = "d2"}>>;

// A 3-D mesh: the batch over "data", d1's columns over two model axes at once (one dimension
// split 4 ways by "m1" then "m2"), d2's kernel rows over "m2".
using mesh_3d = device_mesh<axis<"data", 2>, axis<"m1", 2>, axis<"m2", 2>>;
using map_3d = layout_map<mesh_3d, rule<"d1/kernel", none, axes<"m1", "m2">>,
                          rule<"d2/kernel", "m2", none>, rule<"d2/output", "data", none>>;

using megatron_map =
    layout_map<device_mesh<axis<"data", 2>, axis<"model", 4>>, rule<"col/kernel", none, "model">,
               rule<"col/bias", "model">, rule<"row/kernel", "model", none>>;
template <class Dist>
using megatron_model = sequential<Dist, input<32>, dense<64, {.activation = "relu", .name = "col"}>,
                                  dense<16, {.activation = "tanh", .name = "row"}>,
                                  dense<4, {.activation = "softmax", .name = "head"}>>;

template <std::size_t D, std::size_t M>
using megatron_map_of =
    layout_map<device_mesh<axis<"data", D>, axis<"model", M>>, rule<"col/kernel", none, "model">,
               rule<"col/bias", "model">, rule<"row/kernel", "model", none>>;

// The Megatron pair after a replicated layer, whose input gradient the pair must return: one
// all_reduce over "model" forward (the row-parallel layer's partial output) and one backward (the
// column-parallel layer's partial input gradient), and nothing else over "model".
template <class Dist>
using megatron_block =
    sequential<Dist, input<32>, dense<32, {.activation = "relu", .name = "pre"}>,
               dense<64, {.activation = "relu", .name = "col"}>, dense<32, {.name = "row"}>,
               dense<4, {.activation = "softmax", .name = "head"}>>;
void check_megatron_collectives(const array<float>& x, const array<float>& y) {
  megatron_block<model_parallel<megatron_map, "data">> m;
  m.compile({.loss = "categorical_crossentropy"});
  m.reset_communication_stats();
  m.train_on_batch(data::slice_rows(x, 0, batch), data::slice_rows(y, 0, batch));
  const communication_stats st = m.communication_stats();
  const std::size_t over_model = st.count(collective::all_reduce, "model");
  check(over_model == 2 && st.total_collectives() == st.count(collective::all_reduce, "data") + 2,
        "a Megatron pair runs one all_reduce over 'model' forward and one backward, got " +
            std::to_string(over_model) + " of " + std::to_string(st.total_collectives()));
  const model_plan& p = m.plan();
  const auto model_axis = static_cast<int>(p.mesh.index_of("model"));
  check(p.collectives(phase::forward, collective::all_reduce, model_axis) == 1 &&
            p.collectives(phase::backward, collective::all_reduce, model_axis) == 1,
        "the plan lists them: one forward, one backward");
}

// A collective outside a dense layer: the relu's output gathered over "model" by a layout_map
// rule (the model reshards around the relu's local computation).
using relu_gather_map =
    layout_map<device_mesh<axis<"data", 2>, axis<"model", 4>>, rule<"a/kernel", none, "model">,
               rule<"a/bias", "model">, rule<"r/output", "data", none>>;
template <class Dist>
using relu_gather_model = sequential<Dist, input<32>, dense<32, {.name = "a"}>, relu<"r">,
                                     dense<4, {.activation = "softmax", .name = "head"}>>;

// A classifier whose class dimension stays split across "model" (no output rule): the softmax,
// the loss and the accuracy reduce rows (row max, row sum, target terms, arg-max).
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
using split_map = layout_map<mesh_2x4, rule<"h/kernel", none, "model">,
                             rule<"c/kernel", none, "model">, rule<"c/bias", "model">>;
template <class Dist>
using split_softmax_model =
    sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>, dropout<0.25>,
               dense<8, {.activation = "softmax", .name = "c"}>>;
template <class Dist>
using split_logits_model =
    sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>,
               dense<8, {.name = "c"}>>;
// A Softmax layer after the split logits: the model runs it on its block with row reductions.
template <class Dist>
using split_softmax_layer_model =
    sequential<Dist, input<32>, dense<16, {.activation = "relu", .name = "h"}>,
               dense<8, {.name = "c"}>, softmax<"s">>;
// The classes split over two axes at once on a 2x2x2 mesh.
using split_map_3d =
    layout_map<mesh_3d, rule<"h/kernel", none, "m1">, rule<"c/kernel", none, axes<"m1", "m2">>,
               rule<"c/bias", axes<"m1", "m2">>>;

}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() == 4) {  // the 4-device meshes: the Megatron pair on 2x2
      const data_set pairs = make_data(64, 32, 4);
      compare<megatron_model<model_parallel<megatron_map_of<2, 2>, "data">>,
              megatron_model<one_device>>("Megatron pair on 2x2", pairs.x, pairs.y, "adam");
      return tessel::testing::finish("model_parallel_test");
    }
    const data_set images = make_data(64, 784, 10);
    const array<float> x_images = data::reshape(images.x, {64, 28, 28, 1});
    using single_seed = seed_model<one_device>;
    compare<seed_model<model_parallel<seed_map<8, 1>, "data">>, single_seed>("seeds/000 on 8x1",
                                                                             x_images, images.y);
    compare<seed_model<model_parallel<seed_map<4, 2>, "data">>, single_seed>("seeds/000 on 4x2",
                                                                             x_images, images.y);
    compare<seed_model<model_parallel<seed_map<2, 4>, "data">>, single_seed>("seeds/000 on 2x4",
                                                                             x_images, images.y);
    compare<seed_model<model_parallel<seed_map<1, 8>, "data">>, single_seed>("seeds/000 on 1x8",
                                                                             x_images, images.y);
    compare<seed_model<model_parallel<seed_map<2, 4>, "data">>, single_seed>(
        "seeds/000 on 2x4 with Adam", x_images, images.y, "adam");
    compare<seed_model<model_parallel<map_3d, "data">>, single_seed>(
        "seeds/000 on 2x2x2, d1 over two axes", x_images, images.y);
    // What is refused, with what to do: a global batch the batch axis does not divide, call(),
    // which runs on one process, and set_weights with a wrong shape.
    {
      seed_model<model_parallel<seed_map<2, 4>, "data">> m;
      m.compile({.loss = "mse"});
      const array<float> odd_x = data::slice_rows(x_images, 0, 15);
      const array<float> odd_y = data::slice_rows(images.y, 0, 15);
      std::string message;
      try {
        m.train_on_batch(odd_x, odd_y);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("The global batch size (15) is not divisible by the size of the batch "
                         "axis 'data' (2) under model_parallel") != std::string::npos,
            "a batch of 15 on 2x4 is refused: " + message);
      message.clear();
      try {
        m.call(odd_x);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Use predict(x)") != std::string::npos, "call() is refused: " + message);
      message.clear();
      std::vector<array<float>> wrong = m.get_weights();
      wrong[0].values.resize(3);
      try {
        m.set_weights(wrong);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Variable 'd1/kernel' has 156800 values; cannot assign 3.") !=
                std::string::npos,
            "set_weights with a wrong shape is refused: " + message);
      // A transposed kernel: the right number of values, the wrong shape. Refused on every
      // process before anything is broadcast, as Keras refuses it.
      message.clear();
      std::vector<array<float>> transposed = m.get_weights();
      transposed[0] = array<float>({200, 784}, transposed[0].values);
      try {
        m.set_weights(transposed);
      } catch (const value_error& e) {
        message = e.what();
      }
      check(message.find("Layer sequential weight shape (784, 200) is not compatible with "
                         "provided weight shape (200, 784). The variable is 'd1/kernel' "
                         "(weights[0])") != std::string::npos,
            "set_weights with a transposed kernel is refused: " + message);
      // Given on process 0 only: every process refuses, none waits in a broadcast.
      message.clear();
      std::vector<array<float>> on_one = m.get_weights();
      if (process_id() == 0) on_one[0] = transposed[0];
      try {
        m.set_weights(on_one);
      } catch (const std::exception& e) {
        message = e.what();
      }
      check(message.find(process_id() == 0
                             ? "is not compatible with provided weight shape"
                             : "set_weights failed on 1 other process") != std::string::npos,
            "a transposed kernel on process 0 only is refused on every process: " + message);
      seed_model<model_parallel<seed_map<2, 4>, "data">> fresh;
      check(m.get_weights() == fresh.get_weights(),
            "the refused calls leave the weights as they were");
      // set_weights takes global values; each process keeps its block (a round trip).
      std::vector<array<float>> shifted = fresh.get_weights();
      for (auto& w : shifted)
        for (float& v : w) v += 0.25f;
      m.set_weights(shifted);
      check(m.get_weights() == shifted, "set_weights then get_weights gives the values back");
    }
    const data_set pairs = make_data(64, 32, 4);
    compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
        "Megatron pair on 2x4", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<1, 8>, "data">>,
            megatron_model<one_device>>("Megatron pair on 1x8", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<4, 2>, "data">>,
            megatron_model<one_device>>("Megatron pair on 4x2", pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map_of<8, 1>, "data">>,
            megatron_model<one_device>>("Megatron pair on 8x1", pairs.x, pairs.y);
    check_megatron_collectives(pairs.x, pairs.y);
    compare<megatron_model<model_parallel<megatron_map, "data">>, megatron_model<one_device>>(
        "Megatron pair on 2x4 with Adam", pairs.x, pairs.y, "adam");
    compare<relu_gather_model<model_parallel<relu_gather_map, "data">>,
            relu_gather_model<one_device>>("relu's output gathered on 2x4", pairs.x, pairs.y);
    // Classes split across "model": the vocab-parallel softmax, losses and accuracy.
    const data_set classes = make_data(64, 32, 8);
    const array<std::int32_t> labels = argmax_labels(classes.y);
    using sharded_split = model_parallel<split_map, "data">;
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, squared error", classes.x, classes.y);
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, categorical_crossentropy", classes.x, classes.y, "adam",
        "categorical_crossentropy");
    compare<split_softmax_model<sharded_split>, split_softmax_model<one_device>>(
        "softmax over split classes, sparse_categorical_crossentropy", classes.x, labels, "rmsprop",
        "sparse_categorical_crossentropy");
    compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
        "split logits, sparse_categorical_crossentropy(from_logits)", classes.x, labels, "adam",
        losses::sparse_categorical_crossentropy{.from_logits = true});
    compare<split_logits_model<sharded_split>, split_logits_model<one_device>>(
        "split logits, categorical_crossentropy(from_logits)", classes.x, classes.y, "rmsprop",
        losses::categorical_crossentropy{.from_logits = true});
    compare<split_softmax_layer_model<sharded_split>, split_softmax_layer_model<one_device>>(
        "a Softmax layer over split classes", classes.x, labels, "rmsprop",
        "sparse_categorical_crossentropy");
    compare<split_softmax_model<model_parallel<split_map_3d, "data">>,
            split_softmax_model<one_device>>("classes split over two axes on 2x2x2", classes.x,
                                             labels, "rmsprop", "sparse_categorical_crossentropy");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("model_parallel_test");
}
