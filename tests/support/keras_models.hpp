// The models of scripts/golden/keras_saving.py, as the seeds write them (functional), and where
// its files are: what the saving tests (saving_test, keras_archive_test) load and write.
#pragma once

#include <string>
#include <tessel/tessel.hpp>

#include "golden.hpp"

namespace tessel::testing::keras_models {

using namespace tessel::layers;
namespace optimizers = tessel::optimizers;
namespace losses = tessel::losses;

namespace seed000 {
using x = input<28, 28, 1>;
using h = dense<200, {.activation = "relu", .use_bias = false}>::on<flatten<>::on<x>>;
using y = dense<10, {.activation = "softmax"}>::on<dropout<0.4>::on<h>>;
using model = tessel::functional<x, y>;
inline void compile(model& m) { m.compile(optimizers::adam{}, losses::mean_squared_error{}); }
}  // namespace seed000
namespace seed001 {
using x = input<784>;
using h = dense<256, {.activation = "relu"}>::on<dense<256, {.activation = "relu"}>::on<x>>;
using y = dense<10>::on<h>;
using model = tessel::functional<x, y>;
inline void compile(model& m) {
  m.compile(optimizers::adam{}, losses::sparse_categorical_crossentropy{.from_logits = true});
}
}  // namespace seed001
namespace seed002 {
using bn = batch_normalization<{.center = true, .scale = false}>;
using x = input<28, 28, 1>;
using c1 = relu<>::on<bn::on<
    conv2d<12, 3, {.padding = "same", .use_bias = false}>::on<rescaling<1.0 / 255.0>::on<x>>>>;
using c2 = relu<>::on<bn::on<conv2d<24, 6, {.strides = 2, .use_bias = false}>::on<c1>>>;
using c3 =
    relu<>::on<bn::on<conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>::on<c2>>>;
using y = dense<10>::on<dense<256, {.activation = "relu"}>::on<global_average_pooling2d<>::on<c3>>>;
using model = tessel::functional<x, y>;
inline void compile(model& m) {
  m.compile(optimizers::adam{.learning_rate = 1e-3},
            losses::sparse_categorical_crossentropy{.from_logits = true});
}
}  // namespace seed002

inline std::string golden_file(const std::string& name) {
  return tessel::testing::golden::golden_dir() + "/saving/" + name;
}

}  // namespace tessel::testing::keras_models
