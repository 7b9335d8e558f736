// atomic_file: a file written whole or not at all. The writer fills `<name>.tmp.<pid>` in the
// destination's directory; then the temporary file is synced to disk, renamed over the
// destination (rename within one file system is atomic in POSIX) and the directory is synced, so
// that after a crash the path holds either the old file or the complete new one, never a part.
// What every checkpoint tessel writes goes through.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../data/file_access.hpp"

namespace tessel::saving {

namespace detail {
// Flushes a file's (or a directory's) data and metadata to the disk.
TESSEL_INLINE void sync_path(const std::filesystem::path& p, bool directory);
}  // namespace detail

// How many files this process has written through write_atomically: under a distribution only
// process 0 writes a weights file, which tests hold it to.
TESSEL_INLINE std::size_t& files_written();

// The temporary name a write to `path` uses: `<path>.tmp.<pid>`, beside it.
TESSEL_INLINE std::filesystem::path temporary_path(const std::filesystem::path& path);

// Writes `path` atomically: `write(tmp)` writes the whole file at `tmp` (and closes it); then
// sync, rename, sync of the directory. If `write` throws, or a step after it fails, the temporary
// file is removed, `path` is left as it was, and the error goes on.
template <class Write>
void write_atomically(const std::filesystem::path& path, Write&& write) {
  const std::filesystem::path dir =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const data::path_access where = data::check_path(dir, data::path_kind::directory);
  if (!where.ok())
    throw value_error("Cannot write '" + path.string() + "': the directory '" + dir.string() +
                      "' " + where.reason + ".");
  const std::filesystem::path tmp = temporary_path(path);
  try {
    write(tmp);
    detail::sync_path(tmp, false);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw runtime_error("Cannot rename '" + tmp.string() + "' to '" + path.string() +
                          "': " + std::strerror(errno));
  } catch (...) {
    // The temporary file, if the write made one (a directory of that name is not tessel's).
    std::error_code ignored;
    if (!std::filesystem::is_directory(std::filesystem::symlink_status(tmp, ignored)))
      std::filesystem::remove(tmp, ignored);
    throw;
  }
  detail::sync_path(dir, true);
  ++files_written();
}

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/atomic_file.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
