// The definitions of saving/zip.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include zip.hpp.
namespace tessel::saving::zip::detail {

TESSEL_INLINE void put(std::string& out, std::uint64_t v, std::size_t bytes) {
  for (std::size_t i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

TESSEL_INLINE std::uint64_t get(const unsigned char* p, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
}  // namespace tessel::saving::zip::detail

namespace tessel::saving::zip {

TESSEL_INLINE auto dos_time::now() -> dos_time {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  dos_time d;
  d.time = static_cast<std::uint16_t>((tm.tm_hour << 11) | (tm.tm_min << 5) | (tm.tm_sec / 2));
  d.date =
      static_cast<std::uint16_t>(((tm.tm_year - 80) << 9) | ((tm.tm_mon + 1) << 5) | tm.tm_mday);
  return d;
}

TESSEL_INLINE void writer::add_file(std::string_view name, const std::filesystem::path& path,
                                    dos_time when) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw runtime_error(file_ + ": cannot read '" + path.string() + "' to archive it");
  begin(name, when);
  std::vector<char> buffer(std::size_t{4} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    write(buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw runtime_error(file_ + ": cannot read '" + path.string() + "' to archive it");
  end();
}

TESSEL_INLINE void writer::finish() {
  const std::uint64_t start = offset_;
  std::string cd;
  for (const entry& e : entries_) {
    detail::put(cd, detail::central_signature, 4);
    detail::put(cd, (3 << 8) | 20, 2);  // made by: Unix, 2.0
    detail::put(cd, 20, 2);             // needed: 2.0
    detail::put(cd, 0, 2);              // flags
    detail::put(cd, 0, 2);              // stored
    detail::put(cd, e.when.time, 2);
    detail::put(cd, e.when.date, 2);
    detail::put(cd, e.crc, 4);
    detail::put(cd, e.size, 4);
    detail::put(cd, e.size, 4);
    detail::put(cd, e.name.size(), 2);
    detail::put(cd, 0, 2);  // extra
    detail::put(cd, 0, 2);  // comment
    detail::put(cd, 0, 2);  // disk
    detail::put(cd, 0, 2);  // internal attributes
    detail::put(cd, std::uint64_t{0600} << 16, 4);
    detail::put(cd, e.offset, 4);
    cd += e.name;
  }
  const std::uint64_t cd_size = cd.size();
  check_limit(start, "the archive");
  detail::put(cd, detail::end_signature, 4);
  detail::put(cd, 0, 4);  // disk numbers
  detail::put(cd, entries_.size(), 2);
  detail::put(cd, entries_.size(), 2);
  detail::put(cd, cd_size, 4);
  detail::put(cd, start, 4);
  detail::put(cd, 0, 2);  // comment
  raw(cd.data(), cd.size());
  out_.flush();
  if (!out_) throw runtime_error(file_ + ": cannot write the archive" + cause());
}

TESSEL_INLINE std::string writer::cause() const {
  const int e = error_ != 0 ? error_ : EIO;
  return std::string(": ") + std::strerror(e) +
         (e == ENOSPC || e == EDQUOT ? " (is the disk full?)" : "");
}

TESSEL_INLINE void writer::check_limit(std::uint64_t n, const std::string& what) const {
  if (n >= std::numeric_limits<std::uint32_t>::max())
    throw value_error(file_ + ": " + what +
                      " is 4 GiB or larger, which needs ZIP64; tessel writes archives below "
                      "4 GiB. Save the weights alone (save_weights) instead.");
}

TESSEL_INLINE void writer::begin(std::string_view name, dos_time when) {
  entries_.push_back({std::string(name), when, offset_, 0, 0});
  header_at_ = out_.tellp();
  raw(header(entries_.back()).data(), detail::local_header_size + name.size());
}

TESSEL_INLINE void writer::end() {
  entry& e = entries_.back();
  check_limit(e.size, "entry '" + e.name + "'");
  const auto here = out_.tellp();
  out_.seekp(header_at_);
  const std::string h = header(e);
  out_.write(h.data(), static_cast<std::streamsize>(h.size()));
  out_.seekp(here);
  if (!out_) throw runtime_error(file_ + ": cannot write entry '" + e.name + "'" + cause());
}

TESSEL_INLINE std::string writer::header(const entry& e) {
  std::string h;
  detail::put(h, detail::local_signature, 4);
  detail::put(h, 20, 2);
  detail::put(h, 0, 2);
  detail::put(h, 0, 2);
  detail::put(h, e.when.time, 2);
  detail::put(h, e.when.date, 2);
  detail::put(h, e.crc, 4);
  detail::put(h, e.size, 4);
  detail::put(h, e.size, 4);
  detail::put(h, e.name.size(), 2);
  detail::put(h, 0, 2);
  return h + e.name;
}

TESSEL_INLINE reader::reader(const std::filesystem::path& path, std::string where)
    : path_(path), head_(std::move(where) + ": cannot load '" + path.string() + "': ") {
  in_.open(path, std::ios::binary);
  if (!in_) throw value_error(head_ + "it cannot be opened.");
  in_.seekg(0, std::ios::end);
  size_ = static_cast<std::uint64_t>(in_.tellg());
  read_directory();
}

TESSEL_INLINE std::string reader::read(std::string_view name, std::string_view what) {
  const entry_info* e = find(name);
  if (e == nullptr) {
    std::string have;
    for (const auto& x : entries_) have += (have.empty() ? "" : ", ") + x.name;
    throw value_error(head_ + "the archive has no entry '" + std::string(name) + "' (" +
                      std::string(what) + "); its entries: " + (have.empty() ? "none" : have) +
                      ". Is it a .keras file?");
  }
  return read(*e);
}

TESSEL_INLINE std::string reader::read(const entry_info& e) {
  const std::string where = head_ + "entry '" + e.name + "': ";
  const std::string raw = bytes_at(e.offset, detail::local_header_size, where + "its header");
  const auto* h = reinterpret_cast<const unsigned char*>(raw.data());
  if (detail::get(h, 4) != detail::local_signature)
    throw value_error(where + "no local header at offset " + std::to_string(e.offset) +
                      " (the archive is damaged).");
  const std::uint64_t data_at =
      e.offset + detail::local_header_size + detail::get(h + 26, 2) + detail::get(h + 28, 2);
  const std::string stored = bytes_at(data_at, e.compressed, where + "its data");
  std::string out;
  if (e.method == 0) {
    if (e.compressed != e.size)
      throw value_error(where + "a stored entry whose sizes differ (the archive is damaged).");
    out = stored;
  } else {
    out = inflate(stored, e, where);
  }
  if (saving::detail::crc32_of(out.data(), out.size()) != e.crc)
    throw value_error(where +
                      "its content does not match its CRC-32 (flipped or overwritten bytes in "
                      "the archive). Use another copy of the file.");
  return out;
}

TESSEL_INLINE std::string reader::bytes_at(std::uint64_t at, std::uint64_t n,
                                           const std::string& what) {
  if (at > size_ || n > size_ - at)
    throw value_error(what + " runs past the end of the archive (" + std::to_string(size_) +
                      " bytes): the file is truncated or damaged.");
  std::string s(static_cast<std::size_t>(n), '\0');
  in_.clear();
  in_.seekg(static_cast<std::streamoff>(at));
  in_.read(s.data(), static_cast<std::streamsize>(n));
  if (static_cast<std::uint64_t>(in_.gcount()) != n) throw value_error(what + " cannot be read.");
  return s;
}

TESSEL_INLINE void reader::read_directory() {
  if (size_ < detail::end_size)
    throw value_error(head_ + "the file has " + std::to_string(size_) +
                      " bytes, too few for a zip archive (a .keras file is one). Is it "
                      "truncated?");
  // The end record is in the last 22 + 65535 bytes (its comment may follow it).
  const std::uint64_t tail = std::min<std::uint64_t>(size_, detail::end_size + 65535);
  const std::string t = bytes_at(size_ - tail, tail, head_ + "its end");
  std::size_t at = std::string::npos;
  for (std::size_t i = t.size() - detail::end_size + 1; i-- > 0;)
    if (detail::get(reinterpret_cast<const unsigned char*>(t.data()) + i, 4) ==
        detail::end_signature) {
      at = i;
      break;
    }
  if (at == std::string::npos)
    throw value_error(head_ +
                      "it is not a zip archive, or a truncated one (no end-of-directory "
                      "record; a .keras file is a zip archive).");
  const auto* e = reinterpret_cast<const unsigned char*>(t.data()) + at;
  const std::uint64_t count = detail::get(e + 10, 2), cd_size = detail::get(e + 12, 4),
                      cd_at = detail::get(e + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffff || cd_at == 0xffffffff)
    throw value_error(head_ + "it is a ZIP64 archive, which tessel does not read.");
  const std::string cd = bytes_at(cd_at, cd_size, head_ + "its central directory");
  const auto* p = reinterpret_cast<const unsigned char*>(cd.data());
  std::size_t k = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (k + detail::central_header_size > cd.size() ||
        detail::get(p + k, 4) != detail::central_signature)
      throw value_error(head_ + "its central directory is damaged (entry " + std::to_string(i) +
                        " of " + std::to_string(count) + ").");
    entry_info x;
    const std::uint64_t flags = detail::get(p + k + 8, 2);
    x.method = static_cast<std::uint16_t>(detail::get(p + k + 10, 2));
    x.crc = static_cast<std::uint32_t>(detail::get(p + k + 16, 4));
    x.compressed = detail::get(p + k + 20, 4);
    x.size = detail::get(p + k + 24, 4);
    const std::size_t n = detail::get(p + k + 28, 2), extra = detail::get(p + k + 30, 2),
                      comment = detail::get(p + k + 32, 2);
    x.offset = detail::get(p + k + 42, 4);
    if (k + detail::central_header_size + n + extra + comment > cd.size())
      throw value_error(head_ + "its central directory is damaged (entry " + std::to_string(i) +
                        " runs past it).");
    x.name.assign(cd.data() + k + detail::central_header_size, n);
    k += detail::central_header_size + n + extra + comment;
    if (flags & 1u)
      throw value_error(head_ + "entry '" + x.name + "' is encrypted, which tessel does not read.");
    if (x.method != 0 && x.method != 8)
      throw value_error(head_ + "entry '" + x.name + "' is compressed with method " +
                        std::to_string(x.method) + "; tessel reads stored and DEFLATE entries.");
    if (x.size == 0xffffffff || x.compressed == 0xffffffff || x.offset == 0xffffffff)
      throw value_error(head_ + "entry '" + x.name +
                        "' is a ZIP64 entry, which tessel does not read.");
    entries_.push_back(std::move(x));
  }
}

TESSEL_INLINE std::string reader::inflate(const std::string& in, const entry_info& e,
                                          const std::string& where) {
  // DEFLATE makes at most 1032 bytes of a compressed byte (a 258-byte match in two 1-bit
  // codes): a larger recorded size is a damaged or hostile entry (a zip bomb), refused before
  // it is allocated. A genuine entry may come close (all zeros deflate 1029:1).
  if (e.size > 1032 * std::max<std::uint64_t>(e.compressed, 1))
    throw value_error(where + "its recorded size (" + std::to_string(e.size) +
                      " bytes) is implausibly large: DEFLATE makes at most 1032 bytes of each "
                      "compressed byte, and it has " +
                      std::to_string(e.compressed) + ".");
  std::string out(static_cast<std::size_t>(e.size), '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw runtime_error(where + "zlib cannot start.");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = ::inflate(&z, Z_FINISH);
  const uLong produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || produced != e.size)
    throw value_error(where + "its DEFLATE data is damaged (zlib: " +
                      (rc == Z_DATA_ERROR  ? "invalid data"
                       : rc == Z_BUF_ERROR ? "the data ends early or is longer than recorded"
                                           : "error " + std::to_string(rc)) +
                      "). Use another copy of the file.");
  return out;
}

}  // namespace tessel::saving::zip
