// keras_archive: Keras 3's .keras file (keras/src/saving/saving_lib.py, save_model and
// _save_model_to_fileobj): a zip archive of stored entries
//
//   metadata.json      {"keras_version": ..., "date_saved": "%Y-%m-%d@%H:%M:%S"}
//   config.json        the model's config (model_config.hpp), which keras.saving.load_model
//                      rebuilds the model from
//   model.weights.h5   the weights file save_weights writes (weights_file.hpp), unchanged
//
// written atomically (atomic_file.hpp), and read back: the config is checked against the model
// before any weight is read, and the weights file is read through a temporary copy (libhdf5 reads
// files), as Keras reads an archive too large for memory.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "atomic_file.hpp"
#include "model_config.hpp"
#include "weights_file.hpp"
#include "zip.hpp"

namespace tessel::saving {

// The Keras version whose format tessel writes, as metadata.json records it.
inline constexpr std::string_view keras_version = "3.15.1";

inline constexpr std::string_view archive_config_entry = "config.json";
inline constexpr std::string_view archive_metadata_entry = "metadata.json";
inline constexpr std::string_view archive_weights_entry = "model.weights.h5";

namespace detail {
TESSEL_INLINE void check_archive_path(const std::string& filepath, const char* where);

// A file of this process's own in the system's temporary directory, removed when it goes.
class temporary_file {
 public:
  explicit temporary_file(std::string_view suffix);
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// Error messages about `from` (a temporary copy) as messages about `to`.
TESSEL_INLINE std::string renamed(std::string message, const std::string& from,
                                  const std::string& to);

TESSEL_INLINE std::string date_saved();
}  // namespace detail

// Writes the archive at `path` atomically from the model's config.json text and its weights.
TESSEL_INLINE void write_keras_archive(const std::filesystem::path& path,
                                       const std::string& config_json,
                                       const weights_content& content);

// Reads the archive at `path` into `expected` (read_weights_file's contract), after checking
// that its config.json describes the model whose own config is `ours`.
TESSEL_INLINE optimizer_found read_keras_archive(const std::filesystem::path& path,
                                                 const nlohmann::json& ours,
                                                 weights_content& expected,
                                                 std::string_view where = "load_weights");

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/keras_archive.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
