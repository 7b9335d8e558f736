// process_mesh: a device_mesh bound to the job's processes. Devices are the processes, ordered
// row-major over the mesh shape as in Keras and JAX; each mesh axis gets a sub-communicator
// holding the processes that differ only in their coordinate on that axis (MPI_Comm_split by
// the coordinates on the other axes).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../comm/communicator.hpp"
#include "../comm/concept.hpp"
#include "../core/device_mesh.hpp"
#include "../core/distribution.hpp"
#include "../core/diagnostics.hpp"
#include "../core/errors.hpp"
#include "world.hpp"

namespace tessel {

// A failure on some processes as every process learns it (bound_mesh::first_failure): how many
// failed, and the first of them (the lowest device) with its error's kind and message.
struct process_failure {
  int failed = 0;             // the processes that failed; 0: none
  std::size_t processes = 1;  // of the mesh's
  std::size_t device = 0;     // the first that failed
  std::uint64_t kind = 0;     // its error's kind (detail::error_kind)
  std::string message;        // its error's message
};

// A mesh bound to processes, its shape a value: this process's device and coordinates and one
// communicator per axis. It is what the runtime's code that does not depend on the mesh's type
// takes (the planned steps, the resharder, the gradient buckets, the trainer's core), so that
// code is compiled once per communicator, not once per mesh; process_mesh<Mesh, C> is one, with
// the mesh's type on top (its axes by name, checked when the program compiles).
template <comm::communicator_like C = comm::communicator>
class bound_mesh {
 public:
  using communicator_type = C;

  [[nodiscard]] const mesh_value& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t size() const noexcept { return shape_.size(); }
  [[nodiscard]] std::size_t axis_count() const noexcept { return shape_.rank; }
  // This process's device: its index in the mesh and its coordinate on each axis.
  [[nodiscard]] std::size_t device() const noexcept { return device_; }
  [[nodiscard]] std::size_t coordinate(std::size_t axis) const noexcept { return coords_[axis]; }
  // The processes along mesh axis `i`, this process among them at its coordinate on that axis.
  [[nodiscard]] const C& axis(std::size_t i) const { return comms_.at(i); }
  [[nodiscard]] bool is_chief() const noexcept { return device_ == 0; }

  // Every process ends with device `from`'s `data`: a broadcast along each axis in turn, from
  // `from`'s coordinate on it (after axis i, every process that differs from `from` only in axes
  // 0..i holds its data).
  template <class T>
  void broadcast_from(std::span<T> data, std::size_t from) const {
    std::size_t after = size();
    for (std::size_t i = 0; i < comms_.size(); ++i) {
      after /= shape_.sizes[i];
      comms_[i].broadcast(data, static_cast<int>(from / after % shape_.sizes[i]));
    }
  }
  template <class T>
  void broadcast_from_device_0(std::span<T> data) const {
    broadcast_from(data, 0);
  }
  // The number of processes of the mesh for which `flag` is true (a sum along each axis in turn).
  [[nodiscard]] int count(bool flag) const {
    std::int32_t n = flag ? 1 : 0;
    for (const auto& c : comms_) c.all_reduce(std::span<std::int32_t>(&n, 1));
    return n;
  }
  // The processes for which `failed` is true, and the first of them (the lowest device) with its
  // `kind` and `message`, alike on every process. One all_reduce along each axis when none
  // failed; else the first is found (a maximum along each axis) and its error broadcast.
  [[nodiscard]] process_failure first_failure(bool failed, std::uint64_t kind,
                                              std::string_view message) const {
    process_failure r;
    r.processes = size();
    r.failed = count(failed);
    if (r.failed == 0) return r;
    // (The first failed device has the most devices from it to the end.)
    auto to_end = static_cast<std::int32_t>(failed ? size() - device_ : 0);
    for (const auto& c : comms_)
      c.all_reduce(std::span<std::int32_t>(&to_end, 1), comm::reduce_op::max);
    r.device = size() - static_cast<std::size_t>(to_end);
    std::array<std::uint64_t, 2> head{kind, message.size()};
    broadcast_from(std::span<std::uint64_t>(head), r.device);
    std::vector<std::uint64_t> words((head[1] + 7) / 8);
    if (device_ == r.device && !message.empty())
      std::memcpy(words.data(), message.data(), message.size());
    broadcast_from(std::span<std::uint64_t>(words), r.device);
    r.kind = head[0];
    r.message.assign(reinterpret_cast<const char*>(words.data()), head[1]);
    return r;
  }

