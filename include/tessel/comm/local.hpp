// local_communicator: the group of this process alone, with no MPI — every collective is a copy
// (or nothing). The second implementation of the communicator concept: what compiles against it
// compiles against the concept, not against MPI.
#pragma once

#include <cstring>
#include <span>
#include <string>

#include "../core/errors.hpp"
#include "concept.hpp"

namespace tessel::comm {

class local_communicator {
 public:
  // A collective on one process completes when it starts.
  struct request {
    void wait() noexcept {}
    bool test() noexcept { return true; }
    [[nodiscard]] bool pending() const noexcept { return false; }
  };

  [[nodiscard]] int rank() const noexcept { return 0; }
  [[nodiscard]] int size() const noexcept { return 1; }
  void barrier() const noexcept {}

  template <class T>
  void all_reduce(std::span<T>, reduce_op = reduce_op::sum) const noexcept {}
  template <class T>
  void all_gather(std::span<const T> in, std::span<T> out) const {
    copy("all_gather", in, out);
  }
  template <class T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) const {
    copy("reduce_scatter", in, out);
  }
  template <class T>
  void broadcast(std::span<T>, int root = 0) const {
    if (root != 0)
      throw value_error("tessel: a broadcast or reduce rooted at process " + std::to_string(root) +
                        " of a group of 1; the root must be 0");
  }
  // The root is the only process: it holds the sum already.
  template <class T>
  void reduce(std::span<T> data, int root = 0) const {
    broadcast(data, root);
  }
  template <class T>
  void all_to_all(std::span<const T> in, std::span<T> out) const {
    copy("all_to_all", in, out);
  }

  template <class T>
  [[nodiscard]] request iall_reduce(std::span<T> data) const noexcept {
    return all_reduce(data), request{};
  }
  template <class T>
  [[nodiscard]] request iall_gather(std::span<const T> in, std::span<T> out) const {
    return all_gather(in, out), request{};
  }
  template <class T>
  [[nodiscard]] request ireduce_scatter(std::span<const T> in, std::span<T> out) const {
    return reduce_scatter(in, out), request{};
  }
  template <class T>
  [[nodiscard]] request ibroadcast(std::span<T> data, int root = 0) const {
    return broadcast(data, root), request{};
  }
  template <class T>
  [[nodiscard]] request ireduce(std::span<T> data, int root = 0) const {
    return reduce(data, root), request{};
  }
  template <class T>
  [[nodiscard]] request iall_to_all(std::span<const T> in, std::span<T> out) const {
    return all_to_all(in, out), request{};
  }

  // out = in (host memory, of one size).
  template <class T>
  void copy(std::span<const T> in, std::span<T> out) const {
    copy("copy", in, out);
  }

 private:
  template <class T>
  static void copy(const char* what, std::span<const T> in, std::span<T> out) {
    if (in.size() != out.size())
      throw value_error(std::string("tessel: ") + what +
                        " over 1 process needs input and output of one size; got " +
                        std::to_string(in.size()) + " and " + std::to_string(out.size()));
    if (in.data() != out.data() && !in.empty())
      std::memmove(out.data(), in.data(), in.size_bytes());
  }
};

static_assert(communicator_like<local_communicator>);

}  // namespace tessel::comm
