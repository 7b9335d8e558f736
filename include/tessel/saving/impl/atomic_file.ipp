// The definitions of saving/atomic_file.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include atomic_file.hpp.
namespace tessel::saving::detail {

TESSEL_INLINE void sync_path(const std::filesystem::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    throw runtime_error("Cannot open '" + p.string() +
                        "' to sync it to disk: " + data::open_failure(p, errno, false));
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // A directory on a file system that cannot sync directories (EINVAL) has nothing to sync.
  if (rc != 0 && !(directory && error == EINVAL))
    throw runtime_error("Cannot sync '" + p.string() + "' to disk: " + std::strerror(error));
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE std::size_t& files_written() {
  static std::size_t count = 0;
  return count;
}

TESSEL_INLINE std::filesystem::path temporary_path(const std::filesystem::path& path) {
  return std::filesystem::path(path.string() + ".tmp." + std::to_string(::getpid()));
}

}  // namespace tessel::saving
