// A process that fails in the middle of training while the others wait for it in the step's
// collectives: process N-1 does it at the start of step 5.
//   --signal kill  SIGKILL: the launcher notices the death and ends the job.
//   --signal stop  SIGSTOP: the process stays alive but never arrives; the others' collective
//                  watchdog must end the job with one message naming the stopped process. The
//                  timeout comes from TESSEL_COLLECTIVE_TIMEOUT, or from `--timeout S` through
//                  initialize's collective_timeout option.
//   --leave exit       the process calls exit(0);
//   --leave return     main returns 0 on that process (its guard ends) while the others train;
//   --leave throw      it throws, and main's catch calls guard.fail;
//   --leave uncaught   it throws, and nothing catches the exception.
//                  Each ends the job with one message naming the process and what it did.
//   --model-parallel   seeds/000's ModelParallel model on a 2x4 mesh (8 processes) instead of a
//                  data_parallel MLP: the stalled collectives are spread over both mesh axes.
//   --reporter R   every process but R triples its collective timeout, so that R's watchdog
//                  reports the stall (R may wait for processes that themselves wait).
//   --diverge K    no model: 20 steps of an all_reduce over the world, where at step 5 the last
//                  process takes another path (as one that found a backup the others did not):
//                  K = broadcast-from-0   it runs a broadcast from process 0 (which never does),
//                  K = broadcast-from-me  a broadcast from itself (as its root it completes it
//                                         alone, MPI pairs the all_reduces that follow, and the
//                                         job would end normally: the guards' comparison of what
//                                         each process ran ends it with exit code 1),
//                  K = barrier            a barrier,
//                  K = nonblocking        the step's all_reduce in MPI's non-blocking form
//                                         (MPI_Iallreduce, then a wait), which MPI never pairs
//                                         with the others' blocking one.
//                  In the first two and the last the watchdog must name the collective number
//                  where the paths parted, in every run (expect_job_ends.cmake's RUNS).
//   --set-weights-fails-on R[,R...]  no training: the listed processes pass set_weights an array
//                  of another shape, and every process passes the error to guard.fail. One
//                  diagnosis, printed once: the first failed process's error, naming it and
//                  how many others failed; every process exits 1, no abort.
// expect_job_ends.cmake runs this under mpiexec and checks the exit code, the messages and how
// long the job took to end.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using namespace tessel::layers;
using dp_model = tessel::sequential<tessel::data_parallel<>, input<64>,
                                    dense<64, {.activation = "relu"}>, dense<10>>;
using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using mp_model = tessel::sequential<
    tessel::model_parallel<
        tessel::layout_map<mesh, tessel::rule<"d1/kernel", tessel::none, "model">,
                           tessel::rule<"d1/bias", "model">,
                           tessel::rule<"d2/output", "data", tessel::none>>,
        "data">,
    input<64>, dense<64, {.activation = "relu", .name = "d1"}>, dense<10, {.name = "d2"}>>;

struct leave_main {};  // thrown to return from main in the middle of training

struct options {
  int sig = 0;
  const char* sig_name = "";
  std::string leave;
  bool model_parallel = false;
  int reporter = -1;
  std::string diverge;
  std::vector<int> set_weights_fails_on;
};

// --set-weights-fails-on: the listed processes give the last kernel, (64, 10), as (10, 64).
void set_weights_fails(const options& o) {
  dp_model model;
  std::vector<tessel::array<float>> w = model.get_weights();
  for (const int r : o.set_weights_fails_on)
    if (r == tessel::process_id()) w[2] = tessel::array<float>({10, 64});
  model.set_weights(w);
  std::printf("process %d: set_weights passed\n", tessel::process_id());
}

