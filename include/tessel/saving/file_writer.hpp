// file_writer: a file written front to back, whose pages go to the disk while the rest is still
// being written. Each window of 16 MiB, once written, is handed to the disk at once (Linux's
// sync_file_range), and the window before it is waited for: the disk writes one window while the
// next is checksummed and copied into the page cache, so that a save takes about the longer of
// the two instead of their sum, the final fsync waits for one window only, and a save leaves at
// most two windows of dirty pages behind it (a plain write and fsync would leave the whole file
// dirty, for the kernel to flush at once at the end). What dd's `conv=fsync` does in one go, done
// as a pipeline. On systems without sync_file_range, the same writes, synced at the end.
//
// start_writeback(fd) does the first half for a file another library writes (libhdf5's).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../data/file_access.hpp"

namespace tessel::saving {

// Hands every dirty page of the open file `fd` to the disk without waiting for it (a hint: a
// failure here is found by the fsync that follows).
TESSEL_INLINE void start_writeback(int fd);

class file_writer {
 public:
  static constexpr std::uint64_t window_bytes = std::uint64_t{16} << 20;

  // `what` names the file in messages: "Cannot write the <what> '<path>'".
  explicit file_writer(std::filesystem::path path, std::string what = "file");
  file_writer(const file_writer&) = delete;
  file_writer& operator=(const file_writer&) = delete;
  ~file_writer() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Appends `bytes` bytes from `data`.
  void write(const void* data, std::size_t bytes);
  [[nodiscard]] std::uint64_t size() const noexcept { return written_; }

  // Syncs the file to disk and closes it; the file is complete only once this returns.
  void finish();

 private:
  // The window [handed_, handed_ + window) goes to the disk; the one before it is waited for.
  void hand_window();

  std::filesystem::path path_;
  std::string what_;
  int fd_ = -1;
  std::uint64_t written_ = 0, handed_ = 0;
};

}  // namespace tessel::saving

// Definitions (compiled once in tessel::compiled; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace tessel::saving {

TESSEL_INLINE void start_writeback(int fd) {
#if defined(__linux__)
  (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
#endif
}

TESSEL_INLINE file_writer::file_writer(std::filesystem::path path, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw runtime_error("Cannot write the " + what_ + " '" + path_.string() +
                        "': " + data::open_failure(path_, errno, true));
}

TESSEL_INLINE void file_writer::write(const void* data, std::size_t bytes) {
  const auto* c = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, c, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw runtime_error("Cannot write the " + what_ + " '" + path_.string() +
                          "': " + std::strerror(n < 0 ? errno : ENOSPC) + " (is the disk full?)");
    c += n;
    bytes -= static_cast<std::size_t>(n);
    written_ += static_cast<std::uint64_t>(n);
    while (written_ >= handed_ + window_bytes) hand_window();
  }
}

TESSEL_INLINE void file_writer::finish() {
  const int rc = ::fsync(fd_);
  const int e = errno;
  const int closed = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || closed != 0)
    throw runtime_error("Cannot sync the " + what_ + " '" + path_.string() +
                        "' to disk: " + std::strerror(rc != 0 ? e : errno));
}

TESSEL_INLINE void file_writer::hand_window() {
#if defined(__linux__)
  const auto at = static_cast<off64_t>(handed_), n = static_cast<off64_t>(window_bytes);
  (void)::sync_file_range(fd_, at, n, SYNC_FILE_RANGE_WRITE);
  if (handed_ >= window_bytes)
    (void)::sync_file_range(
        fd_, at - n, n,
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
#endif
  handed_ += window_bytes;
}

}  // namespace tessel::saving
#endif  // TESSEL_DEFINITIONS
