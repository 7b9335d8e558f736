// The MPI runtime and the collectives, run on 1, 2, 3, 4 and 8 processes (and without a
// launcher): the world (num_processes, process_id, list_devices), process_mesh's layout of the
// processes over 1-D, 2-D and 3-D meshes (row-major, one sub-communicator per axis), every
// collective blocking and non-blocking through the axis-templated free functions, planned steps
// (start_step / run_step), and the errors for a mesh that does not fit the job and for wrongly
// sized buffers. Every process fills its buffers with values that depend on its rank, so a
// collective over the wrong processes, in the wrong order or with the wrong blocks fails.
//
// A plain main(): each CHECK that fails prints `file:line` and a message on the process where
// it failed; at the end the processes sum their failures, rank 0 prints the count of checks
// passed, and every process exits non-zero if any check failed anywhere.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <tessel/runtime/collectives.hpp>
#include <tessel/core/device_mesh.hpp>
#include <tessel/core/errors.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/process_mesh.hpp>
#include <tessel/runtime/world.hpp>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using tessel::axis;
using tessel::device_mesh;
using tessel::process_mesh;
namespace comm = tessel::comm;

long checks_passed = 0;
long checks_failed = 0;

void record(bool ok, const char* file, int line, const char* expr, const std::string& message) {
  if (ok) {
    ++checks_passed;
    return;
  }
  ++checks_failed;
  std::fprintf(stderr, "%s:%d: [process %d of %d] CHECK(%s) failed: %s\n", file, line,
               tessel::process_id(), tessel::num_processes(), expr, message.c_str());
  std::fflush(stderr);
}

#define CHECK(cond, message) record(static_cast<bool>(cond), __FILE__, __LINE__, #cond, (message))

// The message of the Error (tessel::value_error unless given) that f throws; "no exception" if
// it throws none. Another exception type yields a message that no check accepts (its text is
// printed so that the failure can be read).
template <class Error = tessel::value_error, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[process %d] unexpected exception type: %s\n", tessel::process_id(),
                 e.what());
    return "an exception of an unexpected type";
  }
  return "no exception";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}
// Whether the number n appears in s as a whole number ("3" in "has 3 devices", not in "13").
bool names_number(const std::string& s, std::size_t n) {
  const std::string d = std::to_string(n);
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  for (std::size_t at = s.find(d); at != std::string::npos; at = s.find(d, at + 1))
    if ((at == 0 || !digit(s[at - 1])) && (at + d.size() == s.size() || !digit(s[at + d.size()])))
      return true;
  return false;
}

template <class T>
std::string show(const std::vector<T>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size() && i < 12; ++i) {
    if (i) s += ", ";
    if constexpr (std::is_floating_point_v<T>)
      s += std::to_string(static_cast<double>(v[i]));
    else
      s += std::to_string(static_cast<long long>(v[i]));
  }
  if (v.size() > 12) s += ", ... (" + std::to_string(v.size()) + " elements)";
  return s + "}";
}

// Equal element by element; the message names the first difference.
template <class T>
std::string diff(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]))
      return "element " + std::to_string(i) + " differs: got " + show(got) + ", expected " +
             show(want);
  return {};
}
#define CHECK_EQUAL_VECTORS(got, want, what)                                                  \
  do {                                                                                        \
    const std::string d_ = diff((got), (want));                                               \
    record(d_.empty(), __FILE__, __LINE__, #got " == " #want, std::string(what) + ": " + d_); \
  } while (0)

template <class T>
std::span<const T> cspan(const std::vector<T>& v) {
  return std::span<const T>(v);
}
template <class T>
std::span<T> mspan(std::vector<T>& v) {
  return std::span<T>(v);
}

int world_rank() { return tessel::process_id(); }
int world_size() { return tessel::num_processes(); }

// ---- the world ------------------------------------------------------------------------------
void test_world() {
  const int n = world_size(), r = world_rank();
  CHECK(n >= 1, "num_processes() = " + std::to_string(n));
  CHECK(r >= 0 && r < n, "process_id() = " + std::to_string(r));

  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (tessel::runtime::launched_by_mpi()) {
    CHECK(mpi_up == 1, "launched by mpiexec, but MPI is not initialized");
    int mr = -1, ms = -1;
    if (mpi_up) {
      MPI_Comm_rank(MPI_COMM_WORLD, &mr);
      MPI_Comm_size(MPI_COMM_WORLD, &ms);
    }
    CHECK(mr == r && ms == n, "process_id/num_processes " + std::to_string(r) + "/" +
                                  std::to_string(n) + " but MPI says " + std::to_string(mr) + "/" +
                                  std::to_string(ms));
  } else {
    CHECK(mpi_up == 0, "started without a launcher, but MPI was initialized");
    CHECK(n == 1 && r == 0,
          "started without a launcher: " + std::to_string(r) + " of " + std::to_string(n));
  }

  std::vector<std::string> want;
  for (int i = 0; i < n; ++i) want.push_back("cpu:" + std::to_string(i));
  const auto devices = tessel::list_devices();
  CHECK(devices == want, "list_devices() has " + std::to_string(devices.size()) +
                             " devices, first '" + (devices.empty() ? "" : devices[0]) + "'");
  CHECK(tessel::list_devices("cpu") == want, "list_devices(\"cpu\")");
  const std::string gpu = message_of([] { (void)tessel::list_devices("gpu"); });
  CHECK(contains(gpu, "'gpu'"), "list_devices(\"gpu\") threw: " + gpu);
}

// ---- one process's values -------------------------------------------------------------------
// Values whose sums over up to 8 processes are exact in float (small multiples of 1/4), so
// results compare with ==.
template <class T>
T value_at(int rank, std::size_t i) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(rank + 1) * static_cast<T>(0.25) + static_cast<T>(i % 1000) -
           static_cast<T>(3 * rank);
  else
    return static_cast<T>(static_cast<std::int64_t>(rank) * 1000003 - static_cast<std::int64_t>(i) -
                          7);
}

