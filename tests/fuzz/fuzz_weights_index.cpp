// libFuzzer harness for the index of Keras's sharded weights, the `.weights.json` that
// save_weights(path, {.max_shard_size}) writes and load_weights reads
// (include/tessel/saving/sharded_weights.hpp): saving::read_sharded_weights, given the input as
// the index, beside three real shards the harness wrote once with write_sharded_weights (a small
// model of three layers and an optimizer, in shards of 1 KiB at most). The
// index may name those shards in any order, some of them, several times, or other names
// (missing files, directories, paths, the index itself, empty or NUL-bearing names). The input
// is never handed to libhdf5: only the shards, which are valid files, are.
//
// Input: the index's bytes, as they are, but for the text $SUMS, replaced by the shards' sums as
// write_sharded_weights recorded them in its own index (`tessel_shards`: their bytes change with
// libhdf5's timestamps, so a seed cannot hold them), so that the fuzzer works on indexes whose
// sums match and whose sums differ.
//
// The documented error is tessel::value_error (tessel::runtime_error for what libhdf5 refuses),
// whose message must name the index. Any other exception (nlohmann's json::exception among
// them), a crash or a sanitizer report is a finding, and so is an index accepted with values
// other than the ones saved: the shards hold nothing else, so an accepted read has every
// variable exactly as saved.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/saving/sharded_weights.hpp>
#include <vector>

#include "fuzz_support.hpp"

namespace saving = tessel::saving;
namespace fs = std::filesystem;
using tessel_fuzz::fail;

namespace {

saving::saved_variable variable(std::string path, std::vector<std::size_t> shape, float base) {
  saving::saved_variable v{std::move(path), std::move(shape), {}};
  std::size_t n = 1;
  for (std::size_t d : v.shape) n *= d;
  for (std::size_t i = 0; i < n; ++i) v.values.push_back(base + 0.25f * static_cast<float>(i));
  return v;
}

// What the shards hold.
const saving::weights_content& saved() {
  static const saving::weights_content c = [] {
    saving::weights_content w;
    w.model_name = "sequential";
    w.layers.push_back({"dense", "d1", {variable("d1/kernel", {8, 16}, 1), variable("d1/bias", {16}, 2)}});
    w.layers.push_back({"dense_1", "d2", {variable("d2/kernel", {16, 4}, 3), variable("d2/bias", {4}, 4)}});
    w.layers.push_back({"dropout", "drop", {}});
    saving::saved_optimizer o;
    o.name = "adam";
    o.iterations = 7;
    o.learning_rate = 0.001;
    for (const auto& l : w.layers)
      for (const auto& v : l.variables) {
        o.slots.push_back(variable("adam/" + v.path + "_m", v.shape, 5));
        o.slots.push_back(variable("adam/" + v.path + "_v", v.shape, 6));
      }
    w.optimizer = std::move(o);
    return w;
  }();
  return c;
}

// The directory with the shards (m_00000.weights.h5, ...), written once.
const fs::path& shards() {
  static const fs::path dir = [] {
    const fs::path d = tessel_fuzz::scratch().path() / "shards";
    fs::create_directories(d);
    saving::write_sharded_weights(d / "m.weights.json", saved(), 1024.0 / (1024.0 * 1024.0 * 1024.0));
    return d;
  }();
  return dir;
}

// What the model expects: saved()'s names and shapes, no values.
saving::weights_content expected() {
  saving::weights_content e = saved();
  for (auto& l : e.layers)
    for (auto& v : l.variables) v.values.clear();
  for (auto& v : e.optimizer->slots) v.values.clear();
  e.optimizer->iterations = 0;
  e.optimizer->learning_rate = 0;
  return e;
}

bool same_values(const std::vector<saving::saved_variable>& a,
                 const std::vector<saving::saved_variable>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].values != b[i].values) return false;
  return true;
}

}  // namespace

// The text of the sums the harness's own index records.
const std::string& own_sums() {
  static const std::string sums = [] {
    std::ifstream in(shards() / "m.weights.json", std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::size_t at = text.find("\"tessel_shards\"");
    if (at == std::string::npos) fail("the harness's own index records no sums");
    const std::size_t open = text.find('{', at), close = text.rfind('}', text.rfind('}') - 1);
    return text.substr(open, close + 1 - open);
  }();
  return sums;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path index = shards() / "input.weights.json";
  std::string text(reinterpret_cast<const char*>(data), size);
  for (std::size_t at = text.find("$SUMS"); at != std::string::npos; at = text.find("$SUMS", at))
    text.replace(at, 5, own_sums());
  tessel_fuzz::write_plain(index, reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  saving::weights_content got = expected();
  try {
    const saving::optimizer_found found = saving::read_sharded_weights(index, got, "load_weights");
    for (std::size_t l = 0; l < got.layers.size(); ++l)
      if (!same_values(got.layers[l].variables, saved().layers[l].variables))
        fail("an accepted index gives a layer's values other than the ones saved");
    if (found == saving::optimizer_found::all &&
        (got.optimizer->iterations != 7 || !same_values(got.optimizer->slots, saved().optimizer->slots)))
      fail("an accepted index gives optimizer values other than the ones saved");
  } catch (const tessel::value_error& e) {
    if (std::string(e.what()).find(index.string()) == std::string::npos)
      fail("a value_error does not name the index");
  } catch (const tessel::runtime_error& e) {
    if (std::string(e.what()).find(index.string()) == std::string::npos &&
        std::string(e.what()).find(shards().string()) == std::string::npos)
      fail("a runtime_error names neither the index nor a shard");
  }
  return 0;
}
