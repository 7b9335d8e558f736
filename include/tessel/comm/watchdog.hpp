// watchdog: a collective that waits longer than a timeout ends the job with a message, instead of
// leaving every process waiting for one that stopped, hangs or waits elsewhere (NCCL's and
// PyTorch c10d's watchdog timeouts do the same). One thread per process watches the blocking part
// of every collective (a blocking call, or wait() on a non-blocking one); past the timeout it
// prints what waited, over which mesh axis, and which processes had not arrived, then calls
// MPI_Abort.
//
// Who has not arrived: every process counts the collectives it has entered on each communicator
// in memory shared with the other processes of its machine (a POSIX shared-memory segment). The
// process that times out in the k-th collective of a communicator names the members whose count
// is below k. Members on other machines cannot be read; the message says so.
//
// The timeout: `set_collective_timeout` (or initialize's `collective_timeout`) if the program
// sets one, else the environment variable TESSEL_COLLECTIVE_TIMEOUT in seconds, else 10 minutes.
// Zero turns the watchdog off.
#pragma once

#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../core/errors.hpp"

namespace tessel::comm {

// NCCL's and PyTorch's default.
inline constexpr double default_collective_timeout_seconds = 600.0;

// TESSEL_COLLECTIVE_TIMEOUT's value: seconds, a non-negative finite number (0: no timeout).
// Anything else is a value_error that names the variable and the value.
inline double parse_collective_timeout(std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? std::nan("") : std::strtod(s.c_str(), &end);
  const bool whole = end != nullptr && *end == '\0';
  if (!whole || errno == ERANGE || !std::isfinite(v) || v < 0)
    throw value_error("TESSEL_COLLECTIVE_TIMEOUT='" + s +
                      "' is not a number of seconds; set it to how long a collective may wait "
                      "before the job is aborted (for example 600 for 10 minutes, 0 for no "
                      "timeout), or unset it");
  return v;
}

// One collective as the watchdog names it: its name, its communicator's channel and its number
// there.
struct collective_tag {
  const char* op = "";
  int channel = -1;
  std::uint64_t seq = 0;
};

class watchdog {
 public:
  static constexpr std::size_t max_channels = 64;

  static watchdog& instance() {
    static watchdog w;
    return w;
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

  // TESSEL_COLLECTIVE_TIMEOUT, unless the program set a timeout; a bad value throws. Called
  // before MPI starts, so that a mistyped value stops the program before anything runs.
  void read_environment() {
    if (timeout_set_) return;
    if (const char* env = std::getenv("TESSEL_COLLECTIVE_TIMEOUT"))
      timeout_ns_.store(to_ns(parse_collective_timeout(env)));
  }
  // Collective over MPI_COMM_WORLD: shares the counters of the processes of each machine and
  // starts the thread.
  void start() {
    if (running_) return;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    MPI_Comm node{};
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node);
    int local_rank = 0, local_size = 0;
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    std::vector<int> world_of(static_cast<std::size_t>(local_size));
    MPI_Allgather(&world_rank_, 1, MPI_INT, world_of.data(), 1, MPI_INT, node);
    share_counters(node, local_rank, local_size);
    counters_.assign(static_cast<std::size_t>(world_size_), nullptr);
    if (shared_ != nullptr) {
      for (int l = 0; l < local_size; ++l)
        counters_[static_cast<std::size_t>(world_of[static_cast<std::size_t>(l)])] =
            shared_ + static_cast<std::size_t>(l) * max_channels;
      own_ = shared_ + static_cast<std::size_t>(local_rank) * max_channels;
    } else {  // no shared memory: this process's counts only, the others unknown
      own_ = private_.data();
      counters_[static_cast<std::size_t>(world_rank_)] = own_;
    }
    MPI_Comm_free(&node);
    running_ = true;
    stop_ = false;
    thread_ = std::thread([this] { run(); });
  }
  // Before MPI_Finalize.
  void stop() {
    if (!running_) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    running_ = false;
    own_ = nullptr;
    counters_.clear();
    channels_.clear();
    if (shared_ != nullptr) munmap(shared_, shared_bytes_);
    shared_ = nullptr;
  }
  [[nodiscard]] bool running() const noexcept { return running_; }

  // Seconds; 0 turns the watchdog off. Overrides TESSEL_COLLECTIVE_TIMEOUT.
  void set_timeout(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0)
      throw value_error(
          "set_collective_timeout: the timeout must be a non-negative number of "
          "seconds (0 for none), got " +
          std::to_string(seconds));
    timeout_set_ = true;
    timeout_ns_.store(to_ns(seconds));
    wake_.notify_all();
  }
  [[nodiscard]] double timeout() const noexcept {
    return static_cast<double>(timeout_ns_.load()) * 1e-9;
  }