// all_reduce of T over the 1-D mesh's axis "data" (every process), blocking and non-blocking.
template <class T, class PM>
void check_all_reduce(const PM& pm, std::size_t count, const char* type) {
  const int n = world_size(), r = world_rank();
  std::vector<T> want(count);
  for (std::size_t i = 0; i < count; ++i)
    for (int q = 0; q < n; ++q) want[i] += value_at<T>(q, i);

  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = value_at<T>(r, i);
  comm::all_reduce<"data">(pm, mspan(v));
  CHECK_EQUAL_VECTORS(v, want, std::string("all_reduce<") + type + "> of " + std::to_string(count));

  for (std::size_t i = 0; i < count; ++i) v[i] = value_at<T>(r, i);
  comm::request req = comm::iall_reduce<"data">(pm, mspan(v));
  CHECK(req.pending() == (n > 1 && count > 0),
        "iall_reduce's request pending: " + std::to_string(req.pending()));
  req.wait();
  CHECK(!req.pending(), "a waited request is no longer pending");
  req.wait();  // a second wait is a no-op
  CHECK_EQUAL_VECTORS(v, want, std::string("iall_reduce<") + type + "> + wait()");

  for (std::size_t i = 0; i < count; ++i) v[i] = value_at<T>(r, i);
  comm::request req2 = comm::iall_reduce<"data">(pm, mspan(v));
  long polls = 0;
  while (!req2.test()) ++polls;
  CHECK(!req2.pending(), "test() returned true but the request is still pending after " +
                             std::to_string(polls) + " polls");
  CHECK(req2.test(), "test() of a completed request");
  CHECK_EQUAL_VECTORS(v, want, std::string("iall_reduce<") + type + "> + test()");
}

