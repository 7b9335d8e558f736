// Helpers the unit tests share: the message of the value_error a call throws, and a scratch
// directory that is removed at the end of a test.
#pragma once

#include <unistd.h>

#include <filesystem>
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

}  // namespace tessel::testing
