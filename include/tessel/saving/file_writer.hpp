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

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/file_writer.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
