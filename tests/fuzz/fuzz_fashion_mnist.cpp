// libFuzzer harness for tessel::datasets::fashion_mnist::load_data
// (include/tessel/data/fashion_mnist.hpp): the four IDX files it reads, with their shape and
// label checks, and the choice of directory (the argument or $TESSEL_FASHION_MNIST_DIR).
//
// Input: one flags byte, then up to four chunks, each a 2-byte little-endian length and that many
// bytes (fewer when the input ends first), for train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte in that order. A file whose chunk is absent
// (the input ended before its length) is not written: the missing-file error.
//   flags bit i (0-3)  file i is written gzip-compressed as NAME.gz, else as NAME, plain
//   flags bit 4        the directory is given through TESSEL_FASHION_MNIST_DIR, not as argument
//   flags bit 5        the directory named does not exist
//
// load_data's documented error is tessel::value_error; its message must name the directory (every
// file it names is inside it). Any other exception, a crash or a sanitizer report is a finding,
// and so is a load that succeeds with anything but Fashion-MNIST's shapes and labels 0-9.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <tessel/core/errors.hpp>
#include <tessel/data/fashion_mnist.hpp>

#include "fuzz_support.hpp"

namespace fm = tessel::datasets::fashion_mnist;
using tessel_fuzz::fail;

namespace {

void check_split(const fm::split& s) {
  const auto& [images, labels] = s;
  if (images.rank() != 3 || images.shape[1] != 28 || images.shape[2] != 28)
    fail("load_data returned images whose shape is not (n, 28, 28)");
  if (labels.rank() != 1 || labels.shape[0] != images.shape[0])
    fail("load_data returned labels that are not one per image");
  if (images.values.size() != images.shape[0] * 784 || labels.values.size() != labels.shape[0])
    fail("load_data returned arrays whose values do not match their shapes");
  for (const std::uint8_t l : labels.values)
    if (l >= fm::num_classes) fail("load_data returned a label outside [0, 10)");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t flags = data[0];
  const auto& root = tessel_fuzz::scratch().path();
  for (const char* name : fm::detail::file_names) {
    std::error_code ec;
    std::filesystem::remove(root / name, ec);
    std::filesystem::remove(root / (std::string(name) + ".gz"), ec);
  }
  std::size_t at = 1;
  for (std::size_t i = 0; i < 4 && size - at >= 2; ++i) {
    std::size_t n = data[at] | (std::size_t{data[at + 1]} << 8);
    at += 2;
    n = std::min(n, size - at);
    const bool gz = (flags >> i & 1) != 0;
    const auto path = root / (std::string(fm::detail::file_names[i]) + (gz ? ".gz" : ""));
    if (gz)
      tessel_fuzz::write_gzip(path, data + at, n);
    else
      tessel_fuzz::write_plain(path, data + at, n);
    at += n;
  }

  const bool from_env = (flags & 0x10) != 0;
  const std::filesystem::path dir = (flags & 0x20) != 0 ? root / "no-such-dir" : root;
  try {
    std::pair<fm::split, fm::split> d;
    if (from_env) {
      ::setenv(fm::directory_variable, dir.c_str(), 1);
      d = fm::load_data();
    } else {
      ::unsetenv(fm::directory_variable);
      d = fm::load_data(dir);
    }
    check_split(d.first);
    check_split(d.second);
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find(root.string()) == std::string::npos)
      fail("a load_data error does not name the directory or the file");
  }
  return 0;
}
