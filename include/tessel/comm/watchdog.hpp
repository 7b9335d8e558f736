// watchdog: a collective that waits longer than a timeout ends the job with a message, instead of
// leaving every process waiting for one that stopped, hangs or waits elsewhere (NCCL's and
// PyTorch c10d's watchdog timeouts do the same). One thread per process watches the blocking part
// of every collective (a blocking call, or wait() on a non-blocking one); past the timeout it
// names the processes the job waits for, then calls MPI_Abort.
//
// One diagnosis: every process keeps, in memory shared with the other processes of its machine
// (a POSIX shared-memory segment), how many collectives it has entered on each communicator and
// what the last few were (name, bytes, root), which one it waits in, and whether its initialize
// guard has ended. The first process of a
// machine whose wait times out reports, alone: from the shared state and /proc (a process that
// is stopped, or gone) it follows the processes that wait in other collectives to the ones they
// wait for, and names those (comm/stall.hpp). The other processes of the machine say nothing
// and are ended by its abort. Processes on other machines cannot be read; the message says so.
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

#include "../core/compilation.hpp"
#include "../core/environment.hpp"
#include "../core/errors.hpp"
#include "stall.hpp"

namespace tessel::comm {

// NCCL's and PyTorch's default.
inline constexpr double default_collective_timeout_seconds = 600.0;

// TESSEL_COLLECTIVE_TIMEOUT's value: seconds, a non-negative finite number (0: no timeout).
// Anything else is a value_error that names the variable and the value (core/environment.hpp).
using environment::parse_collective_timeout;

// A collective's name and its stall::op_key, computed when the program compiles (a collective
// records its key each time it runs).
struct collective_name {
  const char* text;
  std::uint64_t key;
  consteval collective_name(const char* name) : text(name), key(stall::op_key(name)) {}
};

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
  // The collectives of each communicator a process keeps in its slot, the last ones it ran: two
  // processes that ran different ones as one number took different paths through the program.
  static constexpr std::size_t history_length = 8;

  // A collective's size, root, operation and form as one word of the slot: the bytes above bit
  // 21, bit 20 for MPI's non-blocking form, bit 19 for an all_reduce of the maximum, the root + 1
  // below (0: none).
  static constexpr std::uint64_t shape_word(std::uint64_t bytes, int root, bool max,
                                            bool nonblocking = false) noexcept {
    return (bytes << 21) | (nonblocking ? 0x100000u : 0u) | (max ? 0x80000u : 0u) |
           (static_cast<std::uint64_t>(root + 1) & 0x7ffffu);
  }
  static constexpr stall::call call_of(std::uint64_t op, std::uint64_t shape) noexcept {
    return {op, shape >> 21, static_cast<int>(shape & 0x7ffffu) - 1, (shape & 0x80000u) != 0,
            (shape & 0x100000u) != 0};
  }

