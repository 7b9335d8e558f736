// IDX files: plain and gzip'd round trips, and the errors a user meets with a bad file.
#include <zlib.h>
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/data/idx.hpp>
#include <vector>

using Catch::Matchers::Contains;
using tessel::array;
using tessel::value_error;
namespace fs = std::filesystem;

namespace {

using tessel::testing::message_of;
using tessel::testing::temp_dir;


void write_bytes(const fs::path& p, const std::vector<unsigned char>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void write_gz_bytes(const fs::path& p, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(f);
}

std::vector<unsigned char> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The header of an unsigned-byte IDX file: 00 00 08 rank, then big-endian dimensions.
std::vector<unsigned char> idx_header(const std::vector<std::uint32_t>& dims,
                                      unsigned char type = 0x08) {
  std::vector<unsigned char> h{0, 0, type, static_cast<unsigned char>(dims.size())};
  for (const std::uint32_t d : dims) {
    for (const int shift : {24, 16, 8, 0}) h.push_back(static_cast<unsigned char>(d >> shift));
  }
  return h;
}

array<std::uint8_t> counting_array(std::vector<std::size_t> shape) {
  array<std::uint8_t> a(std::move(shape));
  for (std::size_t i = 0; i < a.values.size(); ++i)
    a.values[i] = static_cast<std::uint8_t>(i * 7 + 3);
  return a;
}


}  // namespace

TEST_CASE("idx: reads a plain file's big-endian shape and its bytes", "[idx][data]") {
  temp_dir dir;
  // 300 as a dimension checks the byte order (01 2c).
  std::vector<unsigned char> bytes = idx_header({300, 2});
  for (int i = 0; i < 600; ++i) bytes.push_back(static_cast<unsigned char>(i % 251));
  write_bytes(dir / "a-idx2-ubyte", bytes);
  const array<std::uint8_t> a = tessel::data::read_idx(dir / "a-idx2-ubyte");
  CHECK(a.shape == std::vector<std::size_t>{300, 2});
  REQUIRE(a.values.size() == 600);
  CHECK(a.values[0] == 0);
  CHECK(a.values[599] == 599 % 251);
}

TEST_CASE("idx: reads a gzip'd file (magic 1f 8b) to the same array", "[idx][data]") {
  temp_dir dir;
  const array<std::uint8_t> a = counting_array({4, 28, 28});
  tessel::data::write_idx(dir / "images-idx3-ubyte.gz", a);
  tessel::data::write_idx(dir / "images-idx3-ubyte", a);
  const auto gz = read_bytes(dir / "images-idx3-ubyte.gz");
  REQUIRE(gz.size() >= 2);
  CHECK((gz[0] == 0x1f && gz[1] == 0x8b));
  const auto plain = read_bytes(dir / "images-idx3-ubyte");
  CHECK(plain.size() == 16 + 4 * 28 * 28);
  CHECK(std::vector<unsigned char>(plain.begin(), plain.begin() + 16) == idx_header({4, 28, 28}));

  for (const char* name : {"images-idx3-ubyte.gz", "images-idx3-ubyte"}) {
    const array<std::uint8_t> b = tessel::data::read_idx(dir / name);
    CHECK(b.shape == a.shape);
    CHECK(b.values == a.values);
  }
}

TEST_CASE(
    "idx: labels (rank 1), a rank-0 file and an empty file of shape (0, "
    "28, 28)",
    "[idx][data]") {
  temp_dir dir;
  const array<std::uint8_t> labels({5}, {9, 0, 0, 3, 0});
  tessel::data::write_idx(dir / "labels-idx1-ubyte.gz", labels);
  const auto l = tessel::data::read_idx(dir / "labels-idx1-ubyte.gz");
  CHECK(l.shape == std::vector<std::size_t>{5});
  CHECK(l.values == labels.values);

  write_bytes(dir / "scalar", {0, 0, 8, 0, 42});
  const auto s = tessel::data::read_idx(dir / "scalar");
  CHECK(s.shape.empty());
  CHECK(s.values == std::vector<std::uint8_t>{42});

  tessel::data::write_idx(dir / "empty.gz", array<std::uint8_t>({0, 28, 28}));
  const auto e = tessel::data::read_idx(dir / "empty.gz");
  CHECK(e.shape == std::vector<std::size_t>{0, 28, 28});
  CHECK(e.values.empty());
}

TEST_CASE("idx: a missing file names its path", "[idx][data][error]") {
  temp_dir dir;
  const fs::path p = dir / "train-images-idx3-ubyte.gz";
  const auto msg = message_of([&] { tessel::data::read_idx(p); });
  // Built by appends: GCC 12 reports a false -Warray-bounds on `"'" + std::string&&` at -O3
  // (its bug 105329).
  std::string quoted = "'";
  quoted.append(p.string()).append("'");
  CHECK_THAT(msg, Contains(quoted) && Contains("does not exist") && Contains("check the path"));
}

TEST_CASE("idx: a directory is not a file", "[idx][data][error]") {
  temp_dir dir;
  const auto msg = message_of([&] { tessel::data::read_idx(dir.path); });
  CHECK_THAT(msg, Contains("is a directory") && Contains(dir.path.string()));
}

TEST_CASE(
    "idx: a truncated file says how many bytes the header needs and how "
    "many there are",
    "[idx][data][error]") {
  temp_dir dir;
  std::vector<unsigned char> bytes = idx_header({10, 28, 28});
  bytes.resize(bytes.size() + 1000, 7);  // 7840 data bytes expected

  SECTION("plain") {
    write_bytes(dir / "t", bytes);
    const auto msg = message_of([&] { tessel::data::read_idx(dir / "t"); });
    CHECK_THAT(msg, Contains("is truncated") && Contains("(10, 28, 28)") &&
                        Contains("needs 7856 bytes") && Contains("has 1016 bytes") &&
                        Contains("download it again"));
    CHECK_THAT(msg, !Contains("decompression"));
  }
  SECTION("gzip'd: the counts are of decompressed bytes") {
    write_gz_bytes(dir / "t.gz", bytes);
    const auto msg = message_of([&] { tessel::data::read_idx(dir / "t.gz"); });
    CHECK_THAT(msg, Contains("needs 7856 bytes") && Contains("has 1016 bytes") &&
                        Contains("after gzip decompression"));
  }
  SECTION("a gzip stream cut short") {
    std::vector<unsigned char> full = idx_header({10, 28, 28});
    for (int i = 0; i < 7840; ++i) full.push_back(static_cast<unsigned char>((i * 31) % 256));
    write_gz_bytes(dir / "full.gz", full);
    auto gz = read_bytes(dir / "full.gz");
    gz.resize(gz.size() / 2);
    write_bytes(dir / "cut.gz", gz);
    const auto msg = message_of([&] { tessel::data::read_idx(dir / "cut.gz"); });
    CHECK_THAT(msg, Contains("cut.gz") && (Contains("truncated") || Contains("corrupt")));
  }
  SECTION("in the header") {
    write_bytes(dir / "h", {0, 0, 8, 3, 0, 0});
    const auto msg = message_of([&] { tessel::data::read_idx(dir / "h"); });
    CHECK_THAT(msg, Contains("is truncated") && Contains("3 dimensions") &&
                        Contains("16-byte header") && Contains("has 6 bytes"));
  }
  SECTION("before the magic number ends") {
    write_bytes(dir / "m", {0, 0});
    const auto msg = message_of([&] { tessel::data::read_idx(dir / "m"); });
    CHECK_THAT(msg, Contains("is truncated") && Contains("4-byte magic number") &&
                        Contains("has 2 bytes"));
  }
}

TEST_CASE("idx: a file that is not IDX shows its first bytes", "[idx][data][error]") {
  temp_dir dir;
  write_bytes(dir / "x.zip", {0x50, 0x4b, 0x03, 0x04, 0, 0, 0, 0});
  const auto msg = message_of([&] { tessel::data::read_idx(dir / "x.zip"); });
  CHECK_THAT(msg, Contains("x.zip") && Contains("not an IDX file") && Contains("50 4b 03 04") &&
                      Contains("starts with 00 00"));
}

TEST_CASE("idx: an element type other than unsigned byte is named and refused",
          "[idx][data][error]") {
  temp_dir dir;
  std::vector<unsigned char> bytes = idx_header({2}, 0x0D);
  bytes.resize(bytes.size() + 8, 0);
  write_bytes(dir / "f", bytes);
  const auto msg = message_of([&] { tessel::data::read_idx(dir / "f"); });
  CHECK_THAT(msg, Contains("type code 0d") && Contains("float32") && Contains("only type code 08"));

  write_bytes(dir / "g", {0, 0, 0x42, 0});
  CHECK_THAT(message_of([&] { tessel::data::read_idx(dir / "g"); }),
             Contains("type code 42") && Contains("not an IDX type code"));
}

TEST_CASE("idx: a file longer than its header says is refused", "[idx][data][error]") {
  temp_dir dir;
  std::vector<unsigned char> bytes = idx_header({3});
  bytes.resize(bytes.size() + 4, 1);
  write_bytes(dir / "long", bytes);
  const auto msg = message_of([&] { tessel::data::read_idx(dir / "long"); });
  CHECK_THAT(msg, Contains("longer than its header says") && Contains("needs 11 bytes"));
}

TEST_CASE("idx: a corrupt gzip stream says so", "[idx][data][error]") {
  temp_dir dir;
  // A valid gzip header followed by bytes that are not a deflate stream.
  write_bytes(dir / "bad.gz",
              {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  const auto msg = message_of([&] { tessel::data::read_idx(dir / "bad.gz"); });
  CHECK_THAT(msg, Contains("bad.gz") && (Contains("corrupt") || Contains("truncated")));
}

TEST_CASE("idx: a gzip'd file is checked against its CRC-32 and length trailer",
          "[idx][data][error]") {
  temp_dir dir;
  // Stored (level 0) deflate blocks: a flipped bit in the data flips one value and inflate itself
  // sees nothing wrong, so only the trailer can tell.
  std::vector<unsigned char> full = idx_header({1000});
  for (int i = 0; i < 1000; ++i) full.push_back(static_cast<unsigned char>(i % 10));
  {
    gzFile f = gzopen((dir / "stored.gz").c_str(), "wb0");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, full.data(), static_cast<unsigned>(full.size())) ==
            static_cast<int>(full.size()));
    REQUIRE(gzclose(f) == Z_OK);
  }
  const auto gz = read_bytes(dir / "stored.gz");
  REQUIRE(tessel::data::read_idx(dir / "stored.gz").values.size() == 1000);
  auto flipped = gz;
  flipped[gz.size() - 8 - 100] ^= 0x04;  // a label 100 bytes before the trailer

  SECTION("a flipped bit with the trailer intact fails the CRC") {
    write_bytes(dir / "crc.gz", flipped);
    CHECK_THAT(message_of([&] { tessel::data::read_idx(dir / "crc.gz"); }),
               Contains("crc.gz") && Contains("corrupt") && Contains("incorrect data check") &&
                   Contains("download it again"));
  }
  SECTION("the trailer cut off: every data byte arrives, but nothing can be verified") {
    auto cut = gz;
    cut.resize(gz.size() - 8);
    write_bytes(dir / "cut.gz", cut);
    CHECK_THAT(message_of([&] { tessel::data::read_idx(dir / "cut.gz"); }),
               Contains("cut.gz") && Contains("truncated") && Contains("CRC-32") &&
                   Contains("download it again"));
  }
  SECTION("the trailer cut off and a bit flipped: refused, not loaded with a wrong label") {
    flipped.resize(gz.size() - 8);
    write_bytes(dir / "both.gz", flipped);
    CHECK_THAT(message_of([&] { tessel::data::read_idx(dir / "both.gz"); }),
               Contains("both.gz") && Contains("truncated") && Contains("CRC-32"));
  }
  SECTION("part of the trailer cut off") {
    auto cut = gz;
    cut.resize(gz.size() - 3);
    write_bytes(dir / "part.gz", cut);
    CHECK_THAT(message_of([&] { tessel::data::read_idx(dir / "part.gz"); }),
               Contains("part.gz") && Contains("truncated"));
  }
}

TEST_CASE("idx: write_idx refuses what the format cannot hold", "[idx][data][error]") {
  temp_dir dir;
  array<std::uint8_t> wrong({2, 3}, {1, 2, 3});
  CHECK_THAT(message_of([&] { tessel::data::write_idx(dir / "w", wrong); }),
             Contains("shape (2, 3)") && Contains("3 values"));
  const array<std::uint8_t> big({std::size_t{1} << 32, 0});
  CHECK_THAT(message_of([&] { tessel::data::write_idx(dir / "w", big); }),
             Contains("dimension 4294967296") && Contains("32-bit"));
  CHECK_THAT(
      message_of([&] { tessel::data::write_idx(dir / "no-such-dir" / "w", counting_array({1})); }),
      Contains("cannot be opened for writing"));
}

TEST_CASE("idx: a path through a file, or one the system refuses, says what is wrong",
          "[idx][data][error]") {
  temp_dir dir;
  fs::permissions(dir.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                fs::perms::others_read | fs::perms::others_exec);
  const fs::path file = dir / "labels.gz";
  tessel::data::write_idx(file, counting_array({3}));
  // A part of the path is a file: ENOTDIR, not "does not exist".
  CHECK_THAT(
      message_of([&] { tessel::data::read_idx(file / "x"); }),
      Contains("IDX file '" + (file / "x").string() + "' cannot be reached: Not a directory ('" +
               file.string() + "' is a regular file, not a directory)") &&
          !Contains("does not exist"));

  const fs::path locked = dir / "locked";
  fs::create_directory(locked);
  tessel::data::write_idx(locked / "a.gz", counting_array({3}));
  tessel::data::write_idx(locked / "unreadable.gz", counting_array({3}));
  fs::permissions(locked / "unreadable.gz", fs::perms::none);
  fs::permissions(locked, fs::perms::owner_all | fs::perms::others_exec);  // searchable only
  const std::string unreadable = tessel::testing::as_unprivileged_user(
      [&] { return message_of([&] { tessel::data::read_idx(locked / "unreadable.gz"); }); });
  const std::string not_writable = tessel::testing::as_unprivileged_user([&] {
    return message_of([&] { tessel::data::write_idx(locked / "new.gz", counting_array({3})); });
  });
  fs::permissions(locked, fs::perms::none);
  const std::string not_searchable = tessel::testing::as_unprivileged_user(
      [&] { return message_of([&] { tessel::data::read_idx(locked / "a.gz"); }); });
  fs::permissions(locked, fs::perms::owner_all);

  CHECK_THAT(unreadable, Contains("cannot open IDX file '" + (locked / "unreadable.gz").string() +
                                  "': Permission denied (the user running this program may not "
                                  "read it); change the permissions or run the program as a user "
                                  "who has them"));
  CHECK_THAT(not_writable, Contains("write_idx: '" + (locked / "new.gz").string() +
                                    "' cannot be opened for writing: Permission denied (the user "
                                    "running this program may not create files in '" +
                                    locked.string() + "')"));
  // Unchecked, exists() failed with EACCES and the file was reported as missing.
  CHECK_THAT(not_searchable, Contains("IDX file '" + (locked / "a.gz").string() +
                                      "' cannot be accessed: Permission denied (the user running "
                                      "this program may not search the directory '" +
                                      locked.string() + "')") &&
                                 !Contains("does not exist"));
}

TEST_CASE("idx: write_idx names the missing directory", "[idx][data][error]") {
  temp_dir dir;
  CHECK_THAT(
      message_of([&] { tessel::data::write_idx(dir / "no-such-dir" / "w", counting_array({1})); }),
      Contains("write_idx: '" + (dir / "no-such-dir" / "w").string() +
               "' cannot be opened for writing: No such file or directory (the directory '" +
               (dir / "no-such-dir").string() + "' does not exist)"));
}