// --diverge: 20 steps of an all_reduce over the world; the last process takes another path at
// step 5.
void diverge(const options& o) {
  const auto& world = tessel::runtime::world();
  const int last = tessel::num_processes() - 1;
  std::vector<float> grads(16, 1.0f);
  std::int32_t flag = 1;
  for (int step = 0; step < 20; ++step) {
    if (step == 5 && tessel::process_id() == last) {
      std::printf("process %d: %s at step %d\n", last, o.diverge.c_str(), step);
      std::fflush(stdout);
      if (o.diverge == "nonblocking") {
        world.iall_reduce(std::span(grads)).wait();
        continue;
      }
      if (o.diverge == "broadcast-from-0") world.broadcast(std::span(&flag, 1), 0);
      else if (o.diverge == "broadcast-from-me") world.broadcast(std::span(&flag, 1), last);
      else if (o.diverge == "barrier") world.barrier();
      else throw std::invalid_argument("--diverge " + o.diverge + ": not a case");
    }
    world.all_reduce(std::span(grads));
  }
  std::printf("process %d: finished its 20 steps\n", tessel::process_id());
}

template <class Model>
void train(const options& o) {
  const std::size_t n = 64 * 1000;
  tessel::array<float> x({n / 64, 64}, std::vector<float>(n, 0.5f));
  tessel::array<std::int32_t> y({n / 64}, std::vector<std::int32_t>(n / 64, 3));
  Model model;
  model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  tessel::callbacks::lambda_callback failer({.on_batch_begin = [&](std::size_t batch,
                                                                   const tessel::logs&) {
    if (batch != 5 || tessel::process_id() != tessel::num_processes() - 1) return;
    if (o.sig != 0) {
      std::printf("process %d: sending itself %s at step %zu (collective timeout %g s)\n",
                  tessel::process_id(), o.sig_name, batch, tessel::collective_timeout().count());
      std::fflush(stdout);
      std::raise(o.sig);
      return;
    }
    std::printf("process %d: leaving (%s) at step %zu\n", tessel::process_id(), o.leave.c_str(),
                batch);
    std::fflush(stdout);
    if (o.leave == "exit") std::exit(0);
    if (o.leave == "return") throw leave_main{};
    if (o.leave == "throw" || o.leave == "uncaught")
      throw std::runtime_error("a bug on process " + std::to_string(tessel::process_id()));
  }});
  // Many epochs: without the failure this would run for minutes, so a job that outlives the
  // failed process is caught by the test's time limit.
  model.fit(x, y, {.batch_size = 8, .epochs = 100000, .verbose = 0, .callbacks = {failer}});
  std::printf("training finished: the failed process was not noticed\n");
}
}  // namespace

int main(int argc, char** argv) {
  options o;
  o.sig = SIGKILL, o.sig_name = "SIGKILL";
  tessel::initialize_options init;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--signal") == 0 && has_value) {
      if (std::strcmp(argv[++i], "stop") == 0) o.sig = SIGSTOP, o.sig_name = "SIGSTOP";
    } else if (std::strcmp(argv[i], "--timeout") == 0 && has_value) {
      init.collective_timeout = std::chrono::duration<double>(std::atof(argv[++i]));
    } else if (std::strcmp(argv[i], "--leave") == 0 && has_value) {
      o.leave = argv[++i];
      o.sig = 0;
    } else if (std::strcmp(argv[i], "--model-parallel") == 0) {
      o.model_parallel = true;
    } else if (std::strcmp(argv[i], "--reporter") == 0 && has_value) {
      o.reporter = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--diverge") == 0 && has_value) {
      o.diverge = argv[++i];
    } else if (std::strcmp(argv[i], "--set-weights-fails-on") == 0 && has_value) {
      std::stringstream list(argv[++i]);
      for (std::string r; std::getline(list, r, ',');)
        o.set_weights_fails_on.push_back(std::stoi(r));
    }
  }
  tessel::initialize guard(argc, argv, init);
  if (o.reporter >= 0 && tessel::process_id() != o.reporter)
    tessel::set_collective_timeout(3 * tessel::collective_timeout());
  if (!o.diverge.empty()) {
    diverge(o);
    return 0;
  }
  if (!o.set_weights_fails_on.empty()) {
    try {
      set_weights_fails(o);
    } catch (const std::exception& e) {
      return guard.fail(e);
    }
    return 0;
  }
  if (o.leave == "uncaught") {
    o.model_parallel ? train<mp_model>(o) : train<dp_model>(o);
    return 0;
  }
  try {
    o.model_parallel ? train<mp_model>(o) : train<dp_model>(o);
  } catch (const leave_main&) {
    return 0;
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return 0;
}
