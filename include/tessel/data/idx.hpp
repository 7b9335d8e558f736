#pragma once
// IDX files (the MNIST and Fashion-MNIST format), plain or gzip'd, read into a host array (and
// written from one).
// Needs zlib: link with -lz.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "array.hpp"
#include "file_access.hpp"

namespace tessel::data {

namespace detail {

// gzopen reads plain files too (gzdirect), so one code path serves .gz and uncompressed files.
class gz_reader {
 public:
  explicit gz_reader(const std::filesystem::path& path);
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;
  ~gz_reader() {
    if (file_ != nullptr) gzclose(file_);
  }

  // Reads up to n bytes; fewer only at the end of the data. A corrupt stream throws.
  std::size_t read(void* dst, std::size_t n);

  // At the end of the data: a gzip stream must have ended cleanly, its CRC-32 and length
  // trailer read and matched. zlib reports a stream cut short (even by its 8-byte trailer
  // alone, when every data byte arrived) only through gzerror and gzclose, never as a failed
  // read: without this check a file whose trailer is gone and whose data has a flipped bit
  // would load with wrong values.
  void finish();

  std::size_t bytes_read() const { return read_; }
  // Says how the byte counts in messages were measured.
  std::string size_note() const {
    return gzdirect(file_) ? std::string{} : std::string(" (after gzip decompression)");
  }

 private:
  std::filesystem::path path_;
  gzFile file_ = nullptr;
  std::size_t read_ = 0;
};

// The IDX element types (third magic byte), for messages.
TESSEL_INLINE const char* idx_type_name(unsigned code);

TESSEL_INLINE std::string hex_bytes(const unsigned char* b, std::size_t n);

}  // namespace detail

// Reads an IDX file of unsigned bytes (type code 0x08, as MNIST and Fashion-MNIST images and
// labels are) into an array with the file's shape; gzip'd files (magic 1f 8b) are decompressed.
// Throws value_error naming the file when it is missing, truncated, not IDX or of another type,
// or when a gzip stream fails its CRC-32 and length check or ends before them.
TESSEL_INLINE array<std::uint8_t> read_idx(const std::filesystem::path& path);

// Writes a as an IDX file of unsigned bytes, gzip'd when the path ends in ".gz" (the form
// read_idx and the MNIST distributions use). Throws value_error when a dimension does not fit
// the format (rank <= 255, each dimension < 2^32) or the file cannot be written.
TESSEL_INLINE void write_idx(const std::filesystem::path& path, const array<std::uint8_t>& a);

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS

namespace detail {

TESSEL_INLINE gz_reader::gz_reader(const std::filesystem::path& path) : path_(path) {
  const path_access access = check_path(path, path_kind::file);
  if (access.missing()) {
    std::error_code ec;
    throw value_error("IDX file '" + path.string() +
                      "' does not exist; check the path (relative paths start at the current "
                      "directory, '" +
                      std::filesystem::current_path(ec).string() + "')");
  }
  if (access.type == std::filesystem::file_type::directory) {
    throw value_error("'" + path.string() +
                      "' is a directory; pass the path of an IDX file inside it");
  }
  if (!access.ok()) {
    throw value_error("IDX file '" + path.string() + "' " + access.reason +
                      "; check the path and its permissions");
  }
  errno = 0;
  file_ = gzopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    const int error = errno;
    throw value_error(
        "cannot open IDX file '" + path.string() +
        "': " + (error ? open_failure(path, error, false) : "zlib could not allocate its state") +
        (error == EACCES || error == EPERM
             ? "; change the permissions or run the program as a user who has them"
             : ""));
  }
  // A larger buffer than zlib's 8 KiB default: the training images are 47 MB decompressed.
  gzbuffer(file_, 1u << 17);
}

TESSEL_INLINE std::size_t gz_reader::read(void* dst, std::size_t n) {
  std::size_t total = 0;
  auto* out = static_cast<unsigned char*>(dst);
  while (total < n) {
    const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - total, INT_MAX / 2));
    const int got = gzread(file_, out + total, chunk);
    if (got < 0) {
      int code = Z_OK;
      const char* msg = gzerror(file_, &code);
      throw value_error("IDX file '" + path_.string() + "' is corrupt (zlib: " + msg +
                        "); download it again");
    }
    if (got == 0) break;
    total += static_cast<std::size_t>(got);
  }
  read_ += total;
  return total;
}

TESSEL_INLINE void gz_reader::finish() {
  int code = Z_OK;
  const std::string msg = gzerror(file_, &code);
  const int closed = gzclose(std::exchange(file_, nullptr));
  if (code == Z_BUF_ERROR || closed == Z_BUF_ERROR)
    throw value_error("IDX file '" + path_.string() +
                      "' is truncated: its gzip stream ends before its CRC-32 and length "
                      "trailer, so its contents cannot be verified (zlib: " +
                      (msg.empty() ? "unexpected end of file" : msg) + "); download it again");
  if (code != Z_OK || closed != Z_OK)
    throw value_error("IDX file '" + path_.string() + "' is corrupt (zlib: " +
                      (msg.empty() ? "error " + std::to_string(closed) : msg) +
                      "); download it again");
}

TESSEL_INLINE const char* idx_type_name(unsigned code) {
  switch (code) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return nullptr;
  }
}

TESSEL_INLINE std::string hex_bytes(const unsigned char* b, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b[i]);
    s += (i ? " " : "") + std::string(buf);
  }
  return s;
}

}  // namespace detail

