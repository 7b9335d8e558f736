// The definitions of saving/keras_archive.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include keras_archive.hpp.
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
