// mpi_errors: MPI's return codes and counts, checked for the communicator and the ring.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/errors.hpp"

namespace tessel::comm::detail {

// MPI's default error handler (MPI_ERRORS_ARE_FATAL) ends the whole job on an MPI error, which is
// what a job whose processes wait on each other needs; tessel checks its arguments before
// calling MPI so that a mistake is a value_error instead. Where a handler returns errors, they
// become runtime_error here.
inline void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING]{};
  int n = 0;
  MPI_Error_string(code, text, &n);
  throw runtime_error(std::string("tessel: ") + what + " failed: " + std::string(text, n));
}

inline int count_of(std::size_t n) {
  if (n > static_cast<std::size_t>(INT32_MAX))
    throw value_error("tessel: a collective of " + std::to_string(n) +
                      " elements exceeds MPI's int count; split the buffer");
  return static_cast<int>(n);
}

}  // namespace tessel::comm::detail
