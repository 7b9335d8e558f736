// world: the processes of the job. Started by `mpiexec` (or a launcher that speaks MPI), every
// process is one device and MPI carries the collectives; started alone, the program is a
// single-device world that never calls MPI. `list_devices()`, `process_id()` and
// `num_processes()` answer as Keras's `keras.distribution.list_devices()` and JAX's
// `jax.process_index()` / `jax.process_count()` do.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "../comm/communicator.hpp"
#include "../comm/watchdog.hpp"
#include "../core/compilation.hpp"
#include "../core/environment.hpp"
#include "../core/errors.hpp"
#include "../random/shared_seed.hpp"
#if defined(TESSEL_HAVE_CUDA)
#include "../backend/cuda.hpp"
#include "../comm/cuda_communicator.hpp"  // communicator_of<backend::cuda>
#endif

namespace tessel {

namespace runtime {

struct world_state {
  bool started = false;     // initialize() ran
  bool guard_open = false;  // and its guard has not ended
  bool ended = false;       // a guard that started the world has ended (it cannot start again)
  bool mpi = false;         // MPI is initialized (launched by mpiexec)
  bool owns_mpi = false;    // and tessel initialized it (so tessel finalizes it)
  int rank = 0, size = 1;   // in MPI_COMM_WORLD
  int local_rank = 0, local_size = 1;  // among the processes of this machine
};

inline world_state& state() {
  static world_state s;
  return s;
}

// Whether an MPI launcher started this process: Open MPI's mpiexec, MPICH's hydra, Slurm's PMI
// and PMIx all leave these in the environment.
// A program that initialized MPI itself before tessel::initialize is taken as launched too.
TESSEL_INLINE bool launched_by_mpi();

// A random seed that is the same on every process of the job: drawn on process 0 and broadcast
// (a collective: every process calls it at the same point). For what must not differ between
// processes, such as the order of an unseeded shuffle that every process iterates.
// random::shared_seed() calls it while MPI runs (start_mpi installs it, stop_mpi removes it).
TESSEL_INLINE std::uint64_t shared_random_seed();

// Every process of the job, as one group with its collectives (watched, like a mesh axis's):
// what checks that all processes agree, and what they pass together when their guards end. A
// group of this process alone until MPI starts with more than one.
inline comm::communicator& world() {
  static comm::communicator w;
  return w;
}

// MPI_Init (unless the program initialized MPI itself) and the process's place in the job.
TESSEL_INLINE void start_mpi(int& argc, char**& argv);

// After start_mpi, once the environment is known to be good: the collective watchdog (a
// collective that waits past the timeout ends the job with a message, comm/watchdog.hpp), the
// world's group, and the seed every process shares.
TESSEL_INLINE void start_collectives();

TESSEL_INLINE void stop_mpi();

// Ends every process of the job at once (MPI_Abort), so that a failure on one process never
// leaves the others waiting in a collective.
[[noreturn]] TESSEL_INLINE void abort_job(int code);

// What a model needs before it is built: a live tessel::initialize guard (the backend, and MPI
// under a launcher). `what` names the caller in the message.
TESSEL_INLINE void require_started(const std::string& what);

// Ends the program, with exit code 1 on every process, when the environment holds a bad value
// (core/environment.hpp): collective over the job's processes, after start_mpi. The first
// process with a problem prints it (one message, not one per process), and every process
// finalizes MPI and exits, so that no launcher reports a crash or an abort.
TESSEL_INLINE void refuse_bad_environment(const std::vector<std::string>& problems);

}  // namespace runtime

// How long a collective may wait for the other processes before the job is aborted with a
// message naming the collective, its mesh axis and the processes that did not arrive (PyTorch's
// init_process_group timeout). Overrides TESSEL_COLLECTIVE_TIMEOUT; 0 waits forever; the
// default is 10 minutes.
inline void set_collective_timeout(std::chrono::duration<double> timeout) {
  comm::watchdog::instance().set_timeout(timeout.count());
}
inline std::chrono::duration<double> collective_timeout() {
  return std::chrono::duration<double>(comm::watchdog::instance().timeout());
}

// This process's index among the job's processes (0 without a launcher).
inline int process_id() { return runtime::state().rank; }
// How many processes the job has (1 without a launcher).
inline int num_processes() { return runtime::state().size; }

// keras.distribution.list_devices(device_type=None): every device of the job, one per process:
// "gpu:0" ... "gpu:N-1" in a program built with the CUDA backend (linked with tessel::cuda,
// which defines TESSEL_HAVE_CUDA) on a machine with a GPU, else "cpu:0" ... "cpu:N-1". As in
// Keras, no type means the default one (the GPU where there is one); "cpu" lists the CPUs.
inline std::vector<std::string> list_devices(std::string_view device_type = {}) {
#if defined(TESSEL_HAVE_CUDA)
  const bool gpus = backend::cuda::device_count() > 0;
#else
  const bool gpus = false;
#endif
  std::string type;
  for (char c : device_type) type += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (type.empty()) type = gpus ? "gpu" : "cpu";
  if (type != "cpu" && !(type == "gpu" && gpus)) {
#if defined(TESSEL_HAVE_CUDA)
    if (type == "gpu")
      throw value_error("Unknown device_type: 'gpu'. No GPU is visible to this process (no "
                        "NVIDIA GPU or no driver); call list_devices() or "
                        "list_devices(\"cpu\").");
    throw value_error("Unknown device_type: '" + std::string(device_type) +
                      "'. This build of tessel has the host and CUDA backends, whose devices "
                      "are 'cpu' and 'gpu'; call list_devices(), list_devices(\"gpu\") or "
                      "list_devices(\"cpu\").");
#else
    throw value_error("Unknown device_type: '" + std::string(device_type) +
                      "'. This build of tessel has the host backend only, whose devices are "
                      "'cpu'; call list_devices() or list_devices(\"cpu\").");
#endif
  }
  std::vector<std::string> out;
  for (int i = 0; i < runtime::state().size; ++i) out.push_back(type + ":" + std::to_string(i));
  return out;
}

// keras.distribution.get_device_count(device_type=None): how many devices of that type the job
// has (of the default type without one), one per process.
inline int get_device_count(std::string_view device_type = {}) {
  return static_cast<int>(list_devices(device_type).size());
}

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace runtime {

TESSEL_INLINE bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

TESSEL_INLINE std::uint64_t shared_random_seed() {
  std::uint64_t s = random::device_seed();
  if (state().mpi && state().size > 1)
    comm::detail::check(MPI_Bcast(&s, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return s;
}

TESSEL_INLINE void start_mpi(int& argc, char**& argv) {
  world_state& w = state();
  int already = 0, finalized = 0;
  MPI_Initialized(&already);
  MPI_Finalized(&finalized);
  if (finalized)
    throw runtime_error(
        "tessel::initialize: MPI was already finalized (by an earlier tessel::initialize that "
        "has ended); MPI cannot start twice in one process, so open one tessel::initialize for "
        "the whole of main");
  if (!already) {
    // Open MPI 4.1's non-blocking all-reduce (libnbc) picks, for 2 or 3 processes and for
    // in-place buffers, reduce-to-root then broadcast after copying the buffer: about twice the
    // blocking all-reduce's time for gradient buckets. Rabenseifner's reduce-scatter +
    // all-gather is 15% faster per training step in benchmarks/data_parallel_bench. A value the
    // user sets wins (overwrite = 0).
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
    int provided = 0;
    comm::detail::check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided),
                        "MPI_Init_thread");
    w.owns_mpi = true;
  }
  w.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  MPI_Comm node{};
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &w.local_rank);
  MPI_Comm_size(node, &w.local_size);
  MPI_Comm_free(&node);
}

TESSEL_INLINE void start_collectives() {
  world_state& w = state();
  if (!w.mpi) return;
  comm::watchdog::instance().read_environment();
  if (w.size > 1) {
    comm::watchdog::instance().start();
    // The ring runs on every process or on none (a process that ran MPI's reduce-scatter
    // against a neighbour's ring would wait for it forever): TESSEL_RING=0 on any process
    // leaves the sums to MPI on all.
    int ring = environment::ring().value_or(true) ? 1 : 0;
    comm::detail::check(MPI_Allreduce(MPI_IN_PLACE, &ring, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
                        "MPI_Allreduce");
    comm::detail::set_ring(ring != 0);
    MPI_Comm all{};
    comm::detail::check(MPI_Comm_dup(MPI_COMM_WORLD, &all), "MPI_Comm_dup");
    world() = comm::communicator(all, true, "every process of the job");
  }
  random::shared_seed_source() = &shared_random_seed;
}

TESSEL_INLINE void stop_mpi() {
  world_state& w = state();
  int finalized = 0;
  MPI_Finalized(&finalized);
  random::shared_seed_source() = &random::device_seed;
  world() = comm::communicator();
  if (!finalized) comm::watchdog::instance().stop();
  if (w.owns_mpi && !finalized) MPI_Finalize();
  w.mpi = w.owns_mpi = false;
}

[[noreturn]] TESSEL_INLINE void abort_job(int code) {
  std::fflush(nullptr);
  if (state().mpi && state().size > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

TESSEL_INLINE void require_started(const std::string& what) {
  const world_state& w = state();
  if (w.started) return;
  if (w.ended)
    throw runtime_error(
        "tessel: " + what +
        " after the tessel::initialize guard ended (the backend and MPI are stopped, and cannot "
        "start again); build and use models inside the guard's scope, which should span the "
        "whole of main");
  throw runtime_error("tessel: the runtime is not started; open `tessel::initialize guard(argc, "
                      "argv);` at the top of main before " + what);
}

TESSEL_INLINE void refuse_bad_environment(const std::vector<std::string>& problems) {
  const world_state& w = state();
  const int mine = problems.empty() ? 0 : 1;
  std::vector<int> bad(static_cast<std::size_t>(w.size), 0);
  bad[static_cast<std::size_t>(w.rank)] = mine;
  if (w.mpi && w.size > 1)
    comm::detail::check(MPI_Allgather(&mine, 1, MPI_INT, bad.data(), 1, MPI_INT, MPI_COMM_WORLD),
                        "MPI_Allgather");
  std::vector<int> which;
  for (int r = 0; r < w.size; ++r)
    if (bad[static_cast<std::size_t>(r)]) which.push_back(r);
  if (which.empty()) return;
  if (w.rank == which.front()) {
    std::string prefix = "error: ";
    if (static_cast<int>(which.size()) < w.size) {
      prefix = "error (process " + std::to_string(w.rank) + " of " + std::to_string(w.size);
      if (which.size() > 1) {
        prefix += "; processes";
        for (std::size_t i = 1; i < which.size(); ++i)
          prefix += (i > 1 ? ", " : " ") + std::to_string(which[i]);
        prefix += " too";
      }
      prefix += "): ";
    }
    for (const std::string& p : problems) std::fprintf(stderr, "%s%s\n", prefix.c_str(), p.c_str());
  }
  std::fflush(nullptr);
  if (w.mpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  std::exit(1);
}

}  // namespace runtime
#endif

}  // namespace tessel
