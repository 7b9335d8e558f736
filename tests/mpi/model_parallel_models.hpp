// The models of model_parallel_test (its three translation units, each building its own
// group of model types: the seeds/000 program, the Megatron pairs, the split classes).
#pragma once

#include <mpi.h>

#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace tessel::testing::model_parallel_models {
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


// The Megatron pairs (model_parallel_megatron.cpp): on 2x4, 1x8, 4x2 and 8x1 (8 processes), or
// on 2x2 alone (4 processes).
void megatron_cases(const data_set& pairs);
void megatron_pair_on_2x2(const data_set& pairs);
// The classifiers whose classes stay split across "model" (model_parallel_classes.cpp).
void split_class_cases();

}  // namespace tessel::testing::model_parallel_models
