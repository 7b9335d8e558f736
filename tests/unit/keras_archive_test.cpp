// model.save(".keras") and sharded weights (.weights.json): Keras's archives and shards
// (tests/golden/saving, written by scripts/golden/keras_saving.py) load in tessel and predict as
// Keras does; tessel's load in Keras (keras_loads_tessel_<model>_archive.json); round trips;
// Keras's archive recompressed with DEFLATE loads the same weights; shards filled as Keras fills
// them; damaged archives (stored and DEFLATE) and another model's config are clear errors;
// model_checkpoint saves .keras.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "golden.hpp"
#include "keras_models.hpp"
#include "test_helpers.hpp"

namespace {

using namespace tessel::layers;
using tessel::testing::message_of;
using tessel::testing::temp_dir;
using tessel::testing::golden::json;
using tessel::testing::golden::load;
using tessel::testing::golden::to_array;
using tessel::testing::golden::values;
namespace fs = std::filesystem;
namespace optimizers = tessel::optimizers;
namespace losses = tessel::losses;

// The models of scripts/golden/keras_saving.py (support/keras_models.hpp).
namespace seed000 = tessel::testing::keras_models::seed000;
namespace seed002 = tessel::testing::keras_models::seed002;
using tessel::testing::keras_models::golden_file;
namespace seed001 {
using namespace tessel::testing::keras_models::seed001;
// The same with a wider first layer: another model's type.
using wide = tessel::functional<x, dense<10>::on<dense<256, {.activation = "relu"}>::on<
                                       dense<300, {.activation = "relu"}>::on<x>>>>;
// The same shapes with another activation: only the config tells the two apart.
using tanh_model = tessel::functional<x, dense<10>::on<dense<256, {.activation = "relu"}>::on<
                                             dense<256, {.activation = "tanh"}>::on<x>>>>;
}  // namespace seed001

// Within `rel` of Keras's values, relative to their largest magnitude (at least 1).
double worst = 0;
void check_near(const std::vector<float>& a, const std::vector<float>& e, const std::string& what,
                double rel) {
  REQUIRE(a.size() == e.size());
  double scale = 1;
  for (float v : e) scale = std::max(scale, std::fabs(double(v)));
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(what << "[" << i << "]: tessel " << a[i] << ", Keras " << e[i]);
    worst = std::max(worst, std::fabs(double(a[i]) - e[i]) / scale);
    REQUIRE(std::fabs(double(a[i]) - e[i]) <= rel * scale);
  }
}

std::vector<std::vector<float>> weights_of(const auto& m) {
  std::vector<std::vector<float>> out;
  for (const auto& w : m.get_weights()) out.push_back(w.values);
  return out;
}

// Keras's .keras archive and sharded weights load in tessel and predict Keras's outputs (1e-6).
// Then tessel, trained two steps further as saving_test trains it, writes both forms (into
// TESSEL_SAVING_GOLDEN_OUT too, where set), which load back bitwise and, in Keras
// (keras_loads_tessel_<name>_archive.json), predict as tessel does.
template <class Model>
void archives_both_ways(const std::string& name, void (*compile)(Model&)) {
  const json g = load("saving/" + name + ".json");
  for (const std::string& file : {name + ".keras", name + ".weights.json"}) {
    Model m;
    compile(m);
    m.load_weights(golden_file(file));
    check_near(m.predict(to_array(g["x_eval"])).values, values(g["predictions"]),
               name + " from Keras's " + file, 1e-6);
  }
  Model m;
  compile(m);
  m.load_weights(golden_file(name + ".weights.h5"));
  m.train_on_batch(to_array(g["x1"]), to_array(g["y1"]));
  m.train_on_batch(to_array(g["x2"]), to_array(g["y2"]));
  temp_dir dir;
  const std::string archive = (dir / (name + ".keras")).string();
  const std::string sharded = (dir / (name + ".weights.json")).string();
  m.save(archive);
  m.save_weights(sharded, {.max_shard_size = 1.0 / 1024});
  if (const char* out = std::getenv("TESSEL_SAVING_GOLDEN_OUT"); out != nullptr && *out) {
    fs::create_directories(out);
    m.save((fs::path(out) / (name + ".keras")).string());
    m.save_weights((fs::path(out) / (name + ".weights.json")).string(),
                   {.max_shard_size = 1.0 / 1024});
  }
  for (const std::string& file : {archive, sharded}) {
    Model r;
    compile(r);
    r.load_weights(file);
    CHECK(weights_of(r) == weights_of(m));
    CHECK(r.get_optimizer().iterations() == m.get_optimizer().iterations());
  }
  const fs::path recorded = golden_file("keras_loads_tessel_" + name + "_archive.json");
  if (!fs::exists(recorded)) return;
  const json k = load("saving/keras_loads_tessel_" + name + "_archive.json");
  CHECK(k["load_model_class"] == "Functional");
  const std::vector<float> ours = m.predict(to_array(g["x_eval"])).values;
  check_near(ours, values(k["load_model_predictions"]),
             name + ": Keras's load_model of tessel's archive", 1e-5);
  check_near(ours, values(k["sharded_predictions"]),
             name + ": Keras's load_weights of tessel's shards", 1e-5);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const fs::path& p, const std::string& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << b;
}

}  // namespace