 protected:
  bound_mesh(const mesh_value& shape, std::size_t device, std::span<const std::size_t> coords)
      : shape_(shape), device_(device), comms_(shape.rank) {
    std::copy(coords.begin(), coords.end(), coords_.begin());
  }
  // Axis i's communicator (process_mesh lays them over the job's processes).
  void set_axis(std::size_t i, C c) { comms_[i] = std::move(c); }

 private:
  mesh_value shape_;
  std::size_t device_ = 0;
  std::array<std::size_t, max_mesh_rank> coords_{};
  std::vector<C> comms_;
};

// C is the communicator of each axis: any type of the communicator concept. The MPI communicator
// is the default and the one bind() lays over the job's processes; local() builds a mesh of one
// process with any of them (comm::local_communicator: no MPI at all).
template <class Mesh, comm::communicator_like C = comm::communicator>
class process_mesh : public bound_mesh<C> {
  static_assert(detail::is_device_mesh<Mesh>,
                "tessel::process_mesh: the argument must be a tessel::device_mesh<...>");

 public:
  using mesh_type = Mesh;
  using communicator_type = C;
  static constexpr std::size_t rank = Mesh::rank;

  // The mesh laid over every process of the job. A run-time-sized axis takes the processes the
  // static axes leave; a mesh whose size differs from the number of processes is an error
  // naming both numbers.
  static process_mesh bind() {
    static_assert(std::is_constructible_v<C, MPI_Comm, bool, std::string>,
                  "tessel::process_mesh::bind: laying a mesh over the job's processes needs a "
                  "communicator built on MPI (comm::communicator, or the CUDA backend's "
                  "comm::cuda_communicator); a mesh of another communicator is built with "
                  "local()");
    static_assert(Mesh::rank_dynamic <= 1,
                  "tessel::process_mesh: at most one mesh axis may be sized at run time");
    runtime::require_started("building a distributed model");
    const auto n = static_cast<std::size_t>(num_processes());
    process_mesh p(Mesh::for_devices(n), static_cast<std::size_t>(process_id()));
    if (n > 1) p.split(MPI_COMM_WORLD);
    return p;
  }
  // The mesh on this process alone (every axis of size 1): a model that is not distributed.
  static process_mesh local()
    requires(Mesh::rank_dynamic <= 1)
  {
    if constexpr (Mesh::rank_dynamic == 0) {
      static_assert(Mesh::value.size() == 1, "tessel::process_mesh::local needs a 1-device mesh");
      return process_mesh(Mesh{}, 0);
    } else {
      return process_mesh(Mesh::for_devices(1), 0);
    }
  }

  [[nodiscard]] const Mesh& mesh() const noexcept { return mesh_; }
  // This process's coordinate on each axis.
  [[nodiscard]] const std::array<std::size_t, rank>& coordinates() const noexcept {
    return coords_;
  }
  // The processes along mesh axis I (by index) or `Name`, this process among them at its
  // coordinate on that axis.
  template <std::size_t I>
  [[nodiscard]] const C& axis() const noexcept {
    static_assert(I < rank, "tessel::process_mesh: axis index out of range");
    return this->axis(I);
  }
  template <fixed_string Name>
  [[nodiscard]] const C& axis() const noexcept {
    static_assert(require<(Mesh::template index_of<Name> >= 0),
                          diagnostic::axis_not_in_mesh<Name, Mesh>>);
    return this->axis(static_cast<std::size_t>(Mesh::template index_of<Name>));
  }
  using bound_mesh<C>::axis;