// tessel's ring (comm/ring.hpp): reduce-scatters of floats and doubles and all-reduces from
// 1 MiB. Large blocks in and out of place; several collectives in flight at once (each has its
// own message tag, and they complete in any order); the same bits on every process for sums
// that round, within rounding of MPI's own all-reduce.
void test_ring() {
  using mesh = device_mesh<axis<"data">>;
  const auto pm = process_mesh<mesh>::bind();
  const int n = world_size(), r = world_rank();
  const auto un = static_cast<std::size_t>(n);
  const std::size_t block = 100003;
  auto in_of = [&](int rank, std::size_t salt) {
    std::vector<float> v(block * un);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_at<float>(rank, i + salt);
    return v;
  };
  auto part_of = [&](std::size_t salt) {
    std::vector<float> want(block, 0.0f);
    for (std::size_t j = 0; j < block; ++j)
      for (int q = 0; q < n; ++q)
        want[j] += value_at<float>(q, static_cast<std::size_t>(r) * block + j + salt);
    return want;
  };

  // Out of place and in place (the part at the start of the input), blocking and not.
  for (bool in_place : {false, true})
    for (bool blocking : {true, false}) {
      std::vector<float> in = in_of(r, 0), out(block, -1.0f);
      const std::span<float> dst = in_place ? std::span<float>(in).first(block) : mspan(out);
      if (blocking) {
        comm::reduce_scatter<"data">(pm, cspan(in), dst);
      } else {
        auto req = comm::ireduce_scatter<"data">(pm, cspan(in), dst);
        while (!req.test()) {
        }
      }
      const std::vector<float> got(dst.begin(), dst.end());
      CHECK_EQUAL_VECTORS(got, part_of(0), std::string("ring reduce_scatter, ") +
                                               (in_place ? "in place" : "out of place") +
                                               (blocking ? ", blocking" : ", test()"));
      if (!in_place) CHECK_EQUAL_VECTORS(in, in_of(r, 0), "reduce_scatter's input is unchanged");
    }
  // Blocks of no element.
  {
    std::vector<float> none_in, none_out;
    comm::reduce_scatter<"data">(pm, cspan(none_in), mspan(none_out));
    auto req = comm::ireduce_scatter<"data">(pm, cspan(none_in), mspan(none_out));
    req.wait();
    CHECK(!req.pending(), "an empty reduce_scatter completes");
  }

  // Five collectives in flight, waited for in reverse order, then five polled together.
  for (bool poll : {false, true}) {
    std::vector<std::vector<float>> ins, outs, sums;
    std::vector<comm::request> reqs;
    for (std::size_t c = 0; c < 3; ++c) {
      ins.push_back(in_of(r, 7 * c));
      outs.emplace_back(block, -1.0f);
    }
    const std::size_t big = (std::size_t{1} << 18) + 13;  // (blocks of 3, 4 and 8 uneven)
    for (std::size_t c = 0; c < 2; ++c) {
      sums.emplace_back(big);
      for (std::size_t i = 0; i < big; ++i) sums[c][i] = value_at<float>(r, i + 3 * c);
    }
    for (std::size_t c = 0; c < 5; ++c)
      reqs.push_back(c % 2 == 0 ? comm::ireduce_scatter<"data">(pm, cspan(ins[c / 2]),
                                                                  mspan(outs[c / 2]))
                                : comm::iall_reduce<"data">(pm, mspan(sums[c / 2])));
    if (poll) {
      for (bool all = false; !all;) {
        all = true;
        for (auto& q : reqs) all = q.test() && all;
      }
    } else {
      for (std::size_t c = reqs.size(); c-- > 0;) reqs[c].wait();
    }
    for (std::size_t c = 0; c < 3; ++c)
      CHECK_EQUAL_VECTORS(outs[c], part_of(7 * c),
                          "reduce_scatter " + std::to_string(c) + " of 3 in flight");
    for (std::size_t c = 0; c < 2; ++c) {
      std::vector<float> want(big, 0.0f);
      for (std::size_t i = 0; i < big; ++i)
        for (int q = 0; q < n; ++q) want[i] += value_at<float>(q, i + 3 * c);
      CHECK_EQUAL_VECTORS(sums[c], want, "all_reduce " + std::to_string(c) + " of 2 in flight");
    }
  }

  // Completed in another order on every other process (MPI allows it for its non-blocking
  // collectives): a process waiting for one ring advances the others, which its neighbours wait
  // for. Then a ring request destroyed while pending: its destructor completes it.
  {
    const std::size_t big = (std::size_t{1} << 19) + 13;
    std::vector<std::vector<float>> sums(3, std::vector<float>(big));
    std::vector<comm::request> reqs;
    for (std::size_t c = 0; c < sums.size(); ++c) {
      for (std::size_t i = 0; i < big; ++i) sums[c][i] = value_at<float>(r, i + 5 * c);
      reqs.push_back(comm::iall_reduce<"data">(pm, mspan(sums[c])));
    }
    if (r % 2 == 0)
      for (auto& q : reqs) q.wait();
    else
      for (std::size_t c = reqs.size(); c-- > 0;) reqs[c].wait();
    for (std::size_t c = 0; c < sums.size(); ++c) {
      std::vector<float> want(big, 0.0f);
      for (std::size_t i = 0; i < big; ++i)
        for (int q = 0; q < n; ++q) want[i] += value_at<float>(q, i + 5 * c);
      CHECK_EQUAL_VECTORS(sums[c], want,
                          "all_reduce " + std::to_string(c) + ", waited in the process's order");
    }
    std::vector<float> in = in_of(r, 11), out(block, -1.0f);
    { auto dropped = comm::ireduce_scatter<"data">(pm, cspan(in), mspan(out)); }
    CHECK_EQUAL_VECTORS(out, part_of(11), "a ring request destroyed while pending completes");
  }

  // A reduce-scatter then an all-gather gives the all-reduce's bits: both sum each block in the
  // ring's one order.
  if (comm::uses_ring()) {
    const std::size_t each = 300007;  // (from 1 MiB on 2 processes: the ring's all-reduce)
    std::vector<float> whole(each * un), parts(each * un);
    for (std::size_t i = 0; i < whole.size(); ++i)
      whole[i] = parts[i] = std::cos(0.37f * static_cast<float>(i) + static_cast<float>(r)) / 7.0f;
    comm::all_reduce<"data">(pm, mspan(whole));
    std::vector<float> mine(each);
    comm::reduce_scatter<"data">(pm, cspan(parts), mspan(mine));
    comm::all_gather<"data">(pm, cspan(mine), mspan(parts));
    CHECK(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)) == 0,
          "reduce_scatter + all_gather differs in its bits from all_reduce");
  }

  // The scratch blocks a ring receives into are kept for the next collective: a second in-place
  // reduce-scatter and all-reduce of 4 MB blocks take no fresh pages (1024 per block if they did).
  if (comm::uses_ring()) {
    auto faults = [] {
      rusage u{};
      getrusage(RUSAGE_SELF, &u);
      return static_cast<long>(u.ru_minflt);
    };
    std::vector<float> big((std::size_t{1} << 20) * un);
    long fresh = 0;
    for (int round = 0; round < 2; ++round) {
      for (std::size_t i = 0; i < big.size(); ++i) big[i] = value_at<float>(r, i);
      const long before = faults();
      comm::reduce_scatter<"data">(pm, cspan(big), std::span<float>(big).first(big.size() / un));
      comm::all_reduce<"data">(pm, mspan(big));
      fresh = faults() - before;
    }
    CHECK(fresh < 256, "a second ring reduce-scatter and all-reduce took " +
                           std::to_string(fresh) + " fresh pages");
  }

  // Sums that round: every process holds the same bits, within rounding of MPI_Allreduce.
  {
    const std::size_t count = (std::size_t{1} << 19) + 5;
    std::vector<float> v(count), mpi(count);
    for (std::size_t i = 0; i < count; ++i)
      v[i] = mpi[i] = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(r + 1)) / 3.0f;
    comm::all_reduce<"data">(pm, mspan(v));
    if (n > 1)
      MPI_Allreduce(MPI_IN_PLACE, mpi.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    std::vector<float> first = v;
    if (n > 1) MPI_Bcast(first.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    CHECK(std::memcmp(first.data(), v.data(), count * sizeof(float)) == 0,
          "the ring's all_reduce left other bits than process 0's");
    // (Each of n terms of magnitude at most 1/3 rounds once: n ulps of the largest.)
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(v[i] - mpi[i])));
    const double bound = n * (n / 3.0) * 1.2e-7;
    CHECK(worst <= bound, "the ring's all_reduce differs from MPI_Allreduce by " +
                              std::to_string(worst) + " (bound " + std::to_string(bound) + ")");
  }
}