TEST_CASE("keras archive: seeds/000's model both ways", "[saving][golden][keras_archive]") {
  archives_both_ways<seed000::model>("seed000", seed000::compile);
}
TEST_CASE("keras archive: seeds/001's model both ways", "[saving][golden][keras_archive]") {
  archives_both_ways<seed001::model>("seed001", seed001::compile);
}
TEST_CASE("keras archive: seeds/002's model both ways", "[saving][golden][keras_archive]") {
  archives_both_ways<seed002::model>("seed002", seed002::compile);
  WARN("largest difference from Keras, of the outputs' scale: " << worst);
}

TEST_CASE("keras archive: Keras's entries, names and sharded JSON", "[saving][keras_archive]") {
  temp_dir dir;
  seed002::model m;
  seed002::compile(m);
  m.save((dir / "m.keras").string());
  tessel::saving::zip::reader z(dir / "m.keras");
  REQUIRE(z.entries().size() == 3);
  CHECK(z.entries()[0].name == "metadata.json");
  CHECK(z.entries()[1].name == "config.json");
  CHECK(z.entries()[2].name == "model.weights.h5");
  for (const auto& e : z.entries()) CHECK(e.method == 0);  // ZIP_STORED, as Keras
  const auto meta = nlohmann::json::parse(z.read("metadata.json", ""));
  CHECK(meta["keras_version"] == "3.15.1");
  const auto config = nlohmann::json::parse(z.read("config.json", ""));
  CHECK(config["class_name"] == "Functional");
  CHECK(config["compile_config"]["optimizer"]["class_name"] == "Adam");
  CHECK(config["compile_config"]["loss"]["config"]["from_logits"] == true);
  const auto& l = config["config"]["layers"];
  REQUIRE(l.size() == 14);
  CHECK(l[5]["class_name"] == "Conv2D");
  CHECK(l[5]["config"]["kernel_size"] == nlohmann::json::array({6, 6}));
  CHECK(l[8]["config"]["name"] == "large_k");
  // Keras's weights file, unchanged, as the entry.
  m.save_weights((dir / "w.weights.h5").string());
  CHECK(z.read("model.weights.h5", "").size() == fs::file_size(dir / "w.weights.h5"));

  m.save_weights((dir / "s.weights.json").string(), {.max_shard_size = 128.0 / (1 << 20)});
  const auto j = nlohmann::json::parse(read_file(dir / "s.weights.json"));
  const auto k = nlohmann::json::parse(read_file(golden_file("seed002.weights.json")));
  // The same layout as Keras's shards of this model at this size (the optimizer aside: Keras's
  // file holds its counters alone, this one's its slots too).
  CHECK(j["weight_map"]["/layers/conv2d/vars"] == "s_00000.weights.h5");
  CHECK(j["weight_map"]["/layers/conv2d_2/vars"] == nlohmann::json::array({"s_00001.weights.h5"}));
  CHECK(k["weight_map"]["/layers/conv2d_2/vars"] ==
        nlohmann::json::array({"seed002_00001.weights.h5"}));
  CHECK(fs::exists(dir / "s_00000.weights.h5"));
  CHECK_THROWS_WITH(m.save_weights((dir / "s.weights.h5").string(), {.max_shard_size = 1.0}),
                    Catch::Contains("must end in `.weights.json` when `max_shard_size`"));
  CHECK_THROWS_WITH(m.save_weights((dir / "t.weights.json").string(), {.max_shard_size = 1e-6}),
                    Catch::Contains("exceeds the maximum shard size"));
  CHECK_THROWS_WITH(m.save((dir / "m.h5").string()), Catch::Contains("`.keras` extension"));
}

