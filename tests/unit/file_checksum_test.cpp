// file_checksum: the trailer's CRC-32 computed from the runs a writer already checksummed
// (known_crc, combined with zlib's crc32_combine) equals the CRC of every byte read back, and a
// .weights.h5 file written that way (its datasets' values borrowed from the model, not copied)
// verifies and loads.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <tessel/saving/weights_file.hpp>
#include <vector>

#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
namespace saving = tessel::saving;
using tessel::testing::temp_dir;

std::string bytes_of(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed;
  for (auto& c : s) c = static_cast<char>((x = x * 1664525u + 1013904223u) >> 24);
  return s;
}

void write(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

saving::checksum_state verify(const fs::path& p) {
  std::uint64_t content = 0;
  return saving::verify_checksum(p, fs::file_size(p), content);
}

saving::known_crc run(const std::string& s, std::uint64_t offset, std::uint64_t bytes) {
  return {offset, bytes, saving::detail::crc32_of(s.data() + offset, bytes)};
}

}  // namespace

TEST_CASE("append_checksum: known runs combined give the trailer of every byte read back",
          "[saving][checksum]") {
  const temp_dir dir;
  const std::string content = bytes_of(3 * (1u << 20) + 12345, 7);
  const fs::path whole = dir.path / "whole", combined = dir.path / "combined";
  write(whole, content);
  write(combined, content);
  saving::append_checksum(whole);
  // Runs at the start, in the middle (out of order) and at the very end; one empty.
  saving::append_checksum(combined, {run(content, 2000000, 1000000), run(content, 0, 100),
                                     run(content, 100, 0), run(content, 3000000, content.size() - 3000000)});
  CHECK(read(combined) == read(whole));
  CHECK(verify(combined) == saving::checksum_state::ok);
}

TEST_CASE("append_checksum: the known runs' checksums are used, not the bytes under them",
          "[saving][checksum]") {
  const temp_dir dir;
  const std::string content = bytes_of(200000, 3);
  const fs::path p = dir.path / "f";
  write(p, content);
  saving::known_crc wrong = run(content, 1000, 5000);
  wrong.crc ^= 1;  // a writer whose values changed after it checksummed them
  saving::append_checksum(p, {wrong});
  CHECK(verify(p) == saving::checksum_state::damaged);
}

TEST_CASE("append_checksum: runs that overlap or leave the file are ignored (all bytes read)",
          "[saving][checksum]") {
  const temp_dir dir;
  const std::string content = bytes_of(100000, 11);
  const fs::path p = dir.path / "f";
  for (const auto& known : std::vector<std::vector<saving::known_crc>>{
           {run(content, 0, 5000), run(content, 4000, 2000)},                 // overlap
           {run(content, 90000, 10000), {95000, 10000, 0}},                     // past the end
           {{~std::uint64_t{0} - 10, 20, 0}}}) {                                // offset overflow
    write(p, content);
    saving::append_checksum(p, known);
    CHECK(verify(p) == saving::checksum_state::ok);
  }
}

TEST_CASE("write_weights_file: borrowed values are written, checksummed and read back",
          "[saving][checksum]") {
  const temp_dir dir;
  const fs::path p = dir.path / "m.weights.h5";
  std::vector<float> kernel(3000 * 70), bias(70);
  for (std::size_t i = 0; i < kernel.size(); ++i) kernel[i] = static_cast<float>(i % 977) * 0.25f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = -static_cast<float>(i);
  saving::weights_content c;
  c.model_name = "m";
  saving::saved_layer l{"dense", "d", {}};
  l.variables.push_back({"d/kernel", {3000, 70}, {}, kernel});
  l.variables.push_back({"d/bias", {70}, bias, {}});  // one held, one borrowed
  c.layers.push_back(l);
  saving::write_weights_file(p, c);
  CHECK(verify(p) == saving::checksum_state::ok);
  saving::weights_content back = c;
  for (auto& v : back.layers[0].variables) v.values.clear(), v.borrowed = {};
  saving::read_weights_file(p, back);
  CHECK(back.layers[0].variables[0].values == kernel);
  CHECK(back.layers[0].variables[1].values == bias);
  // A flipped value byte is found by the file's checksum, though the writer never read it back.
  std::string bytes = read(p);
  const std::size_t at = bytes.find(std::string(reinterpret_cast<const char*>(&kernel[500]), 64));
  REQUIRE(at != std::string::npos);
  bytes[at + 3] ^= 0x10;
  write(p, bytes);
  CHECK(verify(p) == saving::checksum_state::damaged);
  CHECK_THROWS_AS(saving::read_weights_file(p, back), tessel::value_error);
}
