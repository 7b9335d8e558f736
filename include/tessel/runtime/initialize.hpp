// initialize: the RAII guard every tessel program opens first (`tessel::initialize guard(argc,
// argv);`), as Keras's `keras.distribution.initialize()`. Launched by `mpiexec` it starts MPI
// (one process per device); started alone it makes a single-device world without MPI. It starts
// the backend (Kokkos on the host) and stops both, in reverse order, when it goes away.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <optional>
#include <exception>

#include "../backend/default.hpp"
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
// TESSEL_FLUSH_DENORMALS: "0" turns flushing off, "1" on; anything else is an error naming it.
inline bool flush_denormals_from_environment() {
  const char* v = std::getenv("TESSEL_FLUSH_DENORMALS");
  if (v == nullptr) return true;
  const std::string s(v);
  if (s == "0") return false;
  if (s == "1") return true;
  throw value_error("TESSEL_FLUSH_DENORMALS='" + s +
                    "' is neither 0 nor 1; set it to 1 to flush denormal floats to zero (the "
                    "default, as XLA does) or 0 to keep them (IEEE gradual underflow), or unset "
                    "it");
}
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
    if (owns_backend_) default_backend::finalize();
    if (owns_world_) {
      runtime::stop_mpi();
      runtime::state() = {};
    }
  }

  // For main's catch block: prints the error (prefixed with the process on a multi-process
  // job) and ends the whole job with exit code 1. On one process it returns 1 for main to
  // return, so that the guard still finalizes normally.
  int fail(const std::exception& e) const {
    if (num_processes() > 1) {
      std::fprintf(stderr, "error (process %d of %d): %s\n", process_id(), num_processes(),
                   e.what());
      runtime::abort_job(1);
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }

 private:
  [[noreturn]] static void on_terminate() {
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
  void start(int& argc, char**& argv, const initialize_options& o) {
    if (o.collective_timeout) set_collective_timeout(*o.collective_timeout);
    // Read before MPI starts: a bad value stops the program naming the variable.
    const bool flush =
        o.flush_denormals ? *o.flush_denormals : runtime::flush_denormals_from_environment();
    runtime::world_state& w = runtime::state();
    if (!w.started) {
      w.started = true;
      owns_world_ = true;
      if (runtime::launched_by_mpi()) runtime::start_mpi(argc, argv);
      // An exception that nothing catches ends the process without unwinding (std::terminate):
      // print it, naming the process, and end the whole job rather than leave the others
      // waiting in a collective.
      if (num_processes() > 1) std::set_terminate(&on_terminate);
    }
    owns_backend_ = !default_backend::is_initialized();
    default_backend::initialize(argc, argv);
    if (owns_backend_) default_backend::place_on_node(w.local_rank, w.local_size);
    // After place_on_node: the BLAS threads it starts are restarted with the mode.
    set_flush_denormal(flush);
  }
  bool owns_world_ = false;
  bool owns_backend_ = false;
};

}  // namespace tessel
