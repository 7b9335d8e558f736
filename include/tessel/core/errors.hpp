// Run-time errors: the exception type thrown where a size known only at run time breaks a rule.
#pragma once

#include <stdexcept>
#include <string>

namespace tessel {

// Keras raises ValueError for these; tessel throws value_error with the same kind of message.
class value_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A value_error that every process of a job raises alike at the same point, because it comes
// from a check whose inputs all of them gathered first (processes that feed different data, a
// bad environment variable): `initialize::fail` prints it once, from process 0, and the job ends
// with exit code 1 on every process, without an abort.
class collective_value_error : public value_error {
 public:
  using value_error::value_error;
};

// Keras raises RuntimeError for failures of the environment (a collective that fails, a
// launcher tessel cannot use); tessel throws runtime_error.
class runtime_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A runtime_error that every process of a job raises alike at the same point: a failure on some
// processes (a file one of them cannot write) that the others learned, with its message, so that
// none waits in a collective for them. `initialize::fail` prints it once, from process 0, as a
// collective_value_error.
class collective_runtime_error : public runtime_error {
 public:
  using runtime_error::runtime_error;
};

}  // namespace tessel