  static watchdog& instance() {
    static watchdog w;
    return w;
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  // Reached running only when the program exits without ending its initialize guard (exit()
  // on one process): the thread is stopped so that its std::thread does not end the process.
  ~watchdog() { stop_thread(); }

  // TESSEL_COLLECTIVE_TIMEOUT, unless the program set a timeout; a bad value throws (initialize
  // has checked it before MPI starts).
  void read_environment() {
    if (timeout_set_) return;
    if (const auto seconds = environment::collective_timeout()) timeout_ns_.store(to_ns(*seconds));
  }
  // Collective over MPI_COMM_WORLD: shares the counters of the processes of each machine and
  // starts the thread.
  void start();
  // Before MPI_Finalize.
  void stop();
  [[nodiscard]] bool running() const noexcept { return running_; }

  // Seconds; 0 turns the watchdog off. Overrides TESSEL_COLLECTIVE_TIMEOUT.
  void set_timeout(double seconds);
  [[nodiscard]] double timeout() const noexcept {
    return static_cast<double>(timeout_ns_.load()) * 1e-9;
  }

  // A communicator of `c`'s processes, described as `label` in messages ("mesh axis 'batch'").
  // Collective over `c`: its members agree on one channel. Returns -1 when not watching, or when
  // every channel is taken (its collectives are then timed, but who has not arrived is unknown).
  int register_channel(MPI_Comm c, std::string label);

  // This process enters a collective on `channel` (`op`: op_key of its name, `shape`:
  // shape_word): returns its number there (1, 2, ...). The entry of the history is written as a
  // sequence lock (its number cleared, the fields, its number), so that a reader never takes
  // half an entry for a whole one.
  std::uint64_t enter(int channel, std::uint64_t op = 0, std::uint64_t shape = 0) noexcept {
    if (!running_ || channel < 0) return 0;
    constexpr auto relaxed = std::memory_order_relaxed;
    std::atomic_ref<std::uint64_t> n(own_[channel]);
    const std::uint64_t k = n.load(relaxed) + 1;
    std::uint64_t* e = history_entry(own_, channel, k);
    word(e, 0).store(0, relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    word(e, 1).store(op, relaxed);
    word(e, 2).store(shape, relaxed);
    word(e, 0).store(k, std::memory_order_release);
    n.store(k, std::memory_order_release);
    fingerprint_[static_cast<std::size_t>(channel)] =
        stall::next_fingerprint(fingerprint_[static_cast<std::size_t>(channel)], op, shape);
    return k;
  }
  // What this process ran on each channel (stall::path: its communicator, how many collectives,
  // their fingerprint), as path_words() words each, for the processes to compare when their
  // guards end (runtime/initialize.hpp gathers them over the world).
  static constexpr std::size_t path_words_per_channel = 3;
  [[nodiscard]] std::vector<std::uint64_t> path_words() const;
  // From every process's path_words(), concatenated in world rank order: empty when the
  // processes of each communicator ran the same collectives, else stall::parted_paths's message.
  [[nodiscard]] std::string parted_paths(const std::vector<std::uint64_t>& gathered) const;
  // The blocking part of collective `seq` on `channel`. A few stores and no clock read: the
  // watchdog's thread times a wait from when it first sees it (so a report comes between the
  // timeout and the timeout plus one check interval after the wait began). The wait is also
  // published to the other processes of the machine, whose report may follow it. An untimed
  // wait (`timed` false: the barrier where the guards end, which a process may reach long before
  // another that still has work outside any collective) is published but never times out here.
  void begin_wait(const char* op, int channel, std::uint64_t seq, bool timed = true) noexcept {
    if (!running_) return;
    constexpr auto relaxed = std::memory_order_relaxed;
    waiting_.store(0, relaxed);
    op_.store(op, relaxed);
    channel_.store(channel, relaxed);
    seq_.store(seq, relaxed);
    word(own_, wait_word).store(encode_wait(channel, seq), std::memory_order_release);
    if (timed) waiting_.store(++wait_id_, std::memory_order_release);
  }
  void end_wait() noexcept {
    if (!running_) return;
    waiting_.store(0, std::memory_order_release);
    word(own_, wait_word).store(0, std::memory_order_release);
  }
  // This process's initialize guard has ended (main returned): what follows is its last
  // collective, and a report of another process that waits for it says so.
  void mark_leaving() noexcept {
    if (running_) word(own_, flags_word).fetch_or(leaving_flag, std::memory_order_release);
  }
  // The shared-memory segment's name while it exists (it is removed as soon as every process of
  // the machine has it open): empty once removed, or when there is none.
  [[nodiscard]] const std::string& segment_name() const noexcept { return segment_name_; }

 private:
  // A process's words in the segment: its counters, then what it waits in, its pid, its flags,
  // (spare words to a cache line), then per channel the communicator it is in (group_key), then
  // per channel its last collectives (history_length entries of 3 words: number, op, shape).
  static constexpr std::size_t wait_word = max_channels, pid_word = max_channels + 1,
                               flags_word = max_channels + 2, group_word = max_channels + 8,
                               history_word = 2 * max_channels + 8, entry_words = 3,
                               slot_words =
                                   history_word + max_channels * history_length * entry_words;
  static constexpr std::size_t header_words = 8;  // [0]: the reporter's world rank + 1
  static constexpr std::uint64_t leaving_flag = 1;

  watchdog() = default;
  static std::atomic_ref<std::uint64_t> word(std::uint64_t* slot, std::size_t i) noexcept {
    return std::atomic_ref<std::uint64_t>(slot[i]);
  }
  // 0: not waiting; else the collective's number above bit 16, bit 15 set, the channel + 1 below.
  static std::uint64_t encode_wait(int channel, std::uint64_t seq) noexcept {
    return (seq << 16) | 0x8000u | static_cast<std::uint64_t>(channel + 1);
  }
  static std::uint64_t* history_entry(std::uint64_t* slot, int channel,
                                      std::uint64_t seq) noexcept {
    return slot + history_word +
           (static_cast<std::size_t>(channel) * history_length + seq % history_length) *
               entry_words;
  }
  std::uint64_t* slot_at(int local) const noexcept {
    return shared_ + header_words + static_cast<std::size_t>(local) * slot_words;
  }
  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static std::int64_t to_ns(double seconds) {
    return static_cast<std::int64_t>(std::min(seconds, 1e9) * 1e9);
  }
  void stop_thread();

  // One POSIX shared-memory segment per machine holds every local process's slot (an MPI
  // shared-memory window would do the same, but an open window adds its progress function to
  // every MPI call: a 4-byte MPI_Allreduce took 0.94 us instead of 0.52 in one run of
  // benchmarks/collective_latency_bench). The segment's name is drawn on the machine's first
  // process, and every process removes the name as soon as all have mapped it, so that a job
  // that one of them ends at once (MPI_Abort after a failed check) leaves nothing behind: the
  // process that ends it has removed the name first.
  void share_slots(MPI_Comm node, int local_size);

  // Whether this process reports the stall: the first of its machine whose wait times out
  // does; the others stay silent while its report and the abort that follows come.
  bool claim_report() noexcept {
    if (shared_ == nullptr) return true;
    std::atomic_ref<std::uint64_t> reporter(shared_[0]);
    std::uint64_t none = 0;
    const auto mine = static_cast<std::uint64_t>(world_rank_) + 1;
    return reporter.compare_exchange_strong(none, mine) || none == mine;
  }

  void run();
  static constexpr std::int64_t report_grace_ns = 30'000'000'000;

  // What /proc says of a process of this machine: stopped (T, t) or exited (gone, or Z).
  static void read_process_state(std::uint64_t pid, stall::process& p);

  void report(stall::snapshot& s) const;

  bool running_ = false;
  bool timeout_set_ = false;
  std::atomic<std::int64_t> timeout_ns_{to_ns(default_collective_timeout_seconds)};
  int world_rank_ = 0, world_size_ = 1;
  std::uint64_t* shared_ = nullptr;  // a header, then every local process's slot
  std::size_t shared_bytes_ = 0;
  std::string segment_name_;
  std::array<std::uint64_t, slot_words> private_{};
  std::uint64_t* own_ = nullptr;
  std::vector<std::uint64_t*> slots_;  // by world rank; null: on another machine
  std::vector<stall::channel> channels_;
  // What the thread watches: written by the thread that calls MPI, read by the watchdog's.
  // waiting_ is the id of the wait in progress (0: none); the fields are read between two loads
  // of it, so a wait that ends or changes meanwhile is skipped, never reported half-read.
  std::atomic<const char*> op_{""};
  std::atomic<int> channel_{-1};
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> waiting_{0};
  std::uint64_t wait_id_ = 0;
  std::array<std::uint64_t, max_channels> fingerprint_{};  // per channel: stall::path's
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

// The blocking part of one collective, watched: begins on construction, ends on destruction.
class watched_wait {
 public:
  explicit watched_wait(const collective_tag& t, bool timed = true) noexcept {
    watchdog::instance().begin_wait(t.op, t.channel, t.seq, timed);
  }
  ~watched_wait() { watchdog::instance().end_wait(); }
  watched_wait(const watched_wait&) = delete;
  watched_wait& operator=(const watched_wait&) = delete;
};

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
TESSEL_INLINE void watchdog::start() {
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
  share_slots(node, local_size);
  slots_.assign(static_cast<std::size_t>(world_size_), nullptr);
  if (shared_ != nullptr) {
    for (int l = 0; l < local_size; ++l)
      slots_[static_cast<std::size_t>(world_of[static_cast<std::size_t>(l)])] = slot_at(l);
    own_ = slot_at(local_rank);
  } else {  // no shared memory: this process's state only, the others unknown
    private_.fill(0);
    own_ = private_.data();
    slots_[static_cast<std::size_t>(world_rank_)] = own_;
  }
  fingerprint_.fill(0);
  word(own_, pid_word).store(static_cast<std::uint64_t>(::getpid()), std::memory_order_relaxed);
  word(own_, flags_word).store(0, std::memory_order_relaxed);
  MPI_Comm_free(&node);
  running_ = true;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

TESSEL_INLINE void watchdog::stop() {
  if (!running_) return;
  stop_thread();
  running_ = false;
  own_ = nullptr;
  slots_.clear();
  channels_.clear();
  if (shared_ != nullptr) munmap(shared_, shared_bytes_);
  shared_ = nullptr;
}

TESSEL_INLINE void watchdog::set_timeout(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0)
    throw value_error(
        "set_collective_timeout: the timeout must be a non-negative number of "
        "seconds (0 for none), got " +
        std::to_string(seconds));
  timeout_set_ = true;
  timeout_ns_.store(to_ns(seconds));
  wake_.notify_all();
}

TESSEL_INLINE int watchdog::register_channel(MPI_Comm c, std::string label) {
  if (!running_) return -1;
  int proposed = static_cast<int>(channels_.size()), agreed = 0;
  MPI_Allreduce(&proposed, &agreed, 1, MPI_INT, MPI_MAX, c);
  stall::channel ch;
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
  // Every row of a mesh axis agrees on the same channel; which row this process is in is
  // published beside its counter, so that a report names the members of another's row.
  const int lowest = *std::min_element(ch.members.begin(), ch.members.end());
  word(own_, group_word + static_cast<std::size_t>(agreed))
      .store(stall::group_key(lowest, size), std::memory_order_release);
  if (channels_.size() <= static_cast<std::size_t>(agreed))
    channels_.resize(static_cast<std::size_t>(agreed) + 1);
  channels_[static_cast<std::size_t>(agreed)] = std::move(ch);
  return agreed;
}

TESSEL_INLINE std::vector<std::uint64_t> watchdog::path_words() const {
  std::vector<std::uint64_t> out(max_channels * path_words_per_channel, 0);
  if (!running_) return out;
  for (std::size_t c = 0; c < max_channels; ++c) {
    out[c * path_words_per_channel] = word(own_, group_word + c).load(std::memory_order_acquire);
    out[c * path_words_per_channel + 1] = word(own_, c).load(std::memory_order_relaxed);
    out[c * path_words_per_channel + 2] = fingerprint_[c];
  }
  return out;
}

TESSEL_INLINE std::string watchdog::parted_paths(const std::vector<std::uint64_t>& gathered) const {
  const std::size_t per_process = max_channels * path_words_per_channel;
  std::vector<std::vector<stall::path>> by_process(gathered.size() / per_process);
  for (std::size_t r = 0; r < by_process.size(); ++r)
    for (std::size_t c = 0; c < max_channels; ++c) {
      const std::uint64_t* w = gathered.data() + r * per_process + c * path_words_per_channel;
      by_process[r].push_back({w[0], w[1], w[2]});
    }
  std::vector<std::string> labels;
  for (const stall::channel& c : channels_) labels.push_back(c.label);
  return stall::parted_paths(by_process, labels);
}

TESSEL_INLINE void watchdog::stop_thread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

TESSEL_INLINE void watchdog::share_slots(MPI_Comm node, int local_size) {
  int local_rank = 0;
  MPI_Comm_rank(node, &local_rank);
  std::uint64_t token = 0;
  if (local_rank == 0)
    token = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^
            static_cast<std::uint64_t>(::getpid());
  MPI_Bcast(&token, 1, MPI_UINT64_T, 0, node);
  segment_name_ = "/tessel-watchdog-" + std::to_string(token);
  shared_bytes_ =
      (header_words + static_cast<std::size_t>(local_size) * slot_words) * sizeof(std::uint64_t);
  int fd = -1;
  if (local_rank == 0) {
    fd = ::shm_open(segment_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(shared_bytes_)) != 0) {
      ::close(fd);
      ::shm_unlink(segment_name_.c_str());
      fd = -1;
    }
  }
  int created = local_rank == 0 ? (fd >= 0 ? 1 : 0) : 0;
  MPI_Bcast(&created, 1, MPI_INT, 0, node);
  if (created && local_rank != 0) fd = ::shm_open(segment_name_.c_str(), O_RDWR, 0600);
  void* p = MAP_FAILED;
  if (fd >= 0) {
    p = ::mmap(nullptr, shared_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
  }
  int mapped = p != MAP_FAILED ? 1 : 0, everywhere = 0;
  MPI_Allreduce(&mapped, &everywhere, 1, MPI_INT, MPI_MIN, node);  // all mapped (or not)
  if (created) ::shm_unlink(segment_name_.c_str());                // the first call removes it
  segment_name_.clear();
  if (everywhere) {
    shared_ = static_cast<std::uint64_t*>(p);  // zero-filled by ftruncate
  } else if (p != MAP_FAILED) {
    ::munmap(p, shared_bytes_);
  }
}

TESSEL_INLINE void watchdog::run() {
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
    // Another process of the machine reports (and aborts the job): this one says nothing,
    // unless that report has not ended the job after a grace period (its process died).
    if (!claim_report() && waited < t + report_grace_ns) continue;
    constexpr auto relaxed = std::memory_order_relaxed;
    stall::snapshot s;
    s.op = op_.load(relaxed);
    s.channel = channel_.load(relaxed);
    s.seq = seq_.load(relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (waiting_.load(relaxed) != id) continue;  // that wait ended while it was read
    s.waited = static_cast<double>(waited) * 1e-9;
    report(s);
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 124);
    std::_Exit(124);
  }
}

TESSEL_INLINE void watchdog::read_process_state(std::uint64_t pid, stall::process& p) {
  if (pid == 0) return;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    p.exited = true;
    return;
  }
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')'.
  const std::string_view text(buf, n);
  const std::size_t close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return;
  const char state = text[close + 2];
  p.stopped = state == 'T' || state == 't';
  p.exited = state == 'Z' || state == 'X';
}

TESSEL_INLINE void watchdog::report(stall::snapshot& s) const {
  s.reporter = world_rank_;
  s.timeout = timeout();
  s.channels = channels_;
  // Channels another process of the machine has registered and this one has not.
  std::size_t used = channels_.size();
  for (std::uint64_t* slot : slots_)
    for (std::size_t c = used; slot != nullptr && c < max_channels; ++c)
      if (word(slot, group_word + c).load(std::memory_order_acquire) != 0) used = c + 1;
  s.channels.resize(used, stall::channel{"a communicator of another process", {}});
  s.processes.resize(static_cast<std::size_t>(world_size_));
  for (int r = 0; r < world_size_; ++r) {
    std::uint64_t* slot = slots_[static_cast<std::size_t>(r)];
    if (slot == nullptr) continue;
    stall::process& p = s.processes[static_cast<std::size_t>(r)];
    p.known = true;
    p.entered.resize(used);
    p.group.resize(used);
    p.history.resize(used);
    for (std::size_t c = 0; c < used; ++c) {
      p.entered[c] = word(slot, c).load(std::memory_order_acquire);
      p.group[c] = word(slot, group_word + c).load(std::memory_order_acquire);
      for (std::size_t j = 0; j < history_length; ++j) {
        std::uint64_t* e = history_entry(slot, static_cast<int>(c), j);  // entry j of c
        const std::uint64_t seq = word(e, 0).load(std::memory_order_acquire);
        const std::uint64_t op = word(e, 1).load(std::memory_order_relaxed);
        const std::uint64_t shape = word(e, 2).load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq != 0 && word(e, 0).load(std::memory_order_relaxed) == seq)
          p.history[c].push_back({seq, call_of(op, shape)});
      }
    }
    const std::uint64_t w = word(slot, wait_word).load(std::memory_order_acquire);
    if (w != 0 && r != world_rank_) {
      p.wait_channel = static_cast<int>(w & 0x7fffu) - 1;
      p.wait_seq = w >> 16;
    } else if (r == world_rank_) {
      p.wait_channel = s.channel;
      p.wait_seq = s.seq;
    }
    p.leaving = (word(slot, flags_word).load(std::memory_order_acquire) & leaving_flag) != 0;
    if (r != world_rank_) read_process_state(word(slot, pid_word).load(), p);
  }
  const std::string msg = stall::describe(s) + "\n";
  std::fputs(msg.c_str(), stderr);
}
#endif

}  // namespace tessel::comm
