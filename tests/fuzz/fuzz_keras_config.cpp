// libFuzzer harness for the config.json of a .keras archive as load_weights reads it
// (include/tessel/saving/keras_archive.hpp, read_keras_archive): parsed, required to be an
// object, then compared by saving::check_model_config (model_config.hpp) with the model's own
// config. The model's own configs are fixed: keras_config_functional.json (seeds/002's CNN, a
// Functional model) and keras_config_sequential.json (a Sequential MLP), tessel's
// model_config_json of those models (keras_archive_test checks that they still are). clang++
// cannot build tessel's models (docs/testing.md#fuzzing), so the harness reads them from files.
//
// Input: one byte, whose lowest bit picks the model (0 the CNN, 1 the MLP), then the file's
// config.json text. tessel reads no other entry of the archive as JSON (metadata.json is written,
// never read).
//
// The documented error is tessel::value_error, whose message must start with the caller's head
// (it names the file). Any other exception (nlohmann's json::exception among them, other than
// those of parsing, which read_keras_archive turns into a value_error), a crash or a sanitizer
// report is a finding, and so is an accepted config whose model differs from ours in its class,
// its number of layers or a layer's class.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/model_config.hpp>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;
using json = nlohmann::json;

#ifndef TESSEL_FUZZ_DIR
#error "build with -DTESSEL_FUZZ_DIR=\"<tests/fuzz>\" (build_harnesses.cmake does)"
#endif

namespace {

json read_model(const char* name) {
  std::ifstream in(std::string(TESSEL_FUZZ_DIR) + "/" + name);
  if (!in) {
    std::fprintf(stderr, "tessel fuzz: cannot read %s/%s\n", TESSEL_FUZZ_DIR, name);
    std::abort();
  }
  return json::parse(in);
}

const json& model(unsigned which) {
  static const json models[2] = {read_model("keras_config_functional.json"),
                                 read_model("keras_config_sequential.json")};
  return models[which];
}

const std::string head = "load_weights: cannot load '/models/m.keras': its config.json ";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const json& ours = model(data[0] & 1u);
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception&) {
    // read_keras_archive: "its entry 'config.json' is not valid JSON" (a parse_error, or an
    // out_of_range for a number past a double's range, 1e400)
    return 0;
  }
  if (!file.is_object()) return 0;  // read_keras_archive: "is not a JSON object"
  try {
    tessel::saving::check_model_config(file, ours, head);
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).rfind(head, 0) != 0)
      fail("a config error does not start with the caller's head (naming the file)");
    return 0;
  }
  // Accepted: the same kind of model, layer for layer.
  if (file["class_name"] != ours["class_name"]) fail("a config of another class was accepted");
  const json& fl = file["config"]["layers"];
  const json& ol = ours["config"]["layers"];
  if (!fl.is_array() || fl.size() != ol.size())
    fail("a config with another number of layers was accepted");
  for (std::size_t i = 0; i < ol.size(); ++i)
    if (!fl[i].is_object() || fl[i].value("class_name", json()) != ol[i]["class_name"])
      fail("a config with another layer class was accepted");
  return 0;
}
