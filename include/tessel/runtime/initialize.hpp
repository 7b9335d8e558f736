// initialize: the RAII guard every tessel program opens first (`tessel::initialize guard(argc,
// argv);`), as Keras's `keras.distribution.initialize()`. Launched by `mpiexec` it starts MPI
// (one process per device); started alone it makes a single-device world without MPI. It starts
// the backend (Kokkos on the host) and stops both, in reverse order, when it goes away.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../backend/default.hpp"
#include "../core/compilation.hpp"
#include "../core/environment.hpp"
#include "world.hpp"

namespace tessel {

// initialize's keyword arguments.
struct initialize_options {
  // How long a collective may wait for the other processes before the job is aborted with a
  // message; unset: TESSEL_COLLECTIVE_TIMEOUT's seconds, else 10 minutes. Zero waits forever.
  std::optional<std::chrono::duration<double>> collective_timeout = std::nullopt;
  // Denormal floats flushed to zero in every computing thread, as XLA does by default; unset:
  // TESSEL_FLUSH_DENORMALS (0 or 1), else on. tessel::set_flush_denormal changes it later.
  std::optional<bool> flush_denormals = std::nullopt;
};

// torch.set_flush_denormal: denormal floats flushed to zero (and read as zero) in this thread and
// the backend's threads. Returns false where the CPU has no such mode (then nothing changes).
inline bool set_flush_denormal(bool on) { return default_backend::set_flush_denormal(on); }

namespace runtime {
// TESSEL_FLUSH_DENORMALS: "0" turns flushing off, "1" on, unset on; anything else is an error
// naming it (core/environment.hpp).
inline bool flush_denormals_from_environment() {
  return environment::flush_denormals().value_or(true);
}

// exit() on one process of a multi-process job while its guard is open (glibc's on_exit gives
// the status): the others would wait for it in their next collective until the timeout, so the
// job ends now, with a message naming the process and its exit code.
TESSEL_INLINE void exit_while_open(int status, void*);
}  // namespace runtime

class initialize {
 public:
  initialize() {
    int argc = 0;
    char** argv = nullptr;
    start(argc, argv, {});
  }
  initialize(int& argc, char**& argv, const initialize_options& o = {}) { start(argc, argv, o); }
  initialize(const initialize&) = delete;
  initialize& operator=(const initialize&) = delete;
  ~initialize() {
    // Unwinding past the guard on one process while others wait in a collective would hang the
    // job: end it instead.
    if (std::uncaught_exceptions() > 0 && num_processes() > 1) runtime::abort_job(1);
    const bool parted = owns_world_ && leave();
    if (owns_backend_) default_backend::finalize();
    if (owns_world_) {
      runtime::stop_mpi();
      runtime::state() = {};
      runtime::state().ended = true;
    }
    if (parted) std::exit(1);
  }

  // For main's catch block: prints the error (prefixed with the process on a multi-process
  // job) and ends the whole job with exit code 1. On one process it returns 1 for main to
  // return, so that the guard still finalizes normally. An error every process raised alike
  // (collective_value_error: processes that feed different data; collective_runtime_error: a
  // failure on some processes that every process learned) is printed once, by process 0, and
  // every process returns 1: the job ends without an abort.
  int fail(const std::exception& e) const;

