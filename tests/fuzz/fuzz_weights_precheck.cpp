// libFuzzer harness for saving::check_weights_file (include/tessel/saving/weights_file.hpp): what
// tessel checks of a .weights.h5 file before libhdf5 reads it (its size, the CRC-32 trailer of
// file_checksum.hpp, HDF5's signature, the end of file its superblock records). The input is
// never handed to libhdf5, which is not robust against damaged files: what passes these checks
// is libhdf5's to read (docs/checkpoints.md).
//
// Input: one mode byte, then the payload.
//   mode % 3 == 0  the payload as the file
//   mode % 3 == 1  the payload with a trailer of its CRC-32 appended (append_checksum), as tessel
//                  writes every weights file: the checks after the trailer's see the payload
//   mode % 3 == 2  three parameter bytes a, b, c, then the payload with its trailer, and one bit
//                  (c % 8) flipped in the byte at (a + 256 b) modulo the file's size
//
// The documented error is tessel::value_error, whose message must name the file. Any other
// exception, a crash or a sanitizer report is a finding, and so is an accepted file that
//   - is empty or does not start with HDF5's signature,
//   - had a bit of its checksummed content flipped (mode 2: CRC-32 finds every one-bit error),
//   - is shorter than its superblock (versions 0-3, offsets of 2, 4 or 8 bytes) says, computed
//     here again with 128-bit sums, or too short to hold that superblock's end-of-file address.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/file_checksum.hpp>
#include <tessel/saving/weights_file.hpp>
#include <vector>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;

namespace {

std::vector<unsigned char> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::uint64_t little_endian(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

// What an accepted file must be (the harness's own reading of HDF5's superblock).
void check_accepted(const std::vector<unsigned char>& f) {
  static constexpr unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (f.size() < 8 || std::memcmp(f.data(), signature, 8) != 0)
    fail("a file without HDF5's signature was accepted");
  if (f.size() < 12) fail("a file too short for a superblock was accepted");
  const unsigned version = f[8];
  std::size_t offsets = 0, base_at = 0, eof_at = 0;
  if (version <= 1) {
    offsets = f.size() > 13 ? f[13] : 0;
    base_at = version == 0 ? 24 : 28;
  } else if (version <= 3) {
    offsets = f[9];
    base_at = 12;
  } else {
    return;  // a later format: libhdf5's to check
  }
  if (version <= 1 && f.size() <= 13) fail("a file cut inside its superblock was accepted");
  if (offsets != 2 && offsets != 4 && offsets != 8) return;
  eof_at = base_at + 2 * offsets;
  if (eof_at + offsets > f.size()) fail("a file cut before its end-of-file address was accepted");
  const unsigned __int128 end =
      static_cast<unsigned __int128>(little_endian(&f[base_at], offsets)) +
      little_endian(&f[eof_at], offsets);
  if (end > f.size()) fail("a file shorter than its superblock says was accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const unsigned mode = data[0] % 3;
  const std::size_t skip = mode == 2 ? 4 : 1;
  if (size < skip) return 0;
  const auto path = tessel_fuzz::scratch().path() / "input.weights.h5";
  tessel_fuzz::write_plain(path, data + skip, size - skip);
  const std::size_t content = size - skip;
  bool flipped_content = false;
  if (mode != 0) tessel::saving::append_checksum(path);
  if (mode == 2) {
    std::vector<unsigned char> f = read_all(path);
    const std::size_t at = (data[1] + 256u * data[2]) % f.size();
    f[at] ^= static_cast<unsigned char>(1u << (data[3] % 8));
    flipped_content = at < content;
    tessel_fuzz::write_plain(path, f.data(), f.size());
  }
  try {
    tessel::saving::check_weights_file(path, "load_weights");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find(path.string()) == std::string::npos)
      fail("a check_weights_file error does not name the file");
    return 0;
  }
  if (flipped_content) fail("a file with a flipped bit under its checksum was accepted");
  check_accepted(read_all(path));
  return 0;
}
