// The staged MPI path of the CUDA backend's communicator (comm/staging.hpp), on host memory that
// stands in for GPU memory: spans inside `fake_device`'s regions count as device memory, its
// host buffers are counted while alive, and its copies are memcpy. Run under mpiexec on 2 and 3
// processes. Checks:
// - every collective, blocking and not, on device spans gives what MPI gives on host spans, and
//   copies in (inputs) and back (outputs) exactly once; host spans go to MPI as they are;
// - the host span MPI receives is the staged buffer, taken before the request takes the copy
//   back (a moved-from copy_back gave MPI a span over null);
// - 100 collectives in flight each hold their staged buffers until they complete, and give them
//   back then (a bound of 64 staged inputs let the 65th reuse a buffer MPI was still reading);
// - a request dropped before it is waited for completes and copies back.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <tessel/comm/communicator.hpp>
#include <tessel/comm/staging.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/world.hpp>
#include <utility>
#include <vector>

#include "mpi_checks.hpp"

namespace {
namespace comm = tessel::comm;
using tessel::testing::check;

// Host memory standing in for a GPU's.
struct fake_device {
  std::vector<std::pair<const std::byte*, std::size_t>> regions;
  int live = 0, acquired = 0, to_host = 0, to_device = 0;

  template <class T>
  std::span<T> adopt(std::vector<T>& v) {
    regions.emplace_back(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T));
    return std::span<T>(v);
  }
  bool on_device(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    for (const auto& [begin, bytes] : regions)
      if (b >= begin && b < begin + bytes) return true;
    return false;
  }
  std::shared_ptr<void> acquire(std::size_t bytes) {
    ++live;
    ++acquired;
    void* p = ::operator new(bytes);
    std::memset(p, 0xA5, bytes);  // not the data: a result read from here without a copy shows
    return std::shared_ptr<void>(p, [this](void* q) {
      --live;
      ::operator delete(q);
    });
  }
  void to_host_copy(void* host, const void* device, std::size_t bytes) {
    check(on_device(device) && !on_device(host), "to_host copies from device to host memory");
    ++to_host;
    std::memcpy(host, device, bytes);
  }
  void to_device_copy(void* device, const void* host, std::size_t bytes) {
    check(on_device(device) && !on_device(host), "to_device copies from host to device memory");
    ++to_device;
    std::memcpy(device, host, bytes);
  }
};
// comm/staging.hpp's Memory: fake_device's copies under the names it calls.
struct memory {
  fake_device* d;
  bool on_device(const void* p) const { return d->on_device(p); }
  std::shared_ptr<void> acquire(std::size_t bytes) { return d->acquire(bytes); }
  void to_host(void* h, const void* dev, std::size_t bytes) { d->to_host_copy(h, dev, bytes); }
  void to_device(void* dev, const void* h, std::size_t bytes) { d->to_device_copy(dev, h, bytes); }
};