// Every collective on the 1-D run-time-sized mesh that holds every process.
void test_1d_mesh() {
  using mesh = device_mesh<axis<"data">>;
  const int n = world_size(), r = world_rank();
  const auto un = static_cast<std::size_t>(n);
  const auto pm = process_mesh<mesh>::bind();
  CHECK(pm.size() == un, "1-D mesh size " + std::to_string(pm.size()));
  CHECK(pm.mesh().extent(0) == un, "extent of 'data'");
  CHECK(pm.mesh().extent<"data">() == un, "extent<\"data\">()");
  CHECK(pm.device() == static_cast<std::size_t>(r), "device " + std::to_string(pm.device()));
  CHECK(pm.coordinates()[0] == static_cast<std::size_t>(r), "coordinate on 'data'");
  CHECK(pm.is_chief() == (r == 0), "is_chief");
  const auto& data = pm.axis<"data">();
  CHECK(&data == &pm.axis<0>() && &data == &pm.axis(0), "axis<\"data\"> is axis 0");
  CHECK(data.size() == n && data.rank() == r, "the 'data' communicator: rank " +
                                                  std::to_string(data.rank()) + " of " +
                                                  std::to_string(data.size()));
  CHECK(data.uses_mpi() == (n > 1), "uses_mpi");

  // all_reduce: three element types, an odd small count, a count large enough for MPI to split
  // the message into segments, and an empty buffer.
  check_all_reduce<float>(pm, 37, "float");
  check_all_reduce<float>(pm, 100003, "float");
  check_all_reduce<double>(pm, 1001, "double");
  // From 1 MiB the sums run in tessel's ring (comm/ring.hpp), in blocks that need not divide.
  check_all_reduce<float>(pm, (std::size_t{1} << 18) + 7, "float");
  check_all_reduce<double>(pm, (std::size_t{1} << 17) + 3, "double");
  check_all_reduce<std::int32_t>(pm, 513, "int32");
  check_all_reduce<std::int64_t>(pm, 7, "int64");
  check_all_reduce<float>(pm, 0, "float");

  // all_gather: process q's block of k, in rank order.
  {
    const std::size_t k = 5;
    std::vector<float> in(k), out(k * un, -1.0f), want(k * un);
    for (std::size_t j = 0; j < k; ++j) in[j] = static_cast<float>(100 * r) + static_cast<float>(j);
    for (int q = 0; q < n; ++q)
      for (std::size_t j = 0; j < k; ++j)
        want[static_cast<std::size_t>(q) * k + j] =
            static_cast<float>(100 * q) + static_cast<float>(j);
    comm::all_gather<"data">(pm, cspan(in), mspan(out));
    CHECK_EQUAL_VECTORS(out, want, "all_gather");

    std::fill(out.begin(), out.end(), -1.0f);
    auto req = comm::iall_gather<"data">(pm, cspan(in), mspan(out));
    req.wait();
    CHECK_EQUAL_VECTORS(out, want, "iall_gather + wait()");

    std::fill(out.begin(), out.end(), -1.0f);
    auto req2 = comm::iall_gather<"data">(pm, cspan(in), mspan(out));
    while (!req2.test()) {
    }
    CHECK_EQUAL_VECTORS(out, want, "iall_gather + test()");

    std::vector<std::int32_t> iin{r, -r, 7 * r}, iout(3 * un), iwant(3 * un);
    for (int q = 0; q < n; ++q) {
      iwant[3 * static_cast<std::size_t>(q)] = q;
      iwant[3 * static_cast<std::size_t>(q) + 1] = -q;
      iwant[3 * static_cast<std::size_t>(q) + 2] = 7 * q;
    }
    comm::all_gather<"data">(pm, cspan(iin), mspan(iout));
    CHECK_EQUAL_VECTORS(iout, iwant, "all_gather<int32>");

    // A wrongly sized output is refused on every process before MPI is called.
    std::vector<float> small(k * un + 1);
    const std::string m =
        message_of([&] { comm::all_gather<"data">(pm, cspan(in), mspan(small)); });
    CHECK(contains(m, "all_gather") && contains(m, std::to_string(k * un + 1)),
          "all_gather with an output of " + std::to_string(k * un + 1) + " threw: " + m);
    const std::string mi = message_of([&] {
      auto rq = comm::iall_gather<"data">(pm, cspan(in), mspan(small));
      rq.wait();
    });
    CHECK(contains(mi, "all_gather"), "iall_gather with a wrong output threw: " + mi);
  }

  // reduce_scatter: block b of the sum goes to process b.
  {
    const std::size_t k = 4;
    std::vector<double> in(k * un), out(k, -1.0), want(k);
    for (std::size_t b = 0; b < un; ++b)
      for (std::size_t j = 0; j < k; ++j)
        in[b * k + j] = r + 10.0 * static_cast<double>(b) + 1000.0 * static_cast<double>(j);
    for (std::size_t j = 0; j < k; ++j)
      want[j] = n * (n - 1) / 2.0 + n * (10.0 * r + 1000.0 * static_cast<double>(j));
    comm::reduce_scatter<"data">(pm, cspan(in), mspan(out));
    CHECK_EQUAL_VECTORS(out, want, "reduce_scatter");

    std::fill(out.begin(), out.end(), -1.0);
    auto req = comm::ireduce_scatter<"data">(pm, cspan(in), mspan(out));
    req.wait();
    CHECK_EQUAL_VECTORS(out, want, "ireduce_scatter + wait()");

    std::fill(out.begin(), out.end(), -1.0);
    auto req2 = comm::ireduce_scatter<"data">(pm, cspan(in), mspan(out));
    while (!req2.test()) {
    }
    CHECK_EQUAL_VECTORS(out, want, "ireduce_scatter + test()");

    std::vector<double> big(k + 1);
    const std::string m =
        message_of([&] { comm::reduce_scatter<"data">(pm, cspan(in), mspan(big)); });
    CHECK(contains(m, "reduce_scatter"), "reduce_scatter with a wrong output threw: " + m);
  }

  // broadcast from the first and from the last process.
  for (int root : {0, n - 1}) {
    std::vector<std::int32_t> v(9), want(9);
    for (std::size_t j = 0; j < v.size(); ++j) {
      v[j] = r * 100 + static_cast<std::int32_t>(j);
      want[j] = root * 100 + static_cast<std::int32_t>(j);
    }
    const std::string what = "broadcast from " + std::to_string(root);
    comm::broadcast<"data">(pm, mspan(v), root);
    CHECK_EQUAL_VECTORS(v, want, what);

    std::vector<float> f(6), fwant(6);
    for (std::size_t j = 0; j < f.size(); ++j) {
      f[j] = static_cast<float>(r) + 0.5f * static_cast<float>(j);
      fwant[j] = static_cast<float>(root) + 0.5f * static_cast<float>(j);
    }
    auto req = comm::ibroadcast<"data">(pm, mspan(f), root);
    req.wait();
    CHECK_EQUAL_VECTORS(f, fwant, "i" + what + " + wait()");

    for (std::size_t j = 0; j < f.size(); ++j)
      f[j] = static_cast<float>(r) + 0.5f * static_cast<float>(j);
    auto req2 = comm::ibroadcast<"data">(pm, mspan(f), root);
    while (!req2.test()) {
    }
    CHECK_EQUAL_VECTORS(f, fwant, "i" + what + " + test()");
  }
  {  // the default root is 0
    std::vector<double> v{static_cast<double>(r) + 0.5}, want{0.5};
    comm::broadcast<"data">(pm, mspan(v));
    CHECK_EQUAL_VECTORS(v, want, "broadcast with the default root");
  }

  // all_to_all: block b of process q's input lands in block q of process b's output.
  {
    const std::size_t k = 3;
    std::vector<std::int32_t> in(k * un), out(k * un, -1), want(k * un);
    for (std::size_t b = 0; b < un; ++b)
      for (std::size_t j = 0; j < k; ++j) {
        in[b * k + j] = r * 1000 + static_cast<std::int32_t>(b * 10 + j);
        want[b * k + j] =
            static_cast<std::int32_t>(b) * 1000 + r * 10 + static_cast<std::int32_t>(j);
      }
    comm::all_to_all<"data">(pm, cspan(in), mspan(out));
    CHECK_EQUAL_VECTORS(out, want, "all_to_all");

    std::fill(out.begin(), out.end(), -1);
    auto req = comm::iall_to_all<"data">(pm, cspan(in), mspan(out));
    req.wait();
    CHECK_EQUAL_VECTORS(out, want, "iall_to_all + wait()");

    std::fill(out.begin(), out.end(), -1);
    auto req2 = comm::iall_to_all<"data">(pm, cspan(in), mspan(out));
    while (!req2.test()) {
    }
    CHECK_EQUAL_VECTORS(out, want, "iall_to_all + test()");

    std::vector<std::int32_t> longer(k * un + un);
    const std::string m =
        message_of([&] { comm::all_to_all<"data">(pm, cspan(in), mspan(longer)); });
    CHECK(contains(m, "all_to_all"), "all_to_all with unequal sizes threw: " + m);
  }

  // Several non-blocking collectives in flight at once, completed in reverse order; a request
  // that is moved keeps the collective.
  {
    std::vector<float> a(64), awant(64);
    std::vector<std::int32_t> g{r}, gout(un), gwant(un);
    for (std::size_t i = 0; i < a.size(); ++i) {
      a[i] = value_at<float>(r, i);
      for (int q = 0; q < n; ++q) awant[i] += value_at<float>(q, i);
    }
    std::iota(gwant.begin(), gwant.end(), 0);
    comm::request ra = comm::iall_reduce<"data">(pm, mspan(a));
    comm::request rg = comm::iall_gather<"data">(pm, cspan(g), mspan(gout));
    comm::request moved = std::move(ra);
    CHECK(!ra.pending(), "a moved-from request is empty");  // NOLINT(bugprone-use-after-move)
    rg.wait();
    moved.wait();
    CHECK_EQUAL_VECTORS(a, awant, "iall_reduce in flight with an iall_gather");
    CHECK_EQUAL_VECTORS(gout, gwant, "iall_gather in flight with an iall_reduce");

    // A request that goes out of scope waits for its collective.
    std::fill(gout.begin(), gout.end(), -1);
    { auto dropped = comm::iall_gather<"data">(pm, cspan(g), mspan(gout)); }
    CHECK_EQUAL_VECTORS(gout, gwant, "an iall_gather whose request was destroyed");
  }
  pm.axis<"data">().barrier();
}

