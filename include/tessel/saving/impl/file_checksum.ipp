// The definitions of saving/file_checksum.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include file_checksum.hpp.
namespace tessel::saving::detail {

TESSEL_INLINE std::uint32_t crc32_of(const void* data, std::size_t bytes,
                                     std::uint32_t crc_before) {
  uLong crc = crc_before;
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes a uInt length
    const uInt n = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

TESSEL_INLINE std::optional<std::uint32_t> crc32_of_file(std::istream& in, std::uint64_t size,
                                                         std::vector<known_crc> known) {
  std::sort(known.begin(), known.end(),
            [](const known_crc& a, const known_crc& b) { return a.offset < b.offset; });
  std::uint64_t end = 0;
  for (const known_crc& k : known) {
    if (k.offset < end || k.bytes > size || k.offset > size - k.bytes) {
      known.clear();
      break;
    }
    end = k.offset + k.bytes;
  }
  // At most 1 MiB, and no more than the file (a small file costs no 1 MiB fill).
  std::vector<char> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(size, 1u << 20)));
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::uint64_t at = 0;
  const auto read_to = [&](std::uint64_t stop) {
    in.clear();
    in.seekg(static_cast<std::streamoff>(at));
    while (at < stop) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(stop - at, buffer.size()));
      in.read(buffer.data(), static_cast<std::streamsize>(n));
      if (static_cast<std::size_t>(in.gcount()) != n) return false;
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(n));
      at += n;
    }
    return true;
  };
  for (const known_crc& k : known) {
    if (!read_to(k.offset)) return std::nullopt;
    crc = ::crc32_combine(crc, k.crc, static_cast<z_off_t>(k.bytes));
    at += k.bytes;
  }
  if (!read_to(size)) return std::nullopt;
  return static_cast<std::uint32_t>(crc);
}
// An input stream over bytes in memory (seekable, not copied).
class memory_streambuf : public std::streambuf {
 public:
  explicit memory_streambuf(std::span<const unsigned char> bytes) {
    char* b = const_cast<char*>(reinterpret_cast<const char*>(bytes.data()));
    setg(b, b, b + bytes.size());
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode) override {
    const off_type base = dir == std::ios_base::beg   ? 0
                          : dir == std::ios_base::cur ? gptr() - eback()
                                                      : egptr() - eback();
    const off_type to = base + off;
    if (to < 0 || to > egptr() - eback()) return pos_type(off_type(-1));
    setg(eback(), eback() + to, egptr());
    return pos_type(to);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }
};

TESSEL_INLINE std::optional<std::uint32_t> crc32_of_image(std::span<const unsigned char> image,
                                                          std::vector<known_crc> known) {
  memory_streambuf buffer(image);
  std::istream in(&buffer);
  return crc32_of_file(in, image.size(), std::move(known));
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

namespace detail {
// The trailer at the end of the `size` bytes of `in`, if they end with one.
TESSEL_INLINE std::optional<file_sum> trailer_of(std::istream& in, std::uint64_t size) {
  if (size < checksum_trailer_size) return std::nullopt;
  std::array<unsigned char, checksum_trailer_size> t{};
  in.seekg(static_cast<std::streamoff>(size - checksum_trailer_size));
  in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.size()));
  if (static_cast<std::size_t>(in.gcount()) != t.size() ||
      std::memcmp(t.data(), checksum_magic, 8) != 0)
    return std::nullopt;
  file_sum s;
  for (std::size_t i = 8; i-- > 0;) s.bytes = (s.bytes << 8) | t[8 + i];
  for (std::size_t i = 4; i-- > 0;) s.crc = (s.crc << 8) | t[16 + i];
  return s;
}
}  // namespace detail

TESSEL_INLINE std::optional<file_sum> read_checksum_trailer(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (!in) return std::nullopt;
  return detail::trailer_of(in, size);
}

TESSEL_INLINE checksum_state verify_checksum(const std::filesystem::path& path, std::uint64_t size,
                                             std::uint64_t& content) {
  content = size;
  std::ifstream in(path, std::ios::binary);
  const std::optional<file_sum> t = detail::trailer_of(in, size);
  if (!t) return checksum_state::none;
  if (t->bytes != size - checksum_trailer_size) return checksum_state::damaged;
  content = t->bytes;
  const std::optional<std::uint32_t> actual = detail::crc32_of_file(in, t->bytes, {});
  return actual && *actual == t->crc ? checksum_state::ok : checksum_state::damaged;
}

}  // namespace tessel::saving
