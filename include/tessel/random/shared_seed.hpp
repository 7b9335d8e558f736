// shared_seed: a random seed every process of the job agrees on, for what must not differ between
// processes (the order of an unseeded shuffle that every process iterates). On one process it is
// drawn from std::random_device; a multi-process runtime installs a source that draws on process 0
// and shares the value (runtime/world.hpp), so that the layers above (data/) need no MPI.
#pragma once

#include <cstdint>
#include <random>

namespace tessel::random {

using seed_source = std::uint64_t (*)();

inline std::uint64_t device_seed() {
  return (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}
// The source shared_seed() calls; the runtime sets it while MPI runs.
inline seed_source& shared_seed_source() {
  static seed_source source = &device_seed;
  return source;
}
// A collective on a multi-process job: every process calls it at the same point.
inline std::uint64_t shared_seed() { return shared_seed_source()(); }

}  // namespace tessel::random