// ---- meshes of several axes -----------------------------------------------------------------
// For each axis of a bound mesh: the axis communicator holds exactly the processes whose
// coordinates differ from this one's only on that axis, ranked by their coordinate on it. An
// all_reduce of 1 << rank gives the set of processes as a bit mask; an all_gather of the ranks
// gives their order.
template <class Mesh>
void check_axes(const process_mesh<Mesh>& pm, const std::string& name) {
  const int r = world_rank();
  const auto n = static_cast<std::size_t>(world_size());
  const auto me = pm.mesh().coordinates(static_cast<std::size_t>(r));
  CHECK(pm.size() == n, name + ": size " + std::to_string(pm.size()));
  CHECK(pm.device() == static_cast<std::size_t>(r),
        name + ": device " + std::to_string(pm.device()));
  CHECK(pm.coordinates() == me, name + ": coordinates");
  // Row-major: the device index is the coordinates read as a mixed-radix number.
  std::size_t flat = 0;
  for (std::size_t i = 0; i < Mesh::rank; ++i) flat = flat * pm.mesh().extent(i) + me[i];
  CHECK(flat == static_cast<std::size_t>(r), name + ": coordinates are not row-major");

  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr std::size_t a = I;
          const std::string axis_name(Mesh::axis_names[a].view());
          const std::string what = name + ", axis '" + axis_name + "'";
          std::int64_t want_mask = 0;
          std::vector<std::int32_t> want_order(pm.mesh().extent(a));
          for (std::size_t q = 0; q < n; ++q) {
            auto c = pm.mesh().coordinates(q);
            auto c0 = c;
            c0[a] = me[a];
            if (c0 == me) {
              want_mask |= std::int64_t{1} << q;
              want_order[c[a]] = static_cast<std::int32_t>(q);
            }
          }
          const auto& c = pm.template axis<a>();
          CHECK(c.size() == static_cast<int>(pm.mesh().extent(a)) &&
                    c.rank() == static_cast<int>(me[a]),
                what + ": communicator rank " + std::to_string(c.rank()) + " of " +
                    std::to_string(c.size()));
          CHECK(&c == &pm.axis(a), what + ": axis<I>() and axis(i) differ");

          std::vector<std::int64_t> mask{std::int64_t{1} << r};
          comm::all_reduce<Mesh::axis_names[a]>(pm, mspan(mask));
          CHECK(mask[0] == want_mask, what + ": all_reduce summed the processes of mask " +
                                          std::to_string(mask[0]) + ", expected " +
                                          std::to_string(want_mask));

          std::vector<std::int32_t> rank{r}, order(pm.mesh().extent(a), -1);
          comm::all_gather<Mesh::axis_names[a]>(pm, cspan(rank), mspan(order));
          CHECK_EQUAL_VECTORS(order, want_order, what + ": all_gather order");

          // A planned all_reduce step on axis a sums over the same processes.
          std::vector<std::int64_t> in{std::int64_t{1} << r}, out{0};
          comm::run_step(pm,
                         tessel::reshard_step{.kind = tessel::collective::all_reduce,
                                              .axis = static_cast<std::uint8_t>(a)},
                         cspan(in), mspan(out));
          CHECK(out[0] == want_mask,
                what + ": run_step(all_reduce) summed mask " + std::to_string(out[0]));
        }(),
        ...);
  }
  (std::make_index_sequence<Mesh::rank>{});
}

