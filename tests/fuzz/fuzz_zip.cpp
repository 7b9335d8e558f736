// libFuzzer harness for tessel::saving::zip::reader (include/tessel/saving/zip.hpp), which reads
// .keras archives: the input is written to a file, opened as an archive, and every entry it lists
// is read (stored and DEFLATE), each on its own, then by name.
//
// The reader's documented error is tessel::value_error, whose message must name the file. Any
// other exception, a crash, a sanitizer report, an allocation beyond libFuzzer's -malloc_limit_mb
// (an entry's recorded size trusted before it is checked: a zip bomb) or a violated invariant is a
// finding. Invariants: an entry that reads has its recorded size and CRC-32, and is no larger than
// DEFLATE can make of its compressed bytes; a stored entry is exactly its compressed bytes; the
// entries that read, written again by zip::writer and read back, give the same names and contents.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/zip.hpp>
#include <utility>
#include <vector>

#include "fuzz_support.hpp"

namespace zip = tessel::saving::zip;
using tessel_fuzz::fail;

namespace {

void check_names(const tessel::value_error& e, const std::filesystem::path& path) {
  if (std::string(e.what()).find(path.string()) == std::string::npos)
    fail("a zip reader error does not name the archive");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = tessel_fuzz::scratch().path();
  const auto path = dir / "input.keras";
  tessel_fuzz::write_plain(path, data, size);
  std::vector<std::pair<std::string, std::string>> good;
  try {
    zip::reader z(path);
    const std::vector<zip::entry_info> entries = z.entries();  // a copy: read() must not alter it
    for (const zip::entry_info& e : entries) {
      try {
        const std::string content = z.read(e);
        if (content.size() != e.size) fail("an entry read with a size other than its recorded one");
        if (tessel::saving::detail::crc32_of(content.data(), content.size()) != e.crc)
          fail("an entry read whose content does not match its CRC-32");
        if (e.method == 0 && e.compressed != e.size) fail("a stored entry read whose sizes differ");
        // DEFLATE's longest output is 258 bytes per 2 bits of input (1032 per byte).
        if (e.method == 8 && e.size > 1032 * e.compressed + 1032)
          fail("a DEFLATE entry read larger than its compressed bytes can encode");
        if (e.compressed > size) fail("an entry read whose compressed size exceeds the file");
        good.emplace_back(e.name, content);
      } catch (const tessel::value_error& err) {
        check_names(err, path);
      }
    }
    if (z.entries().size() != entries.size()) fail("reading entries changed the directory");
    // By name: the first entry of that name (the central directory may list a name twice).
    if (!entries.empty()) {
      try {
        (void)z.read(entries.front().name, "the first entry");
      } catch (const tessel::value_error& err) {
        check_names(err, path);
      }
    }
    try {
      (void)z.read("config.json", "the model's config");
    } catch (const tessel::value_error& err) {
      check_names(err, path);
    }
  } catch (const tessel::value_error& e) {
    check_names(e, path);
  }
  if (good.empty()) return 0;

  // What read, archived again by tessel's writer, must read back the same.
  const auto again = dir / "again.keras";
  {
    std::ofstream out(again, std::ios::binary | std::ios::trunc);
    zip::writer w(out, again.string());
    for (const auto& [name, content] : good) w.add(name, content);
    w.finish();
  }
  try {
    zip::reader z(again);
    if (z.entries().size() != good.size())
      fail("an archive zip::writer wrote lists another number of entries");
    for (std::size_t i = 0; i < good.size(); ++i) {
      if (z.entries()[i].name != good[i].first)
        fail("an archive zip::writer wrote lists another name");
      if (z.read(z.entries()[i]) != good[i].second)
        fail("an archive zip::writer wrote reads back other content");
    }
  } catch (const tessel::value_error&) {
    fail("an archive zip::writer wrote does not read back");
  }
  return 0;
}
