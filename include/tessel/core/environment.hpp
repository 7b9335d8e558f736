// environment: every environment variable tessel reads, parsed in one place. Each has a parser
// (the value's text to its setting, or a value_error naming the variable, the value and what is
// allowed) and a reader (the parser applied to getenv). `tessel::initialize` checks them all
// before anything else runs, on one process as on many, and reports every bad value at once;
// the parts that read a variable later (the thread pool, the watchdog) call the same reader.
//
//   TESSEL_NUM_THREADS         the threads each process computes with: 1 to 1024
//   TESSEL_FLUSH_DENORMALS     0 or 1: denormal floats flushed to zero (default 1, as XLA)
//   TESSEL_COLLECTIVE_TIMEOUT  seconds a collective may wait, >= 0 (0: forever; default 600)
//   TESSEL_NCCL                0 or 1: NCCL between GPUs where it can run (default 1)
//   TESSEL_RING                0 or 1: sums of floats reduce-scattered (and all-reduced from
//                              1 MiB) in tessel's ring over MPI's messages (default 1), or by
//                              MPI's own collectives (0 on any process: on every process)
//   TESSEL_FASHION_MNIST_DIR   where datasets::fashion_mnist::load_data reads (a directory)
//
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS belong to OpenMP and OpenBLAS, whose own syntax
// ("4,2" for nested levels) tessel does not parse: a positive integer there is taken as the
// threads when TESSEL_NUM_THREADS is unset, anything else is left to them. The launchers'
// variables (OMPI_COMM_WORLD_SIZE, PMI_RANK, LOCAL_RANK, ...) are read where they are used.
#pragma once

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compilation.hpp"
#include "errors.hpp"

namespace tessel::environment {

inline constexpr const char* num_threads_variable = "TESSEL_NUM_THREADS";
inline constexpr const char* flush_denormals_variable = "TESSEL_FLUSH_DENORMALS";
inline constexpr const char* collective_timeout_variable = "TESSEL_COLLECTIVE_TIMEOUT";
inline constexpr const char* nccl_variable = "TESSEL_NCCL";
inline constexpr const char* ring_variable = "TESSEL_RING";
inline constexpr std::size_t max_threads = 1024;

namespace detail {
// A whole decimal integer in [lo, hi], or nothing.
TESSEL_INLINE std::optional<long> whole_number(std::string_view text, long lo, long hi);
TESSEL_INLINE std::string quoted(const char* variable, std::string_view value);
// A switch: "0" or "1"; anything else is an error naming the variable, then `advice`.
TESSEL_INLINE bool zero_or_one(const char* variable, std::string_view text, const char* advice);
inline const char* get(const char* variable) { return std::getenv(variable); }
}  // namespace detail

// ---- the parsers: a value's text to its setting ------------------------------------------------

TESSEL_INLINE std::size_t parse_num_threads(std::string_view text);

inline bool parse_flush_denormals(std::string_view text) {
  return detail::zero_or_one(flush_denormals_variable, text,
                             "set it to 1 to flush denormal floats to zero (the default, as XLA "
                             "does) or 0 to keep them (IEEE gradual underflow), or unset it");
}

TESSEL_INLINE double parse_collective_timeout(std::string_view text);

inline bool parse_nccl(std::string_view text) {
  return detail::zero_or_one(nccl_variable, text,
                             "set it to 0 to run the collectives between GPUs through MPI on host "
                             "copies, 1 (the default) to use NCCL where every process has a GPU of "
                             "its own, or unset it");
}

inline bool parse_ring(std::string_view text) {
  return detail::zero_or_one(ring_variable, text,
                             "set it to 0 to reduce through MPI's own reduce-scatter and "
                             "all-reduce (a cluster's tuned MPI may do better), 1 (the default) "
                             "to use tessel's ring over MPI's messages, or unset it");
}

// ---- the readers: the setting from the environment, nothing when unset -------------------------

inline std::optional<std::size_t> num_threads() {
  const char* v = detail::get(num_threads_variable);
  return v ? std::optional(parse_num_threads(v)) : std::nullopt;
}
inline std::optional<bool> flush_denormals() {
  const char* v = detail::get(flush_denormals_variable);
  return v ? std::optional(parse_flush_denormals(v)) : std::nullopt;
}
inline std::optional<double> collective_timeout() {
  const char* v = detail::get(collective_timeout_variable);
  return v ? std::optional(parse_collective_timeout(v)) : std::nullopt;
}
inline std::optional<bool> nccl() {
  const char* v = detail::get(nccl_variable);
  return v ? std::optional(parse_nccl(v)) : std::nullopt;
}
inline std::optional<bool> ring() {
  const char* v = detail::get(ring_variable);
  return v ? std::optional(parse_ring(v)) : std::nullopt;
}
// OMP_NUM_THREADS, else OPENBLAS_NUM_THREADS, where one is an integer from 1 to max_threads (what
// a job script sets for the BLAS, as torchrun sets OMP_NUM_THREADS); other values are theirs.
TESSEL_INLINE std::optional<std::size_t> blas_threads();

// Every bad value among tessel's variables, one message each (empty: all are good or unset).
TESSEL_INLINE std::vector<std::string> problems();

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace detail {
TESSEL_INLINE std::optional<long> whole_number(std::string_view text, long lo, long hi) {
  const std::string s(text);
  // strtol would skip leading blanks and take a '+': "a whole number" is digits, or '-' digits.
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-'))
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE || n < lo || n > hi) return std::nullopt;
  return n;
}
TESSEL_INLINE std::string quoted(const char* variable, std::string_view value) {
  return std::string(variable) + "='" + std::string(value) + "'";
}
TESSEL_INLINE bool zero_or_one(const char* variable, std::string_view text, const char* advice) {
  if (text == "0") return false;
  if (text == "1") return true;
  throw value_error(quoted(variable, text) + " is neither 0 nor 1; " + advice);
}
}  // namespace detail

TESSEL_INLINE std::size_t parse_num_threads(std::string_view text) {
  if (const auto n = detail::whole_number(text, 1, static_cast<long>(max_threads)))
    return static_cast<std::size_t>(*n);
  throw value_error(detail::quoted(num_threads_variable, text) +
                    " is not a number of threads; set it to an integer from 1 to " +
                    std::to_string(max_threads) +
                    " (the threads each process computes with), or unset it to share the "
                    "cores among the processes on the machine");
}

TESSEL_INLINE double parse_collective_timeout(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? std::nan("") : std::strtod(s.c_str(), &end);
  const bool whole = end != nullptr && *end == '\0';
  if (!whole || errno == ERANGE || !std::isfinite(v) || v < 0)
    throw value_error(detail::quoted(collective_timeout_variable, text) +
                      " is not a number of seconds; set it to how long a collective may wait "
                      "before the job is aborted (for example 600 for 10 minutes, 0 for no "
                      "timeout), or unset it");
  return v;
}

TESSEL_INLINE std::optional<std::size_t> blas_threads() {
  for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (const char* v = detail::get(name))
      if (const auto n = detail::whole_number(v, 1, static_cast<long>(max_threads)))
        return static_cast<std::size_t>(*n);
  return std::nullopt;
}

TESSEL_INLINE std::vector<std::string> problems() {
  std::vector<std::string> out;
  auto check = [&](auto read) {
    try {
      read();
    } catch (const value_error& e) {
      out.emplace_back(e.what());
    }
  };
  check(num_threads);
  check(flush_denormals);
  check(collective_timeout);
  check(nccl);
  check(ring);
  return out;
}
#endif

}  // namespace tessel::environment