void test_multi_axis_meshes() {
  const int n = world_size(), r = world_rank();
  if (n == 4) {
    using mesh = device_mesh<axis<"data", 2>, axis<"model", 2>>;
    const auto pm = process_mesh<mesh>::bind();
    const std::array<std::size_t, 2> want{static_cast<std::size_t>(r / 2),
                                          static_cast<std::size_t>(r % 2)};
    CHECK(pm.coordinates() == want, "2x2: coordinates of process " + std::to_string(r));
    check_axes(pm, "2x2");
    // Spelled out: over "model", {0, 1} and {2, 3}; over "data", {0, 2} and {1, 3}.
    std::vector<float> v{static_cast<float>(r + 1)};
    comm::all_reduce<"model">(pm, mspan(v));
    CHECK(v[0] == (r < 2 ? 3.0f : 7.0f), "2x2: all_reduce over 'model' = " + std::to_string(v[0]));
    v[0] = static_cast<float>(r + 1);
    comm::all_reduce<"data">(pm, mspan(v));
    CHECK(v[0] == (r % 2 == 0 ? 4.0f : 6.0f),
          "2x2: all_reduce over 'data' = " + std::to_string(v[0]));
    v[0] = static_cast<float>(r + 1);
    auto req = comm::iall_reduce<"model">(pm, mspan(v));
    req.wait();
    CHECK(v[0] == (r < 2 ? 3.0f : 7.0f), "2x2: iall_reduce over 'model' = " + std::to_string(v[0]));
  }
  if (n % 2 == 0) {
    using mesh = device_mesh<axis<"data">, axis<"model", 2>>;
    const auto pm = process_mesh<mesh>::bind();
    CHECK(pm.mesh().extent<"data">() == static_cast<std::size_t>(n / 2) &&
              pm.mesh().extent<"model">() == 2,
          "data=? x model=2 on " + std::to_string(n) +
              " processes: " + tessel::to_string(pm.shape()));
    check_axes(pm, "data=? x model=2");
    std::vector<std::int32_t> v{r + 1};
    comm::all_reduce<"model">(pm, mspan(v));
    CHECK(v[0] == 2 * (r / 2) * 2 + 3,
          "data=? x model=2: all_reduce over 'model' = " + std::to_string(v[0]));
  }
  if (n % 2 == 0) {  // the dynamic axis last
    using mesh = device_mesh<axis<"model", 2>, axis<"data">>;
    check_axes(process_mesh<mesh>::bind(), "model=2 x data=?");
  }
  if (n == 8) {
    using mesh = device_mesh<axis<"a", 2>, axis<"b", 2>, axis<"c", 2>>;
    check_axes(process_mesh<mesh>::bind(), "2x2x2");
  }
  if (n % 3 == 0) {
    using mesh = device_mesh<axis<"data">, axis<"model", 3>>;
    check_axes(process_mesh<mesh>::bind(), "data=? x model=3");
  }
}