 private:
  [[noreturn]] static void on_terminate();
  void start(int& argc, char**& argv, const initialize_options& o) {
    if (o.collective_timeout) set_collective_timeout(*o.collective_timeout);
    // Every variable tessel reads, checked before anything runs, on one process as on many: a
    // bad value ends the program with one message and exit code 1 (after MPI has started, so
    // that the processes agree on who prints it).
    const std::vector<std::string> problems = environment::problems();
    runtime::world_state& w = runtime::state();
    if (!w.started) {
      if (w.ended)
        throw runtime_error(
            "tessel::initialize: an earlier tessel::initialize guard has ended, and MPI and the "
            "backend cannot start twice in one process; open one tessel::initialize for the "
            "whole of main");
      w.started = true;
      owns_world_ = true;
      if (runtime::launched_by_mpi()) runtime::start_mpi(argc, argv);
    }
    runtime::refuse_bad_environment(problems);
    if (owns_world_) {
      runtime::start_collectives();
      // An exception that nothing catches ends the process without unwinding (std::terminate):
      // print it, naming the process, and end the whole job rather than leave the others
      // waiting in a collective. So does exit() while the guard is open.
      if (num_processes() > 1) {
        std::set_terminate(&on_terminate);
        static const bool registered = ::on_exit(&runtime::exit_while_open, nullptr) == 0;
        (void)registered;
      }
    }
    const bool flush = o.flush_denormals ? *o.flush_denormals
                                         : environment::flush_denormals().value_or(true);
    owns_backend_ = !default_backend::is_initialized();
    default_backend::initialize(argc, argv);
    if (owns_backend_) default_backend::place_on_node(w.local_rank, w.local_size);
    // After place_on_node: the BLAS threads it starts are restarted with the mode.
    set_flush_denormal(flush);
    if (owns_world_) w.guard_open = true;
  }
  // The guards end on every process together. A process whose guard ends while the others
  // still run collectives would leave them waiting: it marks itself as leaving, so that their
  // watchdog's report names it and says so, and waits for them at a barrier. That wait is not
  // timed here: another process may still have work to do outside any collective (writing
  // results), and is not an error. Then the processes compare what they ran (comm/stall.hpp's
  // parted_paths): processes that took different paths through the program may have ended
  // without waiting for each other (MPI paired their collectives as it could) and computed wrong
  // values; process 0 says so, and true is returned: every process then exits with code 1.
  bool leave();
  bool owns_world_ = false;
  bool owns_backend_ = false;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace runtime {
TESSEL_INLINE void exit_while_open(int status, void*) {
  const world_state& w = state();
  if (!w.guard_open || !w.mpi || w.size <= 1) return;
  std::fprintf(stderr,
               "tessel: process %d of %d called exit(%d) while its tessel::initialize guard was "
               "open, so the other processes would wait for it in their next collective; ending "
               "the job. Let every process return from main (their guards end together), or end "
               "the job on an error with guard.fail(e).\n",
               w.rank, w.size, status);
  abort_job(status != 0 ? status : 1);
}
}  // namespace runtime

TESSEL_INLINE int initialize::fail(const std::exception& e) const {
  if (num_processes() > 1) {
    if (dynamic_cast<const collective_value_error*>(&e) != nullptr ||
        dynamic_cast<const collective_runtime_error*>(&e) != nullptr) {
      if (process_id() == 0) std::fprintf(stderr, "error: %s\n", e.what());
      std::fflush(nullptr);
      runtime::world().barrier();  // every process has it (the timeout names one that has not)
      return 1;
    }
    std::fprintf(stderr, "error (process %d of %d): %s\n", process_id(), num_processes(), e.what());
    runtime::abort_job(1);
  }
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}

[[noreturn]] TESSEL_INLINE void initialize::on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "error (process %d of %d): uncaught exception: %s\n", process_id(),
                   num_processes(), x.what());
    } catch (...) {
      std::fprintf(stderr, "error (process %d of %d): uncaught exception\n", process_id(),
                   num_processes());
    }
  }
  runtime::abort_job(1);
}

TESSEL_INLINE bool initialize::leave() {
  runtime::world_state& w = runtime::state();
  w.guard_open = false;
  if (!w.mpi || w.size <= 1) return false;
  comm::watchdog& watchdog = comm::watchdog::instance();
  watchdog.mark_leaving();
  runtime::world().barrier(comm::stall::guard_barrier, false);
  if (!watchdog.running()) return false;
  const std::vector<std::uint64_t> mine = watchdog.path_words();
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(w.size));
  runtime::world().all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
  const std::string parted = watchdog.parted_paths(all);
  if (parted.empty()) return false;
  if (w.rank == 0) std::fprintf(stderr, "%s Ending the job with exit code 1.\n", parted.c_str());
  std::fflush(nullptr);
  return true;
}
#endif

}  // namespace tessel
