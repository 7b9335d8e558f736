// A process killed with SIGKILL in the middle of data-parallel training: process N-1 kills itself
// at the start of step 5 while the others wait for it in the step's collectives. The launcher
// must end the whole job with a non-zero exit code and a message instead of leaving the others
// waiting; run_sigkill_test.cmake runs this under mpiexec and checks the exit code, the message
// and that it all took less than 30 seconds.
#include <csignal>
#include <cstdio>
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<tessel::data_parallel<>, input<64>,
                                   dense<64, {.activation = "relu"}>, dense<10>>;

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const std::size_t n = 64 * 1000;
    tessel::array<float> x({n / 64, 64}, std::vector<float>(n, 0.5f));
    tessel::array<std::int32_t> y({n / 64}, std::vector<std::int32_t>(n / 64, 3));
    model_t model;
    model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    tessel::callbacks::lambda_callback killer({.on_batch_begin = [](std::size_t batch,
                                                                    const tessel::logs&) {
      if (batch == 5 && tessel::process_id() == tessel::num_processes() - 1) {
        std::printf("process %d: killing itself with SIGKILL at step %zu\n", tessel::process_id(),
                    batch);
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
    }});
    // Many epochs: without the kill this would run for minutes, so a job that outlives the
    // killed process is caught by the test's 30-second limit.
    model.fit(x, y, {.batch_size = 8, .epochs = 100000, .verbose = 0, .callbacks = {killer}});
    std::printf("training finished: the killed process was not noticed\n");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return 0;
}