TESSEL_INLINE array<std::uint8_t> read_idx(const std::filesystem::path& path) {
  detail::gz_reader in(path);
  const std::string name = "IDX file '" + path.string() + "'";

  // Magic: two zero bytes, the element type code, the number of dimensions.
  std::array<unsigned char, 4> magic{};
  const std::size_t got_magic = in.read(magic.data(), magic.size());
  if (got_magic < magic.size()) {
    throw value_error(
        name + " is truncated: an IDX file starts with a 4-byte magic number, but the file has " +
        std::to_string(got_magic) + " bytes" + in.size_note() + "; download it again");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    throw value_error(
        "'" + path.string() + "' is not an IDX file: it starts with bytes " +
        detail::hex_bytes(magic.data(), magic.size()) +
        ", but an IDX file starts with 00 00, a type code (08 for unsigned bytes) and the "
        "number of dimensions");
  }
  if (magic[2] != 0x08) {
    const char* type = detail::idx_type_name(magic[2]);
    throw value_error(name + " has element type code " + detail::hex_bytes(&magic[2], 1) + " (" +
                      (type ? type : "not an IDX type code") +
                      "); read_idx reads only type code 08 (unsigned byte), the type of MNIST and "
                      "Fashion-MNIST files");
  }

  const std::size_t rank = magic[3];
  std::vector<unsigned char> header(4 * rank);
  const std::size_t header_bytes = 4 + header.size();
  if (in.read(header.data(), header.size()) < header.size()) {
    throw value_error(name + " is truncated: its magic number says " + std::to_string(rank) +
                      " dimensions, which need a " + std::to_string(header_bytes) +
                      "-byte header, but the file has " + std::to_string(in.bytes_read()) +
                      " bytes" + in.size_note() + "; download it again");
  }
  std::vector<std::size_t> shape(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const unsigned char* b = &header[4 * d];  // big-endian
    shape[d] =
        (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
  }
  const std::optional<std::size_t> counted = tessel::detail::checked_element_count(shape);
  if (!counted) {
    throw value_error(name + " has dimensions " + shape_to_string(shape) +
                      " whose product overflows; the header is corrupt, download the file again");
  }
  const std::size_t count = *counted;

  // Grow the buffer as data arrives rather than trusting the header: a corrupt header must not
  // allocate gigabytes before the truncation check can report it. It starts at 64 KiB and
  // doubles (about ten growths for the 47 MB training images), so a short file whose header
  // claims a large shape costs no 16 MiB fill either (the fuzzer's most frequent input).
  array<std::uint8_t> out;
  out.shape = shape;
  std::size_t have = 0;
  out.values.resize(std::min<std::size_t>(count, std::size_t{1} << 16));
  while (have < count) {
    if (have == out.values.size()) out.values.resize(std::min(count, 2 * out.values.size()));
    const std::size_t want = out.values.size() - have;
    const std::size_t got = in.read(out.values.data() + have, want);
    have += got;
    if (got < want) break;
  }
  if (have < count) {
    throw value_error(name + " is truncated: its header says shape " + shape_to_string(shape) +
                      " of unsigned bytes, which needs " + std::to_string(header_bytes + count) +
                      " bytes, but the file has " + std::to_string(header_bytes + have) + " bytes" +
                      in.size_note() + "; download it again");
  }
  unsigned char extra = 0;
  if (in.read(&extra, 1) != 0) {
    throw value_error(name + " is longer than its header says: shape " + shape_to_string(shape) +
                      " of unsigned bytes needs " + std::to_string(header_bytes + count) +
                      " bytes, but the file has more" + in.size_note() +
                      "; it is not a valid IDX file (is it the right file?)");
  }
  in.finish();
  return out;
}

TESSEL_INLINE void write_idx(const std::filesystem::path& path, const array<std::uint8_t>& a) {
  const std::string name = "write_idx: '" + path.string() + "'";
  if (a.shape.size() > 255) {
    throw value_error(name + ": IDX files hold at most 255 dimensions, the array has " +
                      std::to_string(a.shape.size()));
  }
  if (element_count(a.shape, name) != a.values.size()) {
    throw value_error(name + ": the array has shape " + shape_to_string(a.shape) + " but " +
                      std::to_string(a.values.size()) + " values");
  }
  std::vector<unsigned char> header{0, 0, 0x08, static_cast<unsigned char>(a.shape.size())};
  for (const std::size_t d : a.shape) {
    if (d > 0xFFFFFFFFu) {
      throw value_error(name + ": dimension " + std::to_string(d) + " of shape " +
                        shape_to_string(a.shape) + " does not fit an IDX file's 32-bit sizes");
    }
    for (const int shift : {24, 16, 8, 0}) header.push_back(static_cast<unsigned char>(d >> shift));
  }
  // "T" writes without compression through the same gz calls.
  errno = 0;
  gzFile f = gzopen(path.c_str(), path.extension() == ".gz" ? "wb6" : "wbT");
  if (f == nullptr) {
    const int error = errno;
    throw value_error(name + " cannot be opened for writing: " +
                      (error ? open_failure(path, error, true)
                             : std::string("zlib could not allocate its state")));
  }
  bool ok = gzwrite(f, header.data(), static_cast<unsigned>(header.size())) ==
            static_cast<int>(header.size());
  for (std::size_t at = 0; ok && at < a.values.size();) {
    const auto chunk =
        static_cast<unsigned>(std::min<std::size_t>(a.values.size() - at, INT_MAX / 2));
    ok = gzwrite(f, a.values.data() + at, chunk) == static_cast<int>(chunk);
    at += chunk;
  }
  if (gzclose(f) != Z_OK || !ok)
    throw value_error(name + " could not be written completely (disk full?)");
}

#endif

}  // namespace tessel::data
