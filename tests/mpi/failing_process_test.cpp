// A process that fails in the middle of data-parallel training while the others wait for it in
// the step's collectives: process N-1 sends itself a signal at the start of step 5.
//   --signal kill  SIGKILL: the launcher notices the death and ends the job.
//   --signal stop  SIGSTOP: the process stays alive but never arrives; the others' collective
//                  watchdog must end the job, naming the collective, the mesh axis and the
//                  stopped process. The timeout comes from TESSEL_COLLECTIVE_TIMEOUT, or from
//                  `--timeout S` through initialize's collective_timeout option.
// expect_job_ends.cmake runs this under mpiexec and checks the exit code, the messages and how
// long the job took to end.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<tessel::data_parallel<>, input<64>,
                                   dense<64, {.activation = "relu"}>, dense<10>>;

int main(int argc, char** argv) {
  int sig = SIGKILL;
  const char* sig_name = "SIGKILL";
  tessel::initialize_options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--signal") == 0 && std::strcmp(argv[i + 1], "stop") == 0)
      sig = SIGSTOP, sig_name = "SIGSTOP";
    else if (std::strcmp(argv[i], "--timeout") == 0)
      options.collective_timeout = std::chrono::duration<double>(std::atof(argv[i + 1]));
  }
  tessel::initialize guard(argc, argv, options);
  try {
    const std::size_t n = 64 * 1000;
    tessel::array<float> x({n / 64, 64}, std::vector<float>(n, 0.5f));
    tessel::array<std::int32_t> y({n / 64}, std::vector<std::int32_t>(n / 64, 3));
    model_t model;
    model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    tessel::callbacks::lambda_callback failer({.on_batch_begin = [&](std::size_t batch,
                                                                     const tessel::logs&) {
      if (batch == 5 && tessel::process_id() == tessel::num_processes() - 1) {
        std::printf("process %d: sending itself %s at step %zu (collective timeout %g s)\n",
                    tessel::process_id(), sig_name, batch,
                    tessel::collective_timeout().count());
        std::fflush(stdout);
        std::raise(sig);
      }
    }});
    // Many epochs: without the failure this would run for minutes, so a job that outlives the
    // failed process is caught by the test's time limit.
    model.fit(x, y, {.batch_size = 8, .epochs = 100000, .verbose = 0, .callbacks = {failer}});
    std::printf("training finished: the failed process was not noticed\n");
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return 0;
}
