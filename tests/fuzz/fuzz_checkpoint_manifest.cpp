// libFuzzer harness for the manifest of a sharded checkpoint
// (include/tessel/saving/checkpoint.hpp): checkpoint_detail::read_manifest, which load_checkpoint
// runs before it trusts anything in the manifest, then read_overlap of every block the manifest
// accepted, as load_checkpoint reads them (load_checkpoint itself needs a model, which clang++
// cannot build: docs/testing.md#fuzzing).
//
// Input: the manifest.json's text up to the first 0 byte; after it, up to four shard files, each a
// 2-byte little-endian length and that many bytes (fewer when the input ends first), written as
// shard-00000.bin, shard-00001.bin, ... beside the manifest. Without a 0 byte no shard is written.
//
// The documented errors are tessel::runtime_error and tessel::value_error, whose message must name
// the checkpoint's directory. Any other exception (nlohmann's json::exception among them), a
// crash, a sanitizer report, an allocation beyond -malloc_limit_mb or a violated invariant is a
// finding. Invariants of an accepted manifest: its tensors' values are no more than its files'
// bytes hold; each tensor, read whole from its blocks, gets every value exactly once; a sub-box
// of it (the upper half along every dimension, as another device's block) gets every value once
// and the same values as the whole.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/checkpoint.hpp>
#include <vector>

#include "fuzz_support.hpp"

namespace cd = tessel::checkpoint_detail;
namespace fs = std::filesystem;
using tessel_fuzz::fail;

namespace {

void check_names(const std::exception& e, const fs::path& dir) {
  if (std::string(e.what()).find(dir.string()) == std::string::npos)
    fail("a checkpoint error does not name the checkpoint's directory");
}

std::uint64_t volume(const std::vector<std::size_t>& shape) {
  std::uint64_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

// Reads the box (mo, me) of the tensor `v` from its blocks; the number of values copied.
std::size_t read_box(const fs::path& dir, const cd::manifest_variable& v,
                     const std::vector<std::size_t>& mo, const std::vector<std::size_t>& me,
                     std::vector<float>& out) {
  std::size_t copied = 0;
  for (const cd::saved_block& s : v.blocks) copied += cd::read_overlap(dir, s, mo, me, out, v.path);
  return copied;
}

void read_tensors(const fs::path& dir, const cd::manifest& m, std::uint64_t file_bytes) {
  std::uint64_t declared = 0;
  for (const cd::manifest_variable& v : m.variables)
    if (v.dtype == "float32") declared += volume(v.shape);
  if (declared > file_bytes / sizeof(float))
    fail("an accepted manifest declares more values than its files hold");
  for (const cd::manifest_variable& v : m.variables) {
    if (v.dtype != "float32") {
      if (!v.blocks.empty()) fail("an accepted scalar has blocks");
      continue;
    }
    const std::size_t rank = v.shape.size();
    std::vector<float> whole(volume(v.shape));
    if (read_box(dir, v, std::vector<std::size_t>(rank, 0), v.shape, whole) != whole.size())
      fail("the blocks of an accepted tensor do not give each of its values once");
    std::vector<std::size_t> mo(rank), me(rank);
    for (std::size_t d = 0; d < rank; ++d) mo[d] = v.shape[d] / 2, me[d] = v.shape[d] - mo[d];
    std::vector<float> part(volume(me));
    if (read_box(dir, v, mo, me, part) != part.size())
      fail("the blocks of an accepted tensor do not give each value of a sub-box once");
    // The sub-box's values, bit for bit those of the whole at the same places.
    std::vector<std::size_t> idx(rank, 0);
    for (std::size_t k = 0; k < part.size(); ++k) {
      std::size_t w = 0;
      for (std::size_t d = 0; d < rank; ++d) w = w * v.shape[d] + mo[d] + idx[d];
      if (std::memcmp(&part[k], &whole[w], sizeof(float)) != 0)
        fail("a sub-box of a tensor reads other values than the whole tensor");
      for (std::size_t d = rank; d-- > 0;) {
        if (++idx[d] < me[d]) break;
        idx[d] = 0;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path dir = tessel_fuzz::scratch().path() / "checkpoint";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directory(dir);
  const void* zero = std::memchr(data, 0, size);
  const std::size_t text =
      zero ? static_cast<std::size_t>(static_cast<const std::uint8_t*>(zero) - data) : size;
  tessel_fuzz::write_plain(dir / "manifest.json", data, text);
  std::uint64_t file_bytes = text;  // the manifest may list itself among its files
  if (zero != nullptr) {
    std::size_t at = text + 1;
    for (std::size_t i = 0; i < 4 && at + 2 <= size; ++i) {
      const std::size_t n = std::min<std::size_t>(data[at] | data[at + 1] << 8, size - at - 2);
      tessel_fuzz::write_plain(dir / cd::shard_name(i, "bin"), data + at + 2, n);
      file_bytes += n;
      at += 2 + n;
    }
  }
  try {
    const cd::manifest m = cd::read_manifest(dir);
    read_tensors(dir, m, file_bytes);
  } catch (const tessel::runtime_error& e) {
    check_names(e, dir);
  } catch (const tessel::value_error& e) {
    check_names(e, dir);
  }
  return 0;
}
