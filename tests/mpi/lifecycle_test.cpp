// The process lifecycle at its edges, one case per run (argv[1]); CTest runs each alone and under
// mpiexec and checks the exit code and the messages (expect_job_ends.cmake):
//   ok                   a data_parallel model trains two steps; prints "lifecycle_test: ok"
//                        (a bad environment variable stops it before anything runs)
//   model-before-guard   a one-device model built before tessel::initialize
//   dp-model-before-guard  the same with a data_parallel model
//   model-after-guard    a model built after the guard has ended
//   late-finisher        as ok, then process 0 works 4 s more (outside any collective) before
//                        main returns: the others' guards wait for it, past a 2 s collective
//                        timeout, and the job ends normally
//   abort-after-start    the last process ends the job (MPI_Abort) as soon as the guard is open,
//                        as a failed check of a mesh does: the watchdog's shared memory must not
//                        stay behind in /dev/shm
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel::layers;
using one_device_t = tessel::sequential<input<4>, dense<3>>;
using dp_t = tessel::sequential<tessel::data_parallel<>, input<4>, dense<3>>;

template <class Model>
int build_outside(const char* what) {
  try {
    Model m;
    std::printf("lifecycle_test: %s was built\n", what);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode == "model-before-guard") return build_outside<one_device_t>("a one-device model");
  if (mode == "dp-model-before-guard") return build_outside<dp_t>("a data_parallel model");
  if (mode == "model-after-guard") {
    { tessel::initialize guard(argc, argv); }
    return build_outside<one_device_t>("a one-device model");
  }
  tessel::initialize guard(argc, argv);
  if (mode == "abort-after-start") {
    if (tessel::process_id() == tessel::num_processes() - 1) {
      std::fprintf(stderr, "lifecycle_test: process %d ends the job\n", tessel::process_id());
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Barrier(MPI_COMM_WORLD);  // never completes: the abort ends every process
    return 0;
  }
  try {
    tessel::array<float> x({8, 4}, std::vector<float>(32, 0.25f));
    tessel::array<std::int32_t> y({8}, std::vector<std::int32_t>(8, 1));
    dp_t model;
    model.compile("sgd", tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
    model.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0});
    if (tessel::process_id() == 0) {
      if (mode == "late-finisher") std::this_thread::sleep_for(std::chrono::seconds(4));
      std::printf("lifecycle_test: ok\n");
    }
    return 0;
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