  // A communicator of `c`'s processes, described as `label` in messages ("mesh axis 'batch'").
  // Collective over `c`: its members agree on one channel. Returns -1 when not watching, or when
  // every channel is taken (its collectives are then timed, but who has not arrived is unknown).
  int register_channel(MPI_Comm c, std::string label) {
    if (!running_) return -1;
    int proposed = static_cast<int>(channels_.size()), agreed = 0;
    MPI_Allreduce(&proposed, &agreed, 1, MPI_INT, MPI_MAX, c);
    channel ch;
    ch.label = std::move(label);
    int size = 0;
    MPI_Comm_size(c, &size);
    MPI_Group group{}, world{};
    MPI_Comm_group(c, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
    ch.members.resize(static_cast<std::size_t>(size));
    MPI_Group_translate_ranks(group, size, ranks.data(), world, ch.members.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    std::lock_guard lock(mutex_);
    if (static_cast<std::size_t>(agreed) >= max_channels) return -1;
    if (channels_.size() <= static_cast<std::size_t>(agreed))
      channels_.resize(static_cast<std::size_t>(agreed) + 1);
    channels_[static_cast<std::size_t>(agreed)] = std::move(ch);
    return agreed;
  }

  // This process enters a collective on `channel`: returns its number there (1, 2, ...).
  std::uint64_t enter(int channel) noexcept {
    if (!running_ || channel < 0) return 0;
    std::atomic_ref<std::uint64_t> n(own_[channel]);
    const std::uint64_t k = n.load(std::memory_order_relaxed) + 1;
    n.store(k, std::memory_order_release);
    return k;
  }
  // The blocking part of collective `seq` on `channel`. A few stores and no clock read: the
  // watchdog's thread times a wait from when it first sees it (so a report comes between the
  // timeout and the timeout plus one check interval after the wait began).
  void begin_wait(const char* op, int channel, std::uint64_t seq) noexcept {
    if (!running_) return;
    constexpr auto relaxed = std::memory_order_relaxed;
    waiting_.store(0, relaxed);
    op_.store(op, relaxed);
    channel_.store(channel, relaxed);
    seq_.store(seq, relaxed);
    waiting_.store(++wait_id_, std::memory_order_release);
  }
  void end_wait() noexcept {
    if (running_) waiting_.store(0, std::memory_order_release);
  }

 private:
  struct channel {
    std::string label;
    std::vector<int> members;  // world ranks
  };
  struct wait_state {
    const char* op = "";
    int channel = -1;
    std::uint64_t seq = 0;
  };

  watchdog() = default;
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static std::int64_t to_ns(double seconds) {
    return static_cast<std::int64_t>(std::min(seconds, 1e9) * 1e9);
  }

  // One POSIX shared-memory segment per machine holds every local process's counters (an MPI
  // shared-memory window would do the same, but an open window adds its progress function to
  // every MPI call: a 4-byte MPI_Allreduce took 0.94 us instead of 0.52 in one run of
  // benchmarks/collective_latency_bench). The segment's name
  // is drawn on the machine's first process and unlinked once every process has mapped it, so
  // nothing is left behind whatever way the job ends.
  void share_counters(MPI_Comm node, int local_rank, int local_size) {
    std::uint64_t token = 0;
    if (local_rank == 0)
      token = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^
              static_cast<std::uint64_t>(::getpid());
    MPI_Bcast(&token, 1, MPI_UINT64_T, 0, node);
    const std::string name = "/tessel-watchdog-" + std::to_string(token);
    shared_bytes_ = static_cast<std::size_t>(local_size) * max_channels * sizeof(std::uint64_t);
    int fd = -1;
    if (local_rank == 0) {
      fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(shared_bytes_)) != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    int created = local_rank == 0 ? (fd >= 0 ? 1 : 0) : 0;
    MPI_Bcast(&created, 1, MPI_INT, 0, node);
    if (created && local_rank != 0) fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    void* p = MAP_FAILED;
    if (fd >= 0) {
      p = ::mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
    }
    int mapped = p != MAP_FAILED ? 1 : 0, everywhere = 0;
    MPI_Allreduce(&mapped, &everywhere, 1, MPI_INT, MPI_MIN, node);  // all mapped (or not)
    if (local_rank == 0 && created) ::shm_unlink(name.c_str());
    if (everywhere) {
      shared_ = static_cast<std::uint64_t*>(p);  // zero-filled by ftruncate
    } else if (p != MAP_FAILED) {
      ::munmap(p, shared_bytes_);
    }
  }

  void run() {
    std::unique_lock lock(mutex_);
    std::uint64_t seen = 0;    // the wait in progress at the last check
    std::int64_t seen_at = 0;  // when this thread first saw it
    while (!stop_) {
      const std::int64_t t = timeout_ns_.load();
      // Check often enough to end within a tenth of the timeout (at most once a second).
      const auto tick = std::chrono::nanoseconds(
          t > 0 ? std::clamp<std::int64_t>(t / 10, 10'000'000, 1'000'000'000) : 1'000'000'000);
      wake_.wait_for(lock, tick, [&] { return stop_; });
      if (stop_ || t <= 0) continue;
      const std::uint64_t id = waiting_.load(std::memory_order_acquire);
      if (id != seen) seen = id, seen_at = now_ns();
      if (id == 0) continue;
      const std::int64_t waited = now_ns() - seen_at;
      if (waited < t) continue;
      constexpr auto relaxed = std::memory_order_relaxed;
      const wait_state w{op_.load(relaxed), channel_.load(relaxed), seq_.load(relaxed)};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (waiting_.load(relaxed) != id) continue;  // that wait ended while it was read
      report(w, static_cast<double>(waited) * 1e-9);
      std::fflush(nullptr);
      MPI_Abort(MPI_COMM_WORLD, 124);
      std::_Exit(124);
    }
  }

  void report(const wait_state& w, double waited) const {
    std::string msg = "tessel: collective timeout on process " + std::to_string(world_rank_) +
                      " of " + std::to_string(world_size_) + ": " + w.op;
    std::string missing, unknown;
    if (w.channel >= 0 && static_cast<std::size_t>(w.channel) < channels_.size()) {
      const channel& ch = channels_[static_cast<std::size_t>(w.channel)];
      msg += " over " + ch.label + " (its collective number " + std::to_string(w.seq) + ")";
      for (const int r : ch.members) {
        const std::uint64_t* base = counters_[static_cast<std::size_t>(r)];
        std::string& list = base ? missing : unknown;
        if (base) {
          const std::uint64_t got =
              std::atomic_ref<const std::uint64_t>(base[w.channel]).load(std::memory_order_acquire);
          if (got >= w.seq) continue;
        }
        list += (list.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", waited);
    msg += " has waited " + std::string(secs) + " s (timeout " + format_seconds(timeout()) + ")";
    if (!missing.empty())
      msg += "; the processes that did not arrive: " + missing +
             " (stopped, hung, or waiting in another collective)";
    else if (unknown.empty() && w.channel >= 0)
      msg +=
          "; every process arrived, so the collective itself did not complete (an MPI or "
          "network fault)";
    if (!unknown.empty())
      msg += "; processes " + unknown + " are on other machines and could not be checked";
    if (w.channel < 0) msg += "; which processes did not arrive is unknown";
    msg +=
        ". Aborting the job. If a step really takes this long, raise the timeout: "
        "TESSEL_COLLECTIVE_TIMEOUT=<seconds> or tessel::set_collective_timeout.\n";
    std::fputs(msg.c_str(), stderr);
  }
  static std::string format_seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
  }

  bool running_ = false;
  bool timeout_set_ = false;
  std::atomic<std::int64_t> timeout_ns_{to_ns(default_collective_timeout_seconds)};
  int world_rank_ = 0, world_size_ = 1;
  std::uint64_t* shared_ = nullptr;  // every local process's counters, max_channels each
  std::size_t shared_bytes_ = 0;
  std::array<std::uint64_t, max_channels> private_{};
  std::uint64_t* own_ = nullptr;
  std::vector<std::uint64_t*> counters_;
  std::vector<channel> channels_;
  // What the thread watches: written by the thread that calls MPI, read by the watchdog's.
  // waiting_ is the id of the wait in progress (0: none); the fields are read between two loads
  // of it, so a wait that ends or changes meanwhile is skipped, never reported half-read.
  std::atomic<const char*> op_{""};
  std::atomic<int> channel_{-1};
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> waiting_{0};
  std::uint64_t wait_id_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

// The blocking part of one collective, watched: begins on construction, ends on destruction.
class watched_wait {
 public:
  explicit watched_wait(const collective_tag& t) noexcept {
    watchdog::instance().begin_wait(t.op, t.channel, t.seq);
  }
  ~watched_wait() { watchdog::instance().end_wait(); }
  watched_wait(const watched_wait&) = delete;
  watched_wait& operator=(const watched_wait&) = delete;
};

}  // namespace tessel::comm