 private:
  process_mesh(Mesh m, std::size_t device)
      : bound_mesh<C>(m.shape(), device, m.coordinates(device)),
        mesh_(m),
        coords_(m.coordinates(device)) {}
  void split(MPI_Comm world) {
    for (std::size_t i = 0; i < rank; ++i) {
      std::array<std::size_t, rank> others = coords_;
      others[i] = 0;  // processes equal in every other coordinate share a color
      MPI_Comm c{};
      comm::detail::check(MPI_Comm_split(world, static_cast<int>(mesh_.device_at(others)),
                                         static_cast<int>(coords_[i]), &c),
                          "MPI_Comm_split");
      this->set_axis(i, C(c, true, "mesh axis '" + std::string(Mesh::axis_names[i].view()) + "'"));
    }
  }

  Mesh mesh_;
  std::array<std::size_t, rank> coords_{};
};

namespace detail {
// The kind of error a process failed with, as on_every_process shares it.
enum class error_kind : std::uint64_t { value, runtime, collective_value, collective_runtime };

// The error every process raises for `first`, the first process where `what` failed: a
// collective error (each process raises it alike, and initialize::fail prints it once), a value
// error where that process's was one. It names that process, says how many others failed, and
// gives that process's message; an error that was collective already is raised as it was.
[[noreturn]] inline void throw_first_failure(const char* what, const process_failure& first) {
  const auto kind = static_cast<error_kind>(first.kind);
  if (kind == error_kind::collective_value) throw collective_value_error(first.message);
  if (kind == error_kind::collective_runtime) throw collective_runtime_error(first.message);
  std::string text = std::string(what) + " failed on process " + std::to_string(first.device) +
                     " of " + std::to_string(first.processes);
  if (first.failed == static_cast<int>(first.processes) && first.failed > 1)
    text += " (and on every other process)";
  else if (first.failed > 1)
    text += " (and on " + std::to_string(first.failed - 1) + " other " +
            (first.failed == 2 ? "process" : "processes") + ")";
  text += ": " + first.message;
  if (kind == error_kind::value) throw collective_value_error(text);
  throw collective_runtime_error(text);
}

// Runs `f` on every process of `pm`; if it throws on any, every process throws the same error,
// the first failed process's (throw_first_failure), so that no process goes on to a collective
// the others never reach and the job reports one failure, not one per process. On one process
// the error is thrown as it was.
template <class ProcessMesh, class F>
void on_every_process(const ProcessMesh& pm, const char* what, F&& f) {
  std::exception_ptr error;
  error_kind kind = error_kind::runtime;
  std::string message;
  try {
    f();
  } catch (const collective_value_error& e) {
    error = std::current_exception(), kind = error_kind::collective_value, message = e.what();
  } catch (const collective_runtime_error& e) {
    error = std::current_exception(), kind = error_kind::collective_runtime, message = e.what();
  } catch (const value_error& e) {
    error = std::current_exception(), kind = error_kind::value, message = e.what();
  } catch (const std::exception& e) {
    error = std::current_exception(), message = e.what();
  } catch (...) {
    error = std::current_exception(), message = "an exception that is not a std::exception";
  }
  const process_failure first =
      pm.first_failure(error != nullptr, static_cast<std::uint64_t>(kind), message);
  if (first.failed == 0) return;
  if (first.processes == 1) std::rethrow_exception(error);
  throw_first_failure(what, first);
}
}  // namespace detail

// Keras 3's properties of a distribution (keras.distribution.Distribution), for the distribution
// type Dist on this job: num_model_replicas (data_parallel: its devices, the processes;
// model_parallel: the size of its batch axis; a local distribution: 1), num_data_shards (as many),
// and data_shard_id (the shard of the data this process reads: its process id, or with fewer
// replicas than processes, its replica's), as Keras computes them.
template <class Dist>
  requires detail::distribution_type<Dist>
int num_model_replicas() {
  if constexpr (detail::is_local_distribution<Dist>) {
    return 1;
  } else {
    const auto mesh = Dist::mesh::for_devices(static_cast<std::size_t>(num_processes()));
    return static_cast<int>(mesh.shape().sizes[Dist::value.batch_axis]);
  }
}
template <class Dist>
  requires detail::distribution_type<Dist>
int num_data_shards() {
  return num_model_replicas<Dist>();
}
template <class Dist>
  requires detail::distribution_type<Dist>
int data_shard_id() {
  const int replicas = num_model_replicas<Dist>(), processes = num_processes();
  return replicas >= processes ? process_id() : process_id() / (processes / replicas);
}

}  // namespace tessel
