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
#include <exception>
#include <span>
#include <string>
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

  // Every process ends with device 0's `data`: a broadcast along each axis in turn, from
  // coordinate 0.
  template <class T>
  void broadcast_from_device_0(std::span<T> data) const {
    for (const auto& c : comms_) c.broadcast(data, 0);
  }
  // The number of processes of the mesh for which `flag` is true (a sum along each axis in turn).
  [[nodiscard]] int count(bool flag) const {
    std::int32_t n = flag ? 1 : 0;
    for (const auto& c : comms_) c.all_reduce(std::span<std::int32_t>(&n, 1));
    return n;
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
// Runs `f` on every process of `pm`; if it throws on any, it throws on all (the original error
// where it happened), so that no process goes on to a collective the others never reach.
template <class ProcessMesh, class F>
void on_every_process(const ProcessMesh& pm, const char* what, F&& f) {
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  const int failed = pm.count(error != nullptr);
  if (error) std::rethrow_exception(error);
  if (failed > 0)
    throw runtime_error(std::string(what) + " failed on " + std::to_string(failed) +
                        " other process(es); their error says why");
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
