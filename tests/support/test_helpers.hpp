// Helpers the unit tests share: the message of the value_error a call throws, a scratch
// directory that is removed at the end of a test, and a way to run a check as a user without
// privileges.
#pragma once

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <tessel/core/errors.hpp>

namespace tessel::testing {

// What f throws as tessel::value_error, or "no exception".
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const value_error& e) {
    return e.what();
  }
  return "no exception";
}

// A fresh directory under the system temp dir, removed with its files at the end of the test.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    static int count = 0;
    path = std::filesystem::temp_directory_path() /
           ("tessel_test_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    std::filesystem::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

// Runs `body` in a child process (fork) and returns the string it returns, through a pipe,
// followed by " (the child process ended on signal N)" if it died of one. The child ends with
// _exit: no destructors, no MPI_Finalize (the parent owns those). body must not use Catch's
// assertions (the child is not the test's process).
inline std::string in_child_process(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return std::string("pipe failed: ") + std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork failed: ") + std::strerror(errno);
  if (pid == 0) {
    ::close(fds[0]);
    const std::string out = body();
    for (std::size_t at = 0; at < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string result;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    result.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return result + " (the child process ended on signal " + std::to_string(WTERMSIG(status)) + ")";
  return result;
}

// Runs f as a user without privileges and returns what it returns. Root ignores permission bits,
// so a test of "permission denied" run as root (as CI runs the tests) would see every file: there
// f runs in a child process that has dropped to the user and group nobody (65534), and its result
// comes back through a pipe. Any other user runs f in this process. f must not use Catch's
// assertions (the child is not the test's process); an exception it throws comes back as
// "exception: <what>". The directories f looks at must be searchable by nobody (temp_dir's are).
inline std::string as_unprivileged_user(const std::function<std::string()>& f) {
  const auto run = [&]() -> std::string {
    try {
      return f();
    } catch (const std::exception& e) {
      return std::string("exception: ") + e.what();
    }
  };
  if (::geteuid() != 0) return run();
  return in_child_process([&]() -> std::string {
    const gid_t nobody_group = 65534;
    const uid_t nobody = 65534;
    if (::setgroups(0, nullptr) != 0 ||
        ::setresgid(nobody_group, nobody_group, nobody_group) != 0 ||
        ::setresuid(nobody, nobody, nobody) != 0)
      return std::string("could not drop to the user nobody: ") + std::strerror(errno);
    return run();
  });
}

}  // namespace tessel::testing
