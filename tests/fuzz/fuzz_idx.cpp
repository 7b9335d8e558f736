// libFuzzer harness for tessel::data::read_idx (include/tessel/data/idx.hpp), which takes a path:
// the input is written to a file in a scratch directory and read back.
//
// Input: one mode byte, then the file's contents (the payload).
//   mode % 4 == 0  the payload as a plain file
//   mode % 4 == 1  the payload gzip-compressed by zlib; read both ways, they must agree (unless
//                  the payload is itself gzip'd, which the plain file's reading decompresses)
//   mode % 4 == 2  the payload written as it is to "input.gz": corrupt gzip streams (when it
//                  starts with 1f 8b) and whatever else gzopen makes of it
//   mode % 4 == 3  two parameter bytes c, f, then the payload gzip-compressed and damaged: the
//                  last c % 16 bytes cut off, and when f != 0 one bit (c / 16 % 8) flipped in the
//                  byte f positions from the end. A cut file must be refused; a file that loads
//                  must hold exactly what the plain payload holds (a gzip'd file with
//                  its trailer cut and a flipped bit loaded wrong labels silently).
//
// read_idx's documented error is tessel::value_error, whose message must name the file. Any other
// exception, a crash, a sanitizer report or a violated invariant (tessel_fuzz::fail) is a finding.
// On success the array must be consistent (values == product of the shape) and must survive
// write_idx + read_idx, plain and gzip'd.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/data/idx.hpp>
#include <vector>

#include "fuzz_support.hpp"

namespace {

using tessel::array;
using tessel_fuzz::fail;

// read_idx, with value_error turned into "no array" after checking that it names the file.
std::optional<array<std::uint8_t>> try_read(const std::filesystem::path& path) {
  try {
    array<std::uint8_t> a = tessel::data::read_idx(path);
    if (a.values.size() != array<std::uint8_t>::element_count(a.shape))
      fail("read_idx returned an array whose values do not match its shape");
    return a;
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find(path.string()) == std::string::npos)
      fail("a read_idx error does not name the file");
    return std::nullopt;
  }
}

bool same(const array<std::uint8_t>& a, const array<std::uint8_t>& b) {
  return a.shape == b.shape && a.values == b.values;
}

void round_trip(const array<std::uint8_t>& a) {
  for (const char* name : {"round_trip.gz", "round_trip"}) {
    const auto path = tessel_fuzz::scratch().path() / name;
    tessel::data::write_idx(path, a);  // cannot throw: rank <= 255, dimensions < 2^32
    const auto b = try_read(path);
    if (!b || !same(a, *b)) fail("write_idx + read_idx does not give back the array read");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned mode = data[0] % 4;
  const auto& dir = tessel_fuzz::scratch().path();
  const auto plain = dir / "input";
  const auto gz = dir / "input.gz";
  std::optional<array<std::uint8_t>> got;

  switch (mode) {
    case 0:
      tessel_fuzz::write_plain(plain, data + 1, size - 1);
      got = try_read(plain);
      break;
    case 1: {
      tessel_fuzz::write_plain(plain, data + 1, size - 1);
      tessel_fuzz::write_gzip(gz, data + 1, size - 1);
      const auto from_plain = try_read(plain);
      got = try_read(gz);
      // A payload that is itself gzip'd (1f 8b) is decompressed once more from the plain file.
      const bool payload_is_gzip = size >= 3 && data[1] == 0x1f && data[2] == 0x8b;
      if (!payload_is_gzip &&
          (from_plain.has_value() != got.has_value() || (got && !same(*got, *from_plain))))
        fail("the gzip'd file and the plain file read differently");
      break;
    }
    case 2:
      tessel_fuzz::write_plain(gz, data + 1, size - 1);
      got = try_read(gz);
      break;
    case 3: {
      if (size < 3) return 0;
      const std::uint8_t c = data[1];
      const std::uint8_t f = data[2];
      const std::uint8_t* payload = data + 3;
      const std::size_t payload_size = size - 3;
      tessel_fuzz::write_gzip(gz, payload, payload_size);
      std::vector<std::uint8_t> bytes;
      {
        std::FILE* in = std::fopen(gz.c_str(), "rb");
        if (in == nullptr) fail("cannot reopen the gzip'd input");
        std::uint8_t buf[4096];
        for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;)
          bytes.insert(bytes.end(), buf, buf + n);
        std::fclose(in);
      }
      const std::size_t cut = c % 16;
      bytes.resize(bytes.size() - std::min(cut, bytes.size()));
      if (f != 0 && f <= bytes.size())
        bytes[bytes.size() - f] ^= static_cast<std::uint8_t>(1u << (c / 16 % 8));
      tessel_fuzz::write_plain(gz, bytes.data(), bytes.size());
      got = try_read(gz);
      if (got) {
        if (cut > 0) fail("a gzip'd file with its end cut off was read without an error");
        tessel_fuzz::write_plain(plain, payload, payload_size);
        const auto from_plain = try_read(plain);
        if (!from_plain || !same(*got, *from_plain))
          fail("a damaged gzip'd file loaded with contents other than the original's");
      }
      break;
    }
  }
  if (got) round_trip(*got);
  return 0;
}
