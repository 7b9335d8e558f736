#pragma once
// Why a path cannot be used, in words a user can act on: missing, not a directory (or a
// directory where a file was wanted), or refused by the system (permission denied), with the
// system's own text for the error and the part of the path at fault. What tessel's readers and
// writers of files (IDX files, Fashion-MNIST, CSVLogger) report instead of a bare "not found".
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "../core/compilation.hpp"

namespace tessel::data {

// What a path is expected to be.
enum class path_kind {
  file,       // anything but a directory: a regular file, a link to one, a device
  directory,  // a directory, to look in
};

// The result of check_path: ok, or what is wrong, in words.
struct path_access {
  enum class status {
    ok,
    missing,     // the path does not exist
    wrong_kind,  // it is not what was wanted, or a part of the path before it is not a directory
    refused,     // the system refused to look (permission denied, a loop of links, ...)
  };
  status state = status::ok;
  // What follows the path in a message: "does not exist", "is a regular file, not a directory",
  // "cannot be accessed: Permission denied (the user running this program may not search the
  // directory '/srv/data')".
  std::string reason;
  // The kind of file found there (std::filesystem::file_type::none where none was found).
  std::filesystem::file_type type = std::filesystem::file_type::none;

  bool ok() const { return state == status::ok; }
  bool missing() const { return state == status::missing; }
};

namespace detail {

// "a regular file": the kind of a file, as `ls -l` tells it.
TESSEL_INLINE std::string kind_name(std::filesystem::file_type t);

// The path's ancestors and the path, from the root down: /a, /a/b, /a/b/c for a/b/c run in /.
TESSEL_INLINE std::vector<std::filesystem::path> path_prefixes(const std::filesystem::path& path);

// Which part of `path` caused `ec` (met looking at or opening it), as " (...)", or "" where the
// system's text says it all: the directory this user may not search, the part of the path that is
// a file where a directory was needed, the missing directory on the way.
TESSEL_INLINE std::string cause_in_path(const std::filesystem::path& path, std::error_code ec,
                                        bool writing);

}  // namespace detail

// Looks at `path` with std::filesystem::status and says whether it is there and of `kind`, and
// if not, why, with the system's text for the error.
TESSEL_INLINE path_access check_path(const std::filesystem::path& path, path_kind kind);

// Why opening `path` failed with errno `error` (set by open, fopen or gzopen): the system's text
// and, where it does not say it, the part of the path at fault.
TESSEL_INLINE std::string open_failure(const std::filesystem::path& path, int error, bool writing);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS

namespace detail {

TESSEL_INLINE std::string kind_name(std::filesystem::file_type t) {
  using std::filesystem::file_type;
  switch (t) {
    case file_type::regular:
      return "a regular file";
    case file_type::directory:
      return "a directory";
    case file_type::symlink:
      return "a symbolic link";
    case file_type::block:
      return "a block device";
    case file_type::character:
      return "a character device";
    case file_type::fifo:
      return "a FIFO";
    case file_type::socket:
      return "a socket";
    default:
      return "a file of an unknown kind";
  }
}

TESSEL_INLINE std::vector<std::filesystem::path> path_prefixes(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  if (ec) absolute = path;
  std::vector<std::filesystem::path> out;
  std::filesystem::path prefix;
  for (const auto& part : absolute) {
    if (part.empty()) continue;  // the empty part after a trailing separator
    prefix /= part;
    out.push_back(prefix);
  }
  return out;
}

TESSEL_INLINE std::string cause_in_path(const std::filesystem::path& path, std::error_code ec,
                                        bool writing) {
  const std::vector<std::filesystem::path> parts = path_prefixes(path);
  if (ec == std::errc::permission_denied) {
    // The first part the system refuses to look at lies in a directory this user may not search.
    for (std::size_t i = 1; i < parts.size(); ++i) {
      std::error_code e;
      (void)std::filesystem::status(parts[i], e);
      if (e == std::errc::permission_denied)
        return " (the user running this program may not search the directory '" +
               parts[i - 1].string() + "')";
    }
    // Every part can be looked at: the file itself is refused, or the directory to create it in.
    std::error_code e;
    if (writing && !std::filesystem::exists(path, e) && parts.size() > 1)
      return " (the user running this program may not create files in '" +
             parts[parts.size() - 2].string() + "')";
    return writing ? " (the user running this program may not write to it)"
                   : " (the user running this program may not read it)";
  }
  if (ec == std::errc::not_a_directory) {
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      std::error_code e;
      const std::filesystem::file_status st = std::filesystem::status(parts[i], e);
      if (!e && st.type() != std::filesystem::file_type::directory)
        return " ('" + parts[i].string() + "' is " + kind_name(st.type()) + ", not a directory)";
    }
  }
  if (ec == std::errc::no_such_file_or_directory) {
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      std::error_code e;
      if (std::filesystem::status(parts[i], e).type() == std::filesystem::file_type::not_found)
        return " (the directory '" + parts[i].string() + "' does not exist)";
    }
  }
  return "";
}

}  // namespace detail

TESSEL_INLINE path_access check_path(const std::filesystem::path& path, path_kind kind) {
  using status = path_access::status;
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec == std::errc::no_such_file_or_directory) return {status::missing, "does not exist"};
  if (ec == std::errc::not_a_directory)
    return {status::wrong_kind,
            "cannot be reached: " + ec.message() + detail::cause_in_path(path, ec, false)};
  if (ec)
    return {status::refused,
            "cannot be accessed: " + ec.message() + detail::cause_in_path(path, ec, false)};
  const bool is_directory = st.type() == std::filesystem::file_type::directory;
  if (kind == path_kind::directory && !is_directory)
    return {status::wrong_kind, "is " + detail::kind_name(st.type()) + ", not a directory",
            st.type()};
  if (kind == path_kind::file && is_directory)
    return {status::wrong_kind, "is a directory, not a file", st.type()};
  return {status::ok, {}, st.type()};
}

TESSEL_INLINE std::string open_failure(const std::filesystem::path& path, int error, bool writing) {
  if (error == 0) return "the system gave no reason";
  const std::error_code ec(error, std::generic_category());
  return ec.message() + detail::cause_in_path(path, ec, writing);
}

#endif

}  // namespace tessel::data