// ---- planned steps --------------------------------------------------------------------------
void test_steps() {
  using mesh = device_mesh<axis<"data">>;
  using tessel::collective;
  const int n = world_size(), r = world_rank();
  const auto un = static_cast<std::size_t>(n);
  const auto pm = process_mesh<mesh>::bind();
  const std::size_t k = 6;

  {  // all_reduce, out of place: the input is left alone
    std::vector<float> in(k), out(k, -1.0f), orig(k), want(k);
    for (std::size_t i = 0; i < k; ++i) {
      in[i] = orig[i] = value_at<float>(r, i);
      for (int q = 0; q < n; ++q) want[i] += value_at<float>(q, i);
    }
    const tessel::reshard_step s{.kind = collective::all_reduce, .axis = 0};
    comm::run_step(pm, s, cspan(in), mspan(out));
    CHECK_EQUAL_VECTORS(out, want, "run_step(all_reduce), out of place");
    CHECK_EQUAL_VECTORS(in, orig, "run_step(all_reduce) left its input");

    // in place, through start_step and its request
    auto req = comm::start_step(pm, s, cspan(in), mspan(in));
    req.wait();
    CHECK_EQUAL_VECTORS(in, want, "start_step(all_reduce), in place");
  }
  {  // all_gather on dimension 0: a (k, 2) row block per process -> (n*k, 2)
    std::vector<double> in(2 * k), out(2 * k * un, -1.0), want(2 * k * un);
    for (std::size_t i = 0; i < 2 * k; ++i) in[i] = 1000.0 * r + static_cast<double>(i);
    for (std::size_t q = 0; q < un; ++q)
      for (std::size_t i = 0; i < 2 * k; ++i)
        want[q * 2 * k + i] = 1000.0 * static_cast<double>(q) + static_cast<double>(i);
    const tessel::reshard_step s{.kind = collective::all_gather, .axis = 0, .dim = 0};
    auto req = comm::start_step(pm, s, cspan(in), mspan(out));
    while (!req.test()) {
    }
    CHECK_EQUAL_VECTORS(out, want, "start_step(all_gather, dim 0)");

    // reduce_scatter, its transpose, back: each process gets n x its own block
    std::vector<double> back(2 * k, -1.0), bwant(2 * k);
    for (std::size_t i = 0; i < 2 * k; ++i) bwant[i] = n * (1000.0 * r + static_cast<double>(i));
    comm::run_step(pm, tessel::transpose(s), cspan(out), mspan(back));
    CHECK_EQUAL_VECTORS(back, bwant, "run_step(transpose(all_gather) = reduce_scatter)");

    // slice: this process's block of a replicated tensor
    std::vector<double> mine(2 * k, -1.0), swant(2 * k);
    for (std::size_t i = 0; i < 2 * k; ++i) swant[i] = 1000.0 * r + static_cast<double>(i);
    comm::run_step(pm, tessel::reshard_step{.kind = collective::slice, .axis = 0, .dim = 0},
                   cspan(want), mspan(mine));
    CHECK_EQUAL_VECTORS(mine, swant, "run_step(slice, dim 0)");
  }
  {  // steps the host collectives refuse
    std::vector<float> in(k), out(k * un);
    const std::string m = message_of([&] {
      comm::run_step(
          pm,
          tessel::reshard_step{.kind = collective::all_gather, .axis = 0, .dim = 1, .to_dim = 1},
          cspan(in), mspan(out));
    });
    CHECK(contains(m, "all_gather") && contains(m, "dimension 1"),
          "run_step(all_gather, dim 1) threw: " + m);
    std::vector<float> sq(k * un), sq_out(k * un);
    const std::string mt = message_of([&] {
      comm::run_step(
          pm,
          tessel::reshard_step{.kind = collective::all_to_all, .axis = 0, .dim = 0, .to_dim = 1},
          cspan(sq), mspan(sq_out));
    });
    CHECK(contains(mt, "all_to_all") && contains(mt, "dimension 1"),
          "run_step(all_to_all, dim 0 -> 1) threw: " + mt);
    const std::string ma = message_of([&] {
      comm::run_step(pm, tessel::reshard_step{.kind = collective::all_reduce, .axis = 1}, cspan(in),
                     mspan(in));
    });
    CHECK(contains(ma, "axis 1") && contains(ma, "1 axes"),
          "run_step on axis 1 of a 1-D mesh threw: " + ma);
  }
}