TEST_CASE("keras archive: damaged archives and another model's are clear errors",
          "[saving][keras_archive]") {
  temp_dir dir;
  seed001::model m;
  seed001::compile(m);
  const fs::path good = dir / "m.keras";
  m.save(good.string());
  const std::string bytes = read_file(good);
  seed001::model r;
  seed001::compile(r);
  const auto before = weights_of(r);
  auto load_error = [&](const std::string& content) {
    const fs::path p = dir / "bad.keras";
    write_file(p, content);
    return message_of([&] { r.load_weights(p.string()); });
  };
  // Truncated at several places: never a crash, always the file named.
  for (std::size_t cut : {std::size_t{0}, std::size_t{10}, bytes.size() / 2, bytes.size() - 30}) {
    INFO("cut at " << cut);
    const std::string e = load_error(bytes.substr(0, cut));
    CHECK(e.find("bad.keras") != std::string::npos);
  }
  CHECK_THAT(load_error(bytes.substr(0, bytes.size() / 2)), Catch::Contains("zip archive"));
  // A flipped byte in the weights entry: its CRC-32.
  {
    std::string b = bytes;
    b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10);
    const std::string e = load_error(b);
    CHECK_THAT(e, Catch::Contains("entry 'model.weights.h5'") && Catch::Contains("CRC-32"));
  }
  // A flipped byte in config.json.
  {
    std::string b = bytes;
    const std::size_t at = b.find("\"units\"");
    REQUIRE(at != std::string::npos);
    b[at + 2] = 'X';
    CHECK_THAT(load_error(b), Catch::Contains("entry 'config.json'") && Catch::Contains("CRC-32"));
  }
  // A missing entry: the name in the directory changed.
  {
    std::string b = bytes;
    for (std::size_t at = b.find("config.json"); at != std::string::npos;
         at = b.find("config.json", at + 1))
      b[at] = 'k';
    CHECK_THAT(load_error(b), Catch::Contains("no entry 'config.json'"));
  }
  // Another model's archive: the first layer that differs, and what differs.
  {
    seed001::wide w;
    w.save((dir / "wide.keras").string());
    const std::string e = message_of([&] { r.load_weights((dir / "wide.keras").string()); });
    CHECK_THAT(e, Catch::Contains("layer 0") && Catch::Contains("units is 300 in the file and "
                                                                "256 in this model"));
    seed002::model c;
    c.save((dir / "cnn.keras").string());
    CHECK_THAT(
        message_of([&] { r.load_weights((dir / "cnn.keras").string()); }),
        Catch::Contains("the input layer differs: batch_shape is [null,28,28,1] in the file"));
  }
  // Sharded: a missing shard, and a damaged one.
  {
    m.save_weights((dir / "s.weights.json").string(), {.max_shard_size = 1.0 / 1024});
    fs::rename(dir / "s_00001.weights.h5", dir / "moved.h5");
    CHECK_THAT(message_of([&] { r.load_weights((dir / "s.weights.json").string()); }),
               Catch::Contains("s_00001.weights.h5") && Catch::Contains("does not exist"));
    std::string b = read_file(dir / "moved.h5");
    b[b.size() / 3] = static_cast<char>(b[b.size() / 3] ^ 1);
    write_file(dir / "s_00001.weights.h5", b);
    CHECK_THAT(message_of([&] { r.load_weights((dir / "s.weights.json").string()); }),
               Catch::Contains("CRC-32"));
    write_file(dir / "s.weights.json", "{\"weight_map\": [1, 2]");
    CHECK_THAT(message_of([&] { r.load_weights((dir / "s.weights.json").string()); }),
               Catch::Contains("not valid JSON"));
    // A shard name with a NUL: the system would open "moved.h5", which exists, not the name.
    write_file(dir / "s.weights.json",
               "{\"weight_map\": {\"/layers/conv2d/vars\": \"moved.h5\\u0000x\"}}");
    CHECK_THAT(message_of([&] { r.load_weights((dir / "s.weights.json").string()); }),
               Catch::Contains("\"moved.h5\\0x\", which is not a file name beside it"));
  }
  CHECK(weights_of(r) == before);  // nothing loaded from any of them
}

