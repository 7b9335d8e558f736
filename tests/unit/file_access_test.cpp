// What tessel says about a path it cannot use: data::check_path and data::open_failure (the
// words of the IDX, Fashion-MNIST and CSVLogger errors), and CSVLogger's own error.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/data/file_access.hpp>
#include <tessel/trainer/callbacks.hpp>

using Catch::Matchers::Contains;
namespace fs = std::filesystem;
namespace data = tessel::data;
using tessel::testing::as_unprivileged_user;
using tessel::testing::temp_dir;

namespace {

// The message csv_logger throws when fit starts (on_train_begin opens the file).
std::string csv_logger_error(const fs::path& path) {
  tessel::callbacks::csv_logger log(path.string());
  try {
    log.on_train_begin({});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

}  // namespace

TEST_CASE("file access: check_path tells missing, wrong kind and refused apart",
          "[data][file_access][error]") {
  temp_dir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  const fs::path file = dir / "f";
  { std::ofstream(file) << "x"; }
  using status = data::path_access::status;

  CHECK(data::check_path(dir.path, data::path_kind::directory).ok());
  CHECK(data::check_path(file, data::path_kind::file).ok());
  CHECK(data::check_path(file, data::path_kind::file).type == fs::file_type::regular);

  const auto missing = data::check_path(dir / "nothing", data::path_kind::directory);
  CHECK(missing.state == status::missing);
  CHECK(missing.reason == "does not exist");

  const auto file_as_dir = data::check_path(file, data::path_kind::directory);
  CHECK(file_as_dir.state == status::wrong_kind);
  CHECK(file_as_dir.reason == "is a regular file, not a directory");
  const auto dir_as_file = data::check_path(dir.path, data::path_kind::file);
  CHECK(dir_as_file.state == status::wrong_kind);
  CHECK(dir_as_file.reason == "is a directory, not a file");

  const auto through_file = data::check_path(file / "g", data::path_kind::file);
  CHECK(through_file.state == status::wrong_kind);
  CHECK(through_file.reason == "cannot be reached: Not a directory ('" + file.string() +
                                   "' is a regular file, not a directory)");

  const fs::path locked = dir / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::none);
  const std::string refused = as_unprivileged_user([&] {
    const auto a = data::check_path(locked / "x", data::path_kind::file);
    return std::string(a.state == status::refused ? "refused: " : "not refused: ") + a.reason;
  });
  fs::permissions(locked, fs::perms::owner_all);
  CHECK(refused ==
        "refused: cannot be accessed: Permission denied (the user running this program "
        "may not search the directory '" +
            locked.string() + "')");
}

TEST_CASE("file access: open_failure names the part of the path at fault",
          "[data][file_access][error]") {
  temp_dir dir;
  CHECK(data::open_failure(dir / "a" / "b" / "c.csv", ENOENT, true) ==
        "No such file or directory (the directory '" + (dir / "a").string() + "' does not exist)");
  CHECK(data::open_failure(dir.path, EISDIR, true) == "Is a directory");
  CHECK(data::open_failure(dir / "x", 0, false) == "the system gave no reason");
}

TEST_CASE("callbacks: csv_logger says why its file cannot be opened", "[callbacks][error]") {
  temp_dir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  CHECK_THAT(csv_logger_error(dir / "no_such_dir" / "log.csv"),
             Contains("CSVLogger: cannot open '" + (dir / "no_such_dir" / "log.csv").string() +
                      "' for writing: No such file or directory (the directory '" +
                      (dir / "no_such_dir").string() +
                      "' does not exist). Give it the path of "
                      "a file in a directory that exists"));
  CHECK_THAT(csv_logger_error(dir.path), Contains("CSVLogger: cannot open '" + dir.path.string() +
                                                  "' for writing: Is a directory."));
  // dir is root's (or this user's) and others may not write in it.
  const std::string denied =
      as_unprivileged_user([&] { return csv_logger_error(dir / "log.csv"); });
  if (::geteuid() == 0)
    CHECK_THAT(denied, Contains("CSVLogger: cannot open '" + (dir / "log.csv").string() +
                                "' for writing: Permission denied (the user running this program "
                                "may not create files in '" +
                                dir.path.string() + "')"));
  fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string read_only =
      as_unprivileged_user([&] { return csv_logger_error(dir / "log.csv"); });
  fs::permissions(dir.path, fs::perms::owner_all);
  CHECK_THAT(read_only, Contains("Permission denied (the user running this program may not "));
}
