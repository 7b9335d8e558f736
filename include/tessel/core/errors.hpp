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

// Keras raises RuntimeError for failures of the environment (a collective that fails, a
// launcher tessel cannot use); tessel throws runtime_error.
class runtime_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tessel
