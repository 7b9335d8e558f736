// file_checksum: a CRC-32 (zlib's) of a whole file, kept in a 24-byte trailer after its content,
// so that a reader finds any damaged byte before a library that trusts the bytes parses them.
// libhdf5 does not survive every damaged file (a flipped byte in its metadata can crash it or
// send it into an endless loop): tessel checks the trailer of every file it wrote before handing
// the file to libhdf5. Readers that do not know the trailer ignore it: HDF5 reads a file up to
// the end its superblock records, and h5py (Keras) and libhdf5 accept bytes after it.
//
//   bytes [0, n)       the content
//   "TSLCRC32"         8 bytes
//   n                  uint64, little-endian
//   crc32 of [0, n)    uint32, little-endian
//   0                  uint32 (reserved)
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <streambuf>
#include <string>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"

namespace tessel::saving {

inline constexpr std::size_t checksum_trailer_size = 24;

namespace detail {
inline constexpr char checksum_magic[8] = {'T', 'S', 'L', 'C', 'R', 'C', '3', '2'};

// zlib's CRC-32 of `bytes` bytes in memory (every file tessel writes checks with it), going on
// from `crc`, the CRC-32 of the bytes before them (0 for none).
TESSEL_INLINE std::uint32_t crc32_of(const void* data, std::size_t bytes,
                                     std::uint32_t crc_before = 0);
}  // namespace detail

// A run of a file's bytes whose CRC-32 the writer already has (a dataset's values, which it
// checksummed before handing them to libhdf5): append_checksum combines it instead of reading it
// back.
struct known_crc {
  std::uint64_t offset = 0, bytes = 0;
  std::uint32_t crc = 0;
};

namespace detail {
// The CRC-32 of the file's first `size` bytes: the runs in `known` (sorted, inside the file, not
// overlapping; otherwise they are ignored and every byte is read) by zlib's crc32_combine, the
// bytes between them read. A 1 GB weights file is then checksummed from its few kilobytes of
// HDF5 metadata, not read back whole.
TESSEL_INLINE std::optional<std::uint32_t> crc32_of_file(std::istream& in, std::uint64_t size,
                                                         std::vector<known_crc> known);
}  // namespace detail

namespace detail {
// The same over `size` bytes in memory (a file's image before it is written).
TESSEL_INLINE std::optional<std::uint32_t> crc32_of_image(std::span<const unsigned char> image,
                                                          std::vector<known_crc> known);
// The trailer of a content of `size` bytes whose CRC-32 is `crc`: the magic, the size (8 bytes,
// little-endian), the CRC-32 (4 bytes), 4 bytes of zeros.
inline std::array<unsigned char, checksum_trailer_size> checksum_trailer(std::uint64_t size,
                                                                        std::uint32_t crc) {
  std::array<unsigned char, checksum_trailer_size> t{};
  std::memcpy(t.data(), checksum_magic, 8);
  for (std::size_t i = 0; i < 8; ++i) t[8 + i] = static_cast<unsigned char>(size >> (8 * i));
  for (std::size_t i = 0; i < 4; ++i) t[16 + i] = static_cast<unsigned char>(crc >> (8 * i));
  return t;
}
}  // namespace detail

// Appends the trailer to the file at `path` (its whole content so far). `known`: runs of it
// whose CRC-32 the caller has (see known_crc); the rest is read back.
inline void append_checksum(const std::filesystem::path& path,
                            const std::vector<known_crc>& known = {}) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  if (!f) throw runtime_error("Cannot open '" + path.string() + "' to append its checksum.");
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(f.tellg());
  const std::optional<std::uint32_t> crc = detail::crc32_of_file(f, size, known);
  if (!crc) throw runtime_error("Cannot read '" + path.string() + "' back to checksum it.");
  const auto t = detail::checksum_trailer(size, *crc);
  f.clear();
  f.seekp(0, std::ios::end);
  f.write(reinterpret_cast<const char*>(t.data()), static_cast<std::streamsize>(t.size()));
  f.flush();
  if (!f) throw runtime_error("Cannot append the checksum to '" + path.string() + "'.");
}

// A file's content size and CRC-32, as its trailer records them.
struct file_sum {
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;
  bool operator==(const file_sum&) const = default;
};
// What the trailer of the file at `path` records, if it has one.
TESSEL_INLINE std::optional<file_sum> read_checksum_trailer(const std::filesystem::path& path);

// What the trailer of a file says about it.
enum class checksum_state {
  none,     // no trailer (a file tessel did not write, or whose trailer is gone)
  ok,       // the content's CRC-32 is the one recorded
  damaged,  // the trailer is there and the content does not match it
};

// Checks the trailer of the file at `path`, `size` bytes long; `content` is set to the length of
// the content before it (the whole size without a trailer).
TESSEL_INLINE checksum_state verify_checksum(const std::filesystem::path& path, std::uint64_t size,
                                             std::uint64_t& content);

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/file_checksum.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
