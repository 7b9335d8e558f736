#pragma once
// Shared by the libFuzzer harnesses: a scratch directory (in /dev/shm when there is one, so that
// writing the input to a file costs no disk I/O) and ways to put fuzz bytes into files there.
#include <stdlib.h>  // mkdtemp
#include <unistd.h>  // getpid
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <tessel/optimizers/function.hpp>

namespace tessel_fuzz {

// A backend with the optimizers' update calls and no kernels: enough for the optimizer registry
// (tessel/optimizers/function.hpp) to make and check an optimizer from a config, which is what a
// ps does with a `create` message's, where clang++ cannot build the host backend.
struct checking_backend {
  struct matrix {
    [[nodiscard]] float* data() const { return nullptr; }
  };
  using tensors = std::span<const tessel::backend::update_tensors<matrix>>;
  static std::size_t rows(const matrix&) { return 0; }
  static std::size_t cols(const matrix&) { return 0; }
  template <class F>
  static void for_each(const char*, std::size_t, std::size_t, const F&) {}
  static void sgd_update(tensors, float, float, bool) {}
  static void adam_update(tensors, float, float, float, float) {}
  static void rmsprop_update(tensors, float, float, float, float, bool) {}
};

// A finding that is not a crash (a wrong result): abort, so that libFuzzer saves the input.
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "tessel fuzz: invariant violated: %s\n", what);
  std::abort();
}

// One directory per process (libFuzzer's -fork/-jobs children get their own), removed at exit.
class scratch_dir {
 public:
  scratch_dir() {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string templ = (base / ("tessel-fuzz-" + std::to_string(getpid()) + "-XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("tessel fuzz: mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const scratch_dir& scratch() {
  static const scratch_dir dir;
  return dir;
}

// The bytes as they are.
inline void write_plain(const std::filesystem::path& path, const std::uint8_t* data,
                        std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
      std::fclose(f) != 0) {
    std::perror("tessel fuzz: writing the input");
    std::abort();
  }
}

// The bytes gzip-compressed with zlib (gzopen "wb": a valid gzip stream with its CRC-32 and length
// trailer), so that the reader's decompressing path gets well-formed streams to go deep with.
inline void write_gzip(const std::filesystem::path& path, const std::uint8_t* data,
                       std::size_t size) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror("tessel fuzz: gzopen");
    std::abort();
  }
  const bool ok = size == 0 || gzwrite(f, data, static_cast<unsigned>(size)) ==
                                   static_cast<int>(size);
  if (gzclose(f) != Z_OK || !ok) {
    std::fprintf(stderr, "tessel fuzz: gzwrite failed\n");
    std::abort();
  }
}

}  // namespace tessel_fuzz
