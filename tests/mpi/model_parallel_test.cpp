// Model-parallel training equals one device: seeds/000's ModelParallel program (d1's kernel split
// by columns over "model", its output laid out ("data", None) at d2) on the 8-device meshes 8x1,
// 4x2, 2x4 and 1x8 and on a 2x2x2 mesh with d1 split over two axes; a Megatron pair (column-
// then row-parallel) on 2x4, 4x2, 8x1 and 1x8 (and on 2x2 when run on 4 processes); and
// classifiers whose class dimension stays split across "model" (vocab-parallel softmax, cross-
// entropies on logits and on probabilities, squared error, accuracy), each trained for 20 steps
// (RMSprop, and Adam; dropout) against the same model on one device: losses, metrics, every
// weight (gathered by get_weights), predictions and evaluate. The collectives a further step ran
// are the plan's, with their bytes, and communication_stats() counts them by kind and mesh axis.
// The Megatron pairs and the split classes are compiled in files of their own
// (model_parallel_megatron.cpp, model_parallel_classes.cpp).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <tuple>
#include <vector>

#include "model_parallel_models.hpp"

namespace {
using namespace tessel;
using namespace tessel::testing::model_parallel_models;
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() == 4) {  // the 4-device meshes: the Megatron pair on 2x2
      megatron_pair_on_2x2(make_data(64, 32, 4));
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
      check(message.find("set_weights failed on process 0 of " + std::to_string(num_processes()) +
                         ": Layer ") != std::string::npos &&
                message.find("is not compatible with provided weight shape") != std::string::npos,
            "a transposed kernel on process 0 only is refused on every process, naming process 0 "
            "and its error: " +
                message);
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
    megatron_cases(pairs);
    split_class_cases();
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("model_parallel_test");
}
