// file_writer: what it writes in pieces, across its writeback windows, is the file byte for byte;
// a file that cannot be opened, written or synced is an error naming the file and what to do.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/saving/file_writer.hpp>

#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using tessel::saving::file_writer;
using tessel::testing::temp_dir;

std::string bytes_of(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed;
  for (auto& c : s) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  return s;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("file_writer writes its pieces in order, across several writeback windows") {
  temp_dir dir;
  // Three and a half windows, in pieces that straddle the windows' edges.
  const std::size_t n = 3 * file_writer::window_bytes + file_writer::window_bytes / 2 + 12345;
  const std::string data = bytes_of(n, 7);
  const fs::path p = dir.path / "f.bin";
  file_writer f(p, "checkpoint file");
  std::size_t at = 0, piece = 1;
  while (at < n) {
    const std::size_t k = std::min(piece, n - at);
    f.write(data.data() + at, k);
    at += k;
    piece = piece * 7 + 4093;  // 1 byte up to tens of MiB
  }
  CHECK(f.size() == n);
  f.finish();
  CHECK(fs::file_size(p) == n);
  CHECK(read(p) == data);
}

TEST_CASE("file_writer replaces what the file held") {
  temp_dir dir;
  const fs::path p = dir.path / "f.bin";
  {
    file_writer f(p);
    const std::string old = bytes_of(1000, 1);
    f.write(old.data(), old.size());
    f.finish();
  }
  file_writer f(p);
  f.write("abc", 3);
  f.finish();
  CHECK(read(p) == "abc");
}

TEST_CASE("file_writer names the file and the cause when it cannot write") {
  temp_dir dir;
  // A directory that does not exist.
  try {
    file_writer f(dir.path / "missing" / "f.bin", "checkpoint file");
    FAIL("no error");
  } catch (const tessel::runtime_error& e) {
    const std::string m = e.what();
    CHECK(m.find("Cannot write the checkpoint file '") != std::string::npos);
    CHECK(m.find("missing") != std::string::npos);
  }
  // A device that is always full: the write fails with ENOSPC.
  REQUIRE(fs::exists("/dev/full"));
  {
    file_writer f("/dev/full", "checkpoint file");
    const std::string data = bytes_of(1 << 16, 3);
    try {
      f.write(data.data(), data.size());
      FAIL("no error");
    } catch (const tessel::runtime_error& e) {
      const std::string m = e.what();
      CHECK(m.find("Cannot write the checkpoint file '/dev/full'") != std::string::npos);
      CHECK(m.find("is the disk full?") != std::string::npos);
    }
  }
}
