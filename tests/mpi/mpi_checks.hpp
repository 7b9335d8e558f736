// What the plain-main MPI tests share: check() counts a check and reports a failure on the process
// where it happens, rel() measures a difference against one device, shared_dir() names a
// directory alike on every process, and finish() sums the failures over the job and prints, on
// process 0, the summary line the CTest regexes read.
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <tessel/runtime/world.hpp>
#include <vector>

namespace tessel::testing {

inline int failures = 0, checks = 0;

inline void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED on process %d: %s\n", process_id(), what.c_str());
  }
}
// |a - b| relative to the larger magnitude (a loss, a metric).
inline double rel(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-30});
}
// The largest difference between two arrays relative to the largest magnitude in the reference.
inline double rel(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}
// The message of what f throws ("" when it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
// A directory under the temporary one that every process names alike: `name`_<process 0's pid>.
inline std::filesystem::path shared_dir(const std::string& name) {
  std::uint64_t pid = static_cast<std::uint64_t>(::getpid());
  runtime::world().broadcast(std::span<std::uint64_t>(&pid, 1), 0);
  return std::filesystem::temp_directory_path() / (name + "_" + std::to_string(pid));
}
// "<program> on N processes: C checks per process, F failed"; the exit code (0: none failed).
inline int finish(const char* program) {
  int total = failures;
  if (num_processes() > 1) MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (process_id() == 0)
    std::printf("%s on %d processes: %d checks per process, %d failed\n", program, num_processes(),
                checks, total);
  return total == 0 ? 0 : 1;
}

}  // namespace tessel::testing
