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

// Definitions (compiled once in tessel::compiled; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace tessel::saving::detail {

TESSEL_INLINE void check_archive_path(const std::string& filepath, const char* where) {
  if (!filepath.ends_with(".keras"))
    throw value_error(std::string(where) +
                      ": Invalid filepath extension for saving a whole model. Please add a "
                      "`.keras` extension (Keras's native format). Received: filepath=" +
                      filepath);
}

TESSEL_INLINE temporary_file::temporary_file(std::string_view suffix) {
  static std::atomic<unsigned> count{0};
  path_ = std::filesystem::temp_directory_path() / ("tessel-" + std::to_string(::getpid()) + "-" +
                                                    std::to_string(count++) + std::string(suffix));
}

TESSEL_INLINE std::string renamed(std::string message, const std::string& from,
                                  const std::string& to) {
  for (std::size_t at = message.find(from); at != std::string::npos;
       at = message.find(from, at + to.size()))
    message.replace(at, from.size(), to);
  return message;
}

TESSEL_INLINE std::string date_saved() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d@%H:%M:%S", &tm);
  return b;
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE void write_keras_archive(const std::filesystem::path& path,
                                       const std::string& config_json,
                                       const weights_content& content) {
  const std::string metadata = R"({"keras_version": )" +
                               layers::keras_config::quote(keras_version) + R"(, "date_saved": )" +
                               layers::keras_config::quote(detail::date_saved()) + "}";
  const std::filesystem::path weights =
      std::filesystem::path(temporary_path(path).string() + ".weights.h5");
  try {
    write_weights_file(weights, content);
    write_atomically(path, [&](const std::filesystem::path& tmp) {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw runtime_error("Cannot create '" + tmp.string() + "' to write the archive.");
      zip::writer z(out, tmp.string());
      z.add(archive_metadata_entry, metadata);
      z.add(archive_config_entry, config_json);
      z.add_file(archive_weights_entry, weights, zip::dos_time::now());
      z.finish();
      out.close();
      if (!out) throw runtime_error("Cannot finish writing '" + tmp.string() + "'.");
    });
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(weights, ignored);
    throw;
  }
  std::error_code ignored;
  std::filesystem::remove(weights, ignored);
}

TESSEL_INLINE optimizer_found read_keras_archive(const std::filesystem::path& path,
                                                 const nlohmann::json& ours,
                                                 weights_content& expected,
                                                 std::string_view where) {
  const std::string p = path.string();
  const std::string head = std::string(where) + ": cannot load '" + p + "': ";
  {
    const data::path_access a = data::check_path(path, data::path_kind::file);
    if (!a.ok()) throw value_error(head + "it " + a.reason + ".");
  }
  zip::reader z(path, std::string(where));
  const std::string text = z.read(archive_config_entry, "the model's config");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw value_error(head + "its entry 'config.json' is not valid JSON (" + e.what() + ").");
  }
  if (!config.is_object())
    throw value_error(head + "its entry 'config.json' is not a JSON object.");
  check_model_config(config, ours, head + "its config.json describes another model: ");
  const zip::entry_info* w = z.find(archive_weights_entry);
  if (w == nullptr) (void)z.read(archive_weights_entry, "the model's weights");  // the error
  const detail::temporary_file tmp(".weights.h5");
  {
    const std::string bytes = z.read(*w);
    std::ofstream out(tmp.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out)
      throw runtime_error(head + "cannot write its weights to the temporary file '" +
                          tmp.path().string() + "'.");
  }
  try {
    return read_weights_file(tmp.path(), expected, where);
  } catch (const value_error& e) {
    throw value_error(detail::renamed(e.what(), tmp.path().string(),
                                      p + "', entry '" + std::string(archive_weights_entry)));
  }
}

}  // namespace tessel::saving
#endif  // TESSEL_DEFINITIONS