TEST_CASE("keras archive: model_checkpoint with a .keras filepath saves the whole model",
          "[saving][keras_archive][callbacks]") {
  temp_dir dir;
  const json g = load("saving/seed001.json");
  seed001::model m;
  seed001::compile(m);
  const auto x = to_array(g["x1"]);
  const auto y = to_array(g["y1"]);
  m.fit(x, y,
        {.batch_size = 4,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {tessel::callbacks::model_checkpoint(
             {.filepath = (dir / "m-{epoch:02d}.keras").string(), .monitor = "loss"})}});
  REQUIRE(fs::exists(dir / "m-01.keras"));
  REQUIRE(fs::exists(dir / "m-02.keras"));
  seed001::model r;
  seed001::compile(r);
  r.load_weights((dir / "m-02.keras").string());
  CHECK(weights_of(r) == weights_of(m));
}

namespace {

// The text of a .weights.json without tessel's entry of the shards' sums (which Keras ignores).
std::string keras_part(const fs::path& index) {
  auto j = nlohmann::ordered_json::parse(read_file(index));
  CHECK(j.contains("tessel_shards"));
  j.erase("tessel_shards");
  return j.dump(4);
}

// Keras's shards of a compiled model whose optimizer has not stepped (its counters alone), at
// the max_shard_size of scripts/golden/keras_saving.py (SHARD_KIB): tessel writes the same JSON,
// byte for byte but for its entry of the shards' sums, and the same shard files.
template <class Model>
void same_shards_as_keras(const std::string& name, double kib, void (*compile)(Model&)) {
  temp_dir dir;
  Model m;
  compile(m);
  m.save_weights((dir / (name + ".weights.json")).string(), {.max_shard_size = kib / (1 << 20)});
  CHECK(keras_part(dir / (name + ".weights.json")) ==
        read_file(golden_file(name + ".weights.json")));
  for (std::size_t k = 0; k < 4; ++k) {
    const std::string shard = name + "_0000" + std::to_string(k) + ".weights.h5";
    INFO(shard);
    CHECK(fs::exists(dir / shard) == fs::exists(golden_file(shard)));
  }
}

// An entry's local header and central directory record in an archive's bytes (the name's first
// and last occurrences), and where its data starts.
struct entry_bytes {
  std::size_t local = 0, central = 0, data = 0;
};
entry_bytes locate(const std::string& b, const std::string& name) {
  entry_bytes e;
  e.local = b.find(name) - 30;
  e.central = b.rfind(name) - 46;
  const auto u16 = [&](std::size_t at) {
    return std::size_t(static_cast<unsigned char>(b[at])) |
           std::size_t(static_cast<unsigned char>(b[at + 1])) << 8;
  };
  e.data = e.local + 30 + u16(e.local + 26) + u16(e.local + 28);
  return e;
}
void put_u32(std::string& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST_CASE("keras archive: shards are filled as Keras fills them", "[saving][keras_archive]") {
  same_shards_as_keras<seed000::model>("seed000", 615, seed000::compile);
  same_shards_as_keras<seed001::model>("seed001", 1024, seed001::compile);
  same_shards_as_keras<seed002::model>("seed002", 128, seed002::compile);
  // A variable that fills a shard exactly stays in it (Keras starts a new shard only past the
  // size): dense's kernel and bias are 803,840 bytes. Keras 3.15 writes this JSON for the model.
  temp_dir dir;
  seed001::model m;
  seed001::compile(m);
  m.save_weights((dir / "exact.weights.json").string(), {.max_shard_size = 803840.0 / (1 << 30)});
  CHECK(nlohmann::json::parse(keras_part(dir / "exact.weights.json")) == nlohmann::json::parse(R"({
      "metadata": {"total_size": 1077296.0},
      "weight_map": {"/layers/dense/vars": ["exact_00000.weights.h5"],
                     "/layers/dense_1/vars": ["exact_00001.weights.h5"],
                     "/layers/dense_2/vars": ["exact_00001.weights.h5"],
                     "/optimizer/vars": ["exact_00001.weights.h5"]}})"));
  CHECK_FALSE(fs::exists(dir / "exact_00002.weights.h5"));
}

TEST_CASE("keras archive: DEFLATE entries load the same weights as stored ones",
          "[saving][golden][keras_archive]") {
  // seed002.deflated.keras is Keras's seed002.keras with every entry recompressed by Python's
  // zipfile (ZIP_DEFLATED), as other zip tools may leave an archive.
  const fs::path deflated = golden_file("seed002.deflated.keras");
  {
    tessel::saving::zip::reader z(deflated);
    tessel::saving::zip::reader s(golden_file("seed002.keras"));
    REQUIRE(z.entries().size() == 3);
    REQUIRE(s.entries().size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      INFO(z.entries()[i].name);
      CHECK(z.entries()[i].name == s.entries()[i].name);
      CHECK(z.entries()[i].method == 8);
      CHECK(s.entries()[i].method == 0);
      CHECK(z.read(z.entries()[i]) == s.read(s.entries()[i]));
    }
    const auto* w = z.find("model.weights.h5");
    CHECK(w->compressed < w->size);
  }
  const json g = load("saving/seed002.json");
  seed002::model stored, inflated;
  seed002::compile(stored);
  seed002::compile(inflated);
  stored.load_weights(golden_file("seed002.keras"));
  inflated.load_weights(deflated.string());
  CHECK(weights_of(inflated) == weights_of(stored));
  check_near(inflated.predict(to_array(g["x_eval"])).values, values(g["predictions"]),
             "seed002 from the DEFLATE archive", 1e-6);
}

TEST_CASE("keras archive: damage in Keras's archives, stored and DEFLATE, is an error",
          "[saving][keras_archive]") {
  temp_dir dir;
  seed002::model r;
  seed002::compile(r);
  const auto before = weights_of(r);
  auto load_error = [&](const std::string& content) {
    const fs::path p = dir / "bad.keras";
    write_file(p, content);
    return message_of([&] { r.load_weights(p.string()); });
  };
  const std::uint64_t weights_size =
      tessel::saving::zip::reader(golden_file("seed002.keras")).find("model.weights.h5")->size;
  // A flipped byte in the values of Keras's weights entry: Keras's file has no checksum of its
  // own, so the archive's CRC-32 alone finds it.
  {
    std::string b = read_file(golden_file("seed002.keras"));
    const entry_bytes e = locate(b, "model.weights.h5");
    const std::size_t at = e.data + weights_size / 2;  // in large_k's kernel (/layers/conv2d_2)
    b[at] = static_cast<char>(b[at] ^ 0x04);
    CHECK_THAT(load_error(b), Catch::Contains("bad.keras") &&
                                  Catch::Contains("entry 'model.weights.h5'") &&
                                  Catch::Contains("CRC-32"));
  }
  const std::string deflated = read_file(golden_file("seed002.deflated.keras"));
  const entry_bytes e = locate(deflated, "model.weights.h5");
  // A flipped byte in the DEFLATE data: zlib's error or the CRC-32, for the entry.
  for (std::size_t offset : {std::size_t{100}, std::size_t{90000}, std::size_t{187000}}) {
    INFO("flipped at " << offset << " of the entry's data");
    std::string b = deflated;
    b[e.data + offset] = static_cast<char>(b[e.data + offset] ^ 0x20);
    CHECK_THAT(load_error(b),
               Catch::Contains("bad.keras") && Catch::Contains("entry 'model.weights.h5'"));
  }
  // The recorded size one byte more than the data inflates to; and a size no model compresses
  // from (a zip bomb).
  {
    std::string b = deflated;
    put_u32(b, e.central + 24, static_cast<std::uint32_t>(weights_size + 1));
    CHECK_THAT(load_error(b), Catch::Contains("entry 'model.weights.h5'") &&
                                  Catch::Contains("DEFLATE data is damaged"));
    put_u32(b, e.central + 24, 0x7fffffff);
    CHECK_THAT(load_error(b),
               Catch::Contains("entry 'model.weights.h5'") && Catch::Contains("implausibly large"));
  }
  CHECK(weights_of(r) == before);  // nothing loaded from any of them
}

TEST_CASE("keras archive: a model of the same shapes and another config is refused",
          "[saving][keras_archive]") {
  // Every variable has the shape of the model's own, so only the config check finds that the
  // archive is another model's; nothing may load.
  temp_dir dir;
  seed001::tanh_model t;
  t.compile(optimizers::adam{}, losses::sparse_categorical_crossentropy{.from_logits = true});
  t.save((dir / "tanh.keras").string());
  seed001::model r;
  seed001::compile(r);
  const auto before = weights_of(r);
  CHECK_THAT(message_of([&] { r.load_weights((dir / "tanh.keras").string()); }),
             Catch::Contains("tanh.keras") && Catch::Contains("layer 0 ('dense', Dense) differs") &&
                 Catch::Contains("activation is \"tanh\" in the file and \"relu\" in this model"));
  CHECK(weights_of(r) == before);
  // Its weights alone (a .weights.h5 file has no config) load: the check is the archive's.
  t.save_weights((dir / "tanh.weights.h5").string());
  r.load_weights((dir / "tanh.weights.h5").string());
  CHECK(weights_of(r) == weights_of(t));
}

TEST_CASE("keras archive: a config.json of the wrong JSON types is an error, never a crash",
          "[saving][keras_archive]") {
  // Keras's seeds/002 archive with its config.json altered: names and classes of other JSON types,
  // a layer without its config or not an object. Each is a value_error naming the archive (none
  // is nlohmann's exception or a read of a key that is not there), and nothing loads.
  namespace zip = tessel::saving::zip;
  using nlohmann::json;
  temp_dir dir;
  zip::reader keras(golden_file("seed002.keras"));
  const json config = json::parse(keras.read("config.json", "the config"));
  const std::string metadata = keras.read("metadata.json", "the metadata");
  const std::string weights = keras.read("model.weights.h5", "the weights");
  seed002::model r;
  const auto before = weights_of(r);
  const auto error_with = [&](auto&& harm) {
    json c = config;
    harm(c["config"]["layers"], c);
    const fs::path p = dir / "altered.keras";
    {
      std::ofstream out(p, std::ios::binary | std::ios::trunc);
      zip::writer z(out, p.string());
      z.add("metadata.json", metadata);
      z.add("config.json", c.dump());
      z.add("model.weights.h5", weights);
      z.finish();
    }
    return message_of([&] { r.load_weights(p.string()); });
  };
  using Catch::Contains;
  CHECK_THAT(error_with([](json&, json& c) { c["class_name"] = 7; }),
             Contains("altered.keras") && Contains("the file holds a ? model"));
  CHECK_THAT(error_with([](json& l, json&) { l[3]["class_name"] = nullptr; }),
             Contains("altered.keras") &&
                 Contains("layer 2 ('batch_normalization', BatchNormalization) differs"));
  CHECK_THAT(error_with([](json& l, json&) { l[5].erase("config"); }),
             Contains("altered.keras") && Contains("layer 4 ('conv2d_1', Conv2D) has no config"));
  // A layer that reads one of no name: every layer is looked at for that name, the damaged too.
  const auto history = [](json& layer) -> json& {
    return layer["inbound_nodes"][0]["args"][0]["config"]["keras_history"][0];
  };
  CHECK_THAT(error_with([&](json& l, json&) {
               l[5].erase("config");
               history(l[3]) = "missing";
             }),
             Contains("altered.keras") && Contains("layer 2 ('batch_normalization', "
                                                   "BatchNormalization) differs: it reads other "
                                                   "layers in the file"));
  CHECK_THAT(error_with([&](json& l, json&) {
               l[4] = "re_lu";
               history(l[1]) = "missing";
             }),
             Contains("altered.keras") && Contains("layer 0 ('rescaling', Rescaling) differs: it "
                                                   "reads other layers in the file"));
  CHECK_THAT(error_with([](json& l, json&) { l[2]["name"] = l[2]["config"]["name"] = 12; }),
             Contains("altered.keras") && Contains("layer 2 ('batch_normalization', "
                                                   "BatchNormalization) differs: it reads other "
                                                   "layers in the file"));
  CHECK_THAT(error_with([](json& l, json&) { l[4] = "re_lu"; }),
             Contains("altered.keras") &&
                 Contains("layer 3 ('re_lu', ReLU) differs: the file has a ? layer there"));
  CHECK(weights_of(r) == before);
}

TEST_CASE("keras archive: the fuzz harness's models are tessel's configs",
          "[saving][keras_archive]") {
  // tests/fuzz/fuzz_keras_config.cpp compares configs with these two models' (clang++ cannot
  // build tessel's models, so it reads them from tests/fuzz/keras_config_*.json).
  using mlp = tessel::sequential<tessel::one_device, input<784>, dense<256, {.activation = "relu"}>,
                                 dropout<0.2>, dense<10>>;
  const std::string fuzz_dir = tessel::testing::golden::golden_dir() + "/../fuzz/";
  const auto file = [&](const std::string& name) {
    return nlohmann::json::parse(read_file(fuzz_dir + "keras_config_" + name + ".json"));
  };
  seed002::model c;
  mlp s;
  CHECK(
      file("functional") ==
      nlohmann::json::parse(tessel::saving::model_config_json<seed002::model>(c.name(), nullptr)));
  CHECK(file("sequential") ==
        nlohmann::json::parse(tessel::saving::model_config_json<mlp>(s.name(), nullptr)));
}

TEST_CASE("keras archive: a DEFLATE entry as compressed as DEFLATE allows is read",
          "[saving][keras_archive]") {
  // 48 MiB of zeros deflate 1029:1 (zlib, level 9): the zip-bomb check refused every entry of
  // more than 1000 bytes per compressed byte (plus 1 MiB), as a mostly-zero weights file can be.
  // It now refuses only what DEFLATE cannot make: more than 1032 bytes per compressed byte.
  const std::string zeros(std::size_t{48} << 20, '\0');
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string data(deflateBound(&z, zeros.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
  z.avail_in = static_cast<uInt>(zeros.size());
  z.next_out = reinterpret_cast<Bytef*>(data.data());
  z.avail_out = static_cast<uInt>(data.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  data.resize(z.total_out);
  deflateEnd(&z);
  REQUIRE(zeros.size() > 1000 * data.size() + (1u << 20));
  // The archive as Python's zipfile writes a ZIP_DEFLATED entry.
  const std::string name = "zeros";
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(zeros.data()), static_cast<uInt>(zeros.size())));
  std::string b;
  const auto put = [&](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  const auto header = [&](bool central) {
    put(central ? 0x02014b50 : 0x04034b50, 4);
    if (central) put(20, 2);  // made by
    // needed, flags, method, time, date
    for (std::uint64_t v : {20, 0, 8, 0, 0x21}) put(v, 2);
    put(crc, 4);
    put(data.size(), 4);
    put(zeros.size(), 4);
    put(name.size(), 2);
    put(0, 2);  // extra
    if (central)
      for (int bytes : {2, 2, 2, 4, 4}) put(0, bytes);  // comment, disk, attributes, offset 0
    b += name;
  };
  header(false);
  b += data;
  const std::size_t directory = b.size();
  header(true);
  const std::size_t directory_size = b.size() - directory;
  for (std::uint64_t v : {0x06054b50, 0}) put(v, 4);
  for (std::uint64_t v : {1, 1}) put(v, 2);
  put(directory_size, 4);
  put(directory, 4);
  put(0, 2);
  temp_dir dir;
  write_file(dir / "zeros.zip", b);
  tessel::saving::zip::reader r(dir / "zeros.zip");
  CHECK(r.read("zeros", "zeros") == zeros);
  // One byte more than DEFLATE can make of the data is refused before anything is allocated.
  put_u32(b, directory + 24, static_cast<std::uint32_t>(1032 * data.size() + 1));
  write_file(dir / "bomb.zip", b);
  tessel::saving::zip::reader bomb(dir / "bomb.zip");
  CHECK_THROWS_WITH(bomb.read("zeros", "zeros"), Catch::Contains("implausibly large"));
}