void every_collective(const comm::communicator& mpi) {
  fake_device dev;
  memory mem{&dev};
  const comm::staging::collectives<memory> c(mpi, mem);
  const int n = mpi.size(), r = mpi.rank();
  const auto un = static_cast<std::size_t>(n);

  // all_reduce (blocking, sum and max) on device memory: staged in and back once each.
  std::vector<float> sums{1.0f + r, 2.0f * r};
  c.all_reduce(dev.adopt(sums), comm::reduce_op::sum);
  check(sums[0] == n + n * (n - 1) / 2.0f && sums[1] == n * (n - 1.0f), "all_reduce on device");
  check(dev.to_host == 1 && dev.to_device == 1 && dev.live == 0, "all_reduce copies once");
  std::vector<float> mx{static_cast<float>(r)};
  c.all_reduce(dev.adopt(mx), comm::reduce_op::max);
  check(mx[0] == n - 1, "all_reduce max on device");

  // The same on host memory: no staging.
  const int copies = dev.to_host + dev.to_device, acquired = dev.acquired;
  std::vector<double> host_sums{1.0 + r};
  c.all_reduce(std::span<double>(host_sums), comm::reduce_op::sum);
  auto hr = c.iall_reduce(std::span<double>(host_sums));
  hr.wait();
  check(host_sums[0] == n * (n + n * (n - 1) / 2.0), "all_reduce on host memory");
  check(dev.to_host + dev.to_device == copies && dev.acquired == acquired,
        "host spans go to MPI as they are");

  // iall_reduce: MPI reduces the staged copy (not a span over null), and the result comes back.
  std::vector<float> g(1000, 0.5f);
  auto req = c.iall_reduce(dev.adopt(g));
  check(req.pending() && dev.live == 1, "iall_reduce holds its staged buffer");
  while (!req.test()) {
  }
  check(g[0] == 0.5f * n && g[999] == 0.5f * n && !req.pending() && dev.live == 0,
        "iall_reduce on device");

  // all_gather, reduce_scatter, all_to_all, broadcast with inputs and outputs on the device.
  std::vector<float> mine(3, static_cast<float>(r)), all(3 * un, -1.0f);
  auto ag = c.iall_gather(std::span<const float>(dev.adopt(mine)), dev.adopt(all));
  check(dev.live == 2, "iall_gather holds its staged input and output");
  ag.wait();
  bool gathered = true;
  for (std::size_t i = 0; i < all.size(); ++i) gathered = gathered && all[i] == float(i / 3);
  check(gathered && dev.live == 0, "iall_gather on device");

  std::vector<float> in(3 * un), out(3, -1.0f);
  std::iota(in.begin(), in.end(), 1.0f);
  auto rs = c.ireduce_scatter(std::span<const float>(dev.adopt(in)), dev.adopt(out));
  rs.wait();
  check(out[0] == n * (3.0f * r + 1) && out[2] == n * (3.0f * r + 3), "ireduce_scatter on device");

  std::vector<std::int32_t> to(un), from(un, -1);
  std::iota(to.begin(), to.end(), r * 100);
  auto aa = c.iall_to_all(std::span<const std::int32_t>(dev.adopt(to)), dev.adopt(from));
  aa.wait();
  bool exchanged = true;
  for (int p = 0; p < n; ++p) exchanged = exchanged && from[std::size_t(p)] == p * 100 + r;
  check(exchanged, "iall_to_all on device");

  std::vector<std::uint64_t> seed{r == 1 % n ? 42u : 0u};
  auto bc = c.ibroadcast(dev.adopt(seed), 1 % n);
  bc.wait();
  check(seed[0] == 42u, "ibroadcast on device");

  // A host input and a device output (and the other way round).
  std::vector<float> host_in(2, 1.0f + r), dev_out(2 * un, -1.0f);
  c.iall_gather(std::span<const float>(host_in), dev.adopt(dev_out)).wait();
  check(dev_out[2 * un - 1] == float(n), "iall_gather from host memory into device memory");
  std::vector<float> dev_in(2, 2.0f + r), host_out(2 * un, -1.0f);
  c.iall_gather(std::span<const float>(dev.adopt(dev_in)), std::span<float>(host_out)).wait();
  check(host_out[2 * un - 1] == 1.0f + n, "iall_gather from device memory into host memory");
  check(dev.live == 0, "every staged buffer returned");
}

// 100 collectives in flight: each keeps its staged input and output until it completes.
void many_in_flight(const comm::communicator& mpi) {
  fake_device dev;
  memory mem{&dev};
  const comm::staging::collectives<memory> c(mpi, mem);
  const int n = mpi.size(), r = mpi.rank();
  constexpr int count = 100;
  std::vector<std::vector<float>> ins(count), outs(count);
  std::vector<comm::staging::request<memory>> reqs;
  for (int k = 0; k < count; ++k) {
    ins[std::size_t(k)].assign(4, float(1000 * k + r));
    outs[std::size_t(k)].assign(4 * std::size_t(n), -1.0f);
    dev.adopt(ins[std::size_t(k)]);
    dev.adopt(outs[std::size_t(k)]);
  }
  for (int k = 0; k < count; ++k)
    reqs.push_back(c.iall_gather(std::span<const float>(ins[std::size_t(k)]),
                                 std::span<float>(outs[std::size_t(k)])));
  check(dev.live == 2 * count, "100 collectives in flight hold 200 staged buffers (held: " +
                                   std::to_string(dev.live) + ")");
  for (auto& q : reqs) q.wait();
  bool right = true;
  for (int k = 0; k < count; ++k)
    for (int p = 0; p < n; ++p)
      right = right && outs[std::size_t(k)][4 * std::size_t(p) + 3] == float(1000 * k + p);
  check(right, "100 collectives in flight: every result right");
  check(dev.live == 0, "100 collectives: every staged buffer returned once complete");

  // A request dropped without a wait completes (and copies back) when it is destroyed.
  std::vector<float> v(8, 1.0f);
  { auto dropped = c.iall_reduce(dev.adopt(v)); }
  check(v[7] == float(n) && dev.live == 0, "a dropped request completes and copies back");
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  MPI_Comm dup{};
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  const comm::communicator mpi(dup, true, "staging test");
  every_collective(mpi);
  many_in_flight(mpi);
  mpi.barrier();
  return tessel::testing::finish("staging_test");
}
