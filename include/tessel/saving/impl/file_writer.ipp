// The definitions of saving/file_writer.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include file_writer.hpp.
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