// ---- meshes that do not fit the job ---------------------------------------------------------
// The messages must name the mesh's device count and the number of processes, and say how to
// launch the job.
template <std::size_t Devices>
void check_static_mesh_refused() {
  const auto n = static_cast<std::size_t>(world_size());
  if (Devices == n) return;
  using mesh = device_mesh<axis<"data", Devices>>;
  const std::string m = message_of([] { (void)process_mesh<mesh>::bind(); });
  CHECK(names_number(m, Devices) && names_number(m, n) &&
            contains(m, "mpiexec -n " + std::to_string(Devices)),
        "binding a mesh of " + std::to_string(Devices) + " devices on " + std::to_string(n) +
            " processes threw: " + m);
}

void test_errors() {
  const auto n = static_cast<std::size_t>(world_size());
  check_static_mesh_refused<3>();
  check_static_mesh_refused<5>();
  if (n != 4) {  // 2x2 binds only on 4
    using mesh = device_mesh<axis<"data", 2>, axis<"model", 2>>;
    const std::string m = message_of([] { (void)process_mesh<mesh>::bind(); });
    CHECK(names_number(m, 4) && names_number(m, n) && contains(m, "mpiexec -n 4"),
          "binding 2x2 on " + std::to_string(n) + " processes threw: " + m);
  }
  if (n % 3 != 0) {  // a static axis of 3 cannot take a share of n processes
    using mesh = device_mesh<axis<"data">, axis<"model", 3>>;
    const std::string m = message_of([] { (void)process_mesh<mesh>::bind(); });
    CHECK(names_number(m, 3) && names_number(m, n),
          "binding data=? x model=3 on " + std::to_string(n) + " processes threw: " + m);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before the runtime starts, binding a mesh is refused with a message naming initialize.
  {
    const std::string m = message_of<tessel::runtime_error>(
        [] { (void)process_mesh<device_mesh<axis<"data">>>::bind(); });
    CHECK(contains(m, "tessel::initialize"), "bind() before initialize threw: " + m);
  }

  // --ring-off-on-first: TESSEL_RING=0 on the first process alone (set before the runtime
  // starts); every process must then leave its sums to MPI.
  const bool ring_off_on_first = argc > 1 && std::string(argv[1]) == "--ring-off-on-first";
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      ring_off_on_first && rank != nullptr && std::string(rank) == "0")
    setenv("TESSEL_RING", "0", 1);
  tessel::initialize guard(argc, argv);
  try {
    if (ring_off_on_first)
      CHECK(!comm::uses_ring(), "TESSEL_RING=0 on process 0 alone: this process still uses the "
                                "ring (the processes must agree)");
    test_world();
    test_1d_mesh();
    test_ring();
    test_multi_axis_meshes();
    test_steps();
    test_errors();
  } catch (const std::exception& e) {
    return guard.fail(e);  // ends every process, so none waits in a collective
  }

  long counts[2] = {checks_passed, checks_failed};
  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (mpi_up) MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (tessel::process_id() == 0) {
    if (counts[1] == 0)
      std::printf("collectives: %ld checks passed\n", counts[0]);
    else
      std::printf("collectives: %ld checks failed, %ld passed\n", counts[1], counts[0]);
    std::fflush(stdout);
  }
  return counts[1] == 0 ? 0 : 1;
}
