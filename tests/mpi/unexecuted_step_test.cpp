// A plan with a step nothing in tessel runs (step_runner::none) is refused when the model is built,
// naming the step, the layer and what to do: a distribution of one's own, data parallel over 2
// processes but with "<layer>/output" rules, moves d1's output between the processes.
#include <mpi.h>

#include <string>
#include <tessel/tessel.hpp>

#include "../support/output_rules.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::output_rules;
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    std::string message;
    try {
      sequential<output_rules, input<8>, dense<16, {.name = "d1"}>, dense<4, {.name = "d2"}>> m;
      m.compile({.optimizer = "sgd", .loss = "mse"});
      m.train_on_batch(array<float>({4, 8}), array<float>({4, 4}));
    } catch (const value_error& e) {
      message = e.what();
    }
    check(message.find("the plan needs all_to_all('batch', dim 0 -> 1) of 'output' in layer "
                       "'d1', which tessel does not execute yet; lay the layers out so that "
                       "only layers with variables need collectives") != std::string::npos,
          "a step nothing runs is refused: " + message);
  } catch (const std::exception& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  return tessel::testing::finish("unexecuted_step_test");
}
