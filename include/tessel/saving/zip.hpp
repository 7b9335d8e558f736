// zip: the little of the ZIP format a .keras archive needs. The writer stores its entries
// uncompressed (ZIP_STORED, Python's zipfile default, which Keras keeps), each with zlib's CRC-32;
// the reader takes stored entries and DEFLATE ones (through zlib's raw inflate: other tools
// recompress archives), and checks every size, offset and CRC-32 against the file before
// trusting it, so that a truncated or damaged archive is an error naming the file and the entry,
// never a crash. Archives of more than 4 GiB (ZIP64) are refused by name.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "file_checksum.hpp"

namespace tessel::saving::zip {

namespace detail {
inline constexpr std::uint32_t local_signature = 0x04034b50;
inline constexpr std::uint32_t central_signature = 0x02014b50;
inline constexpr std::uint32_t end_signature = 0x06054b50;
inline constexpr std::size_t local_header_size = 30, central_header_size = 46, end_size = 22;

TESSEL_INLINE void put(std::string& out, std::uint64_t v, std::size_t bytes);
TESSEL_INLINE std::uint64_t get(const unsigned char* p, std::size_t bytes);
}  // namespace detail

// A time as ZIP's MS-DOS fields (local time, two-second resolution); 1980-01-01 00:00 is what
// Python's zipfile gives an entry written through ZipFile.open (Keras's config and metadata).
struct dos_time {
  std::uint16_t time = 0;
  std::uint16_t date = (0 << 9) | (1 << 5) | 1;
  static dos_time now();
};

// Writes an archive of stored entries to an open stream, as Python's zipfile does (version 2.0,
// made on Unix, mode 0600 for each entry).
class writer {
 public:
  explicit writer(std::ostream& out, std::string file) : out_(out), file_(std::move(file)) {}

  // An entry whose content is `data`.
  void add(std::string_view name, std::string_view data, dos_time when = {}) {
    begin(name, when);
    write(data.data(), data.size());
    end();
  }
  // An entry whose content is the file at `path`, copied in blocks.
  void add_file(std::string_view name, const std::filesystem::path& path, dos_time when);
  // The central directory and its end record.
  void finish();

 private:
  struct entry {
    std::string name;
    dos_time when;
    std::uint64_t offset = 0, size = 0;
    std::uint32_t crc = 0;
  };
  void check_limit(std::uint64_t n, const std::string& what) const;
  // Every byte goes through here: the first failure's system error (errno, which the stream's
  // write left) is kept for the message, which names the cause (no space, permission, I/O).
  void raw(const char* data, std::size_t n) {
    if (out_) errno = 0;
    out_.write(data, static_cast<std::streamsize>(n));
    if (!out_ && error_ == 0) error_ = errno != 0 ? errno : EIO;
    offset_ += n;
  }
  // ": No space left on device (is the disk full?)", or what the system said.
  std::string cause() const;
  void begin(std::string_view name, dos_time when);
  void write(const char* data, std::size_t n) {
    entry& e = entries_.back();
    e.crc = saving::detail::crc32_of(data, n, e.crc);
    e.size += n;
    raw(data, n);
  }
  // Sizes and CRC are known once the data is written: the local header is written again.
  void end();
  static std::string header(const entry& e);
  std::ostream& out_;
  std::string file_;
  std::vector<entry> entries_;
  std::uint64_t offset_ = 0;
  std::streampos header_at_{};
  int error_ = 0;
};

// An entry as the central directory describes it.
struct entry_info {
  std::string name;
  std::uint16_t method = 0;  // 0 stored, 8 deflate
  std::uint32_t crc = 0;
  std::uint64_t compressed = 0, size = 0, offset = 0;
};

// Reads an archive: its directory when opened, an entry's content when asked (checked against
// its CRC-32). Every error names the archive, and the entry where there is one.
class reader {
 public:
  explicit reader(const std::filesystem::path& path, std::string where = "load");
  const std::vector<entry_info>& entries() const noexcept { return entries_; }
  const entry_info* find(std::string_view name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  // The named entry's content; an error if it is missing (`what` says what it holds).
  std::string read(std::string_view name, std::string_view what);
  std::string read(const entry_info& e);

 private:
  std::string bytes_at(std::uint64_t at, std::uint64_t n, const std::string& what);
  void read_directory();
  // zlib's raw inflate (no zlib or gzip header, as ZIP's DEFLATE entries are).
  static std::string inflate(const std::string& in, const entry_info& e, const std::string& where);
  std::filesystem::path path_;
  std::string head_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
  std::vector<entry_info> entries_;
};

}  // namespace tessel::saving::zip

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/zip.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
