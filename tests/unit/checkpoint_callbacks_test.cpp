// The saving callbacks' own logic (trainer/checkpoint_callbacks.hpp): model_checkpoint's filepath
// formatting as Python's str.format does it for Keras (`{epoch:02d}`, `{val_loss:.2f}`, the
// epoch and batch counted from 1, a float's repr, Keras's KeyError text), its argument checks
// with Keras's messages, and save_freq's two spellings; latest_checkpoint; model_checkpoint's
// files through fit; backup_and_restore's fall back from each kind of damaged backup.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>

using tessel::callbacks::format_filepath;

TEST_CASE("model_checkpoint: filepaths formatted as Keras formats them", "[callbacks][saving]") {
  const tessel::logs l{{"loss", 0.2275}, {"val_loss", 0.1361425}, {"accuracy", 0.932}};
  CHECK(format_filepath("ckpt/ckpt-{epoch}.keras", 0, std::nullopt, l) == "ckpt/ckpt-1.keras");
  CHECK(format_filepath("ckpt-{epoch:02d}-{val_loss:.2f}.weights.h5", 4, std::nullopt, l) ==
        "ckpt-05-0.14.weights.h5");
  CHECK(format_filepath("w-{epoch:03d}-{batch}.weights.h5", 11, 99, l) ==
        "w-012-100.weights.h5");
  CHECK(format_filepath("m-{val_loss}.keras", 0, std::nullopt, l) == "m-0.1361425.keras");
  CHECK(format_filepath("m-{accuracy:.1%}-{loss:.3e}.keras", 0, std::nullopt, l) ==
        "m-93.2%-2.275e-01.keras");
  CHECK(format_filepath("m-{epoch:4}-{{literal}}.keras", 6, std::nullopt, l) ==
        "m-   7-{literal}.keras");
  CHECK_THROWS_WITH(format_filepath("m-{val_acc}.keras", 0, std::nullopt, l),
                    "Failed to format this callback filepath: \"m-{val_acc}.keras\". "
                    "Reason: 'val_acc'");
  // {batch} only where a batch is being saved, as Keras's format has it only then.
  CHECK_THROWS_WITH(format_filepath("m-{batch}.keras", 0, std::nullopt, l),
                    Catch::Contains("Reason: 'batch'"));
  CHECK_THROWS_WITH(format_filepath("m-{loss:d}.keras", 0, std::nullopt, l),
                    Catch::Contains("Unknown format code 'd' for object of type 'float'"));
}

TEST_CASE("model_checkpoint and backup_and_restore: arguments checked as Keras checks them",
          "[callbacks][saving]") {
  using tessel::callbacks::backup_and_restore;
  using tessel::callbacks::model_checkpoint;
  CHECK_THROWS_WITH(model_checkpoint({.filepath = "w.h5", .save_weights_only = true}),
                    "When using `save_weights_only=True` in `ModelCheckpoint`, the filepath "
                    "provided must end in `.weights.h5` (Keras weights format). Received: "
                    "filepath=w.h5");
  CHECK_THROWS_WITH(model_checkpoint({.filepath = "model.tf"}),
                    "The filepath provided must end in `.keras` (Keras model format). Received: "
                    "filepath=model.tf");
  CHECK_THROWS_WITH(model_checkpoint({.filepath = "m.keras", .mode = "up"}),
                    Catch::Contains("mode 'up' is unknown"));
  CHECK_THROWS_WITH(model_checkpoint({.filepath = "model.h5"}),
                    Catch::Contains("not Keras's legacy `.h5` format"));
  CHECK_NOTHROW(model_checkpoint({.filepath = "m-{epoch}.keras", .save_freq = 100}));
  CHECK_NOTHROW(model_checkpoint({.filepath = "w.weights.h5", .save_weights_only = true,
                                  .save_freq = "epoch"}));
  CHECK_THROWS_WITH(backup_and_restore({.backup_dir = ""}), "Empty `backup_dir` argument passed");
  CHECK_THROWS_WITH(backup_and_restore({.backup_dir = "b", .save_freq = "batch"}),
                    Catch::Contains("Expected either 'epoch' or an integer value."));
  CHECK_THROWS_WITH(backup_and_restore({.backup_dir = "b", .save_freq = 0}),
                    Catch::Contains("Received: save_freq=0"));
}

TEST_CASE("latest_checkpoint: the newest complete checkpoint in a directory", "[saving]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessel_latest_" + std::to_string(getpid()));
  fs::remove_all(dir);
  CHECK(tessel::latest_checkpoint(dir).empty());  // no directory
  fs::create_directories(dir);
  CHECK(tessel::latest_checkpoint(dir).empty());
  const auto touch = [&](const fs::path& p, int age_seconds) {
    std::ofstream(p) << "x";
    fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::seconds(age_seconds));
  };
  touch(dir / "ckpt-1.weights.h5", 30);
  touch(dir / "ckpt-2.keras", 20);
  touch(dir / "notes.txt", 1);
  touch(dir / "ckpt-3.weights.h5.tmp.123", 1);  // a save that did not finish
  CHECK(tessel::latest_checkpoint(dir) == dir / "ckpt-2.keras");
  fs::create_directories(dir / "checkpoint-4.partial");  // a staging directory, even with its
  touch(dir / "checkpoint-4.partial" / "manifest.json", 0);  // manifest, is not a checkpoint
  fs::create_directories(dir / "checkpoint-5");
  CHECK(tessel::latest_checkpoint(dir) == dir / "ckpt-2.keras");  // checkpoint-5 is unfinished
  touch(dir / "checkpoint-5" / "manifest.json", 5);
  fs::last_write_time(dir / "checkpoint-5", fs::file_time_type::clock::now() - std::chrono::seconds(10));
  CHECK(tessel::latest_checkpoint(dir) == dir / "checkpoint-5");
  fs::remove_all(dir);
}

TEST_CASE("model_checkpoint: the files fit writes, and what they hold", "[callbacks][saving]") {
  // save_best_only on val_loss: a file per improving epoch, named by the epoch and the value;
  // each holds that epoch's weights (a fresh model loading it predicts as the model did then).
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<6>, dense<8, {.activation = "tanh"}>,
                                     dense<3, {.activation = "softmax"}>>;
  const fs::path dir = fs::temp_directory_path() / ("tessel_mc_" + std::to_string(getpid()));
  fs::remove_all(dir);
  tessel::array<float> x({48, 6});
  tessel::array<std::int32_t> y({48});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>((i * 37) % 11) / 11;
  for (std::size_t r = 0; r < 48; ++r) y.values[r] = static_cast<std::int32_t>((r * 7) % 3);
  model_t model;
  model.compile(tessel::optimizers::adam{.learning_rate = 0.5},
                tessel::losses::sparse_categorical_crossentropy{});
  std::vector<double> val_losses;
  std::vector<std::vector<float>> predictions;
  tessel::callbacks::lambda_callback record({.on_epoch_end = [&](std::size_t, const tessel::logs& l) {
    val_losses.push_back(*tessel::find_log(l, "val_loss"));
    predictions.push_back(model.predict(x, 16, 0).values);
  }});
  // Validation labels partly unlike the training labels, and a large step: val_loss does not
  // improve at every epoch (measured: 1.662, 1.252, 1.123, 1.154, 1.118, 1.103).
  tessel::array<std::int32_t> yv = y;
  for (std::size_t r = 0; r < 48; r += 2) yv.values[r] = static_cast<std::int32_t>((r * 5 + 1) % 3);
  const auto val = tessel::from_tensor_slices(x, yv).batch(16);
  model.fit(tessel::from_tensor_slices(x, y).batch(8),
            {.epochs = 6, .verbose = 0,
             .callbacks = {tessel::callbacks::model_checkpoint(
                               {.filepath = (dir / "w-{epoch:02d}-{val_loss:.3f}.weights.h5").string(),
                                .save_best_only = true, .save_weights_only = true}),
                           record},
             .validation_data = val});
  REQUIRE(val_losses.size() == 6);
  double best = 1e300;
  std::size_t files = 0;
  for (std::size_t e = 0; e < 6; ++e) {
    char name[64];
    std::snprintf(name, sizeof name, "w-%02zu-%.3f.weights.h5", e + 1, val_losses[e]);
    const bool improved = val_losses[e] < best;
    INFO("epoch " << e + 1 << " val_loss " << val_losses[e]);
    CHECK(fs::exists(dir / name) == improved);
    if (!improved) continue;
    best = val_losses[e];
    ++files;
    model_t fresh;
    fresh.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    fresh.load_weights((dir / name).string());
    CHECK(fresh.predict(x, 16, 0).values == predictions[e]);
  }
  CHECK(files >= 2);
  CHECK(files < 6);
  CHECK(static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), {})) == files);
  fs::remove_all(dir);
}

TEST_CASE("backup_and_restore: a damaged newest backup falls back to the one before",
          "[callbacks][saving]") {
  // Two backups kept (double_checkpoint); the newest damaged in each way the restart must
  // survive: it restores the previous backup and goes on from its position.
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<6>, dense<8, {.activation = "relu"}>,
                                     dropout<0.25>, dense<3, {.activation = "softmax"}>>;
  const fs::path root = fs::temp_directory_path() / ("tessel_bar_" + std::to_string(getpid()));
  fs::remove_all(root);
  tessel::array<float> x({64, 6});
  tessel::array<std::int32_t> y({64});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>((i * 37) % 11) / 11;
  for (std::size_t r = 0; r < 64; ++r) y.values[r] = static_cast<std::int32_t>((r * 7) % 3);
  const auto fit = [&](const fs::path& dir, std::size_t epochs) {
    model_t model;
    model.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    tessel::callbacks::backup_and_restore backup({.backup_dir = dir.string(), .save_freq = 3,
                                                  .delete_checkpoint = false,
                                                  .double_checkpoint = true});
    model.fit(x, y, {.batch_size = 8, .epochs = epochs, .verbose = 0, .callbacks = {backup}});
    return backup.restored_position();
  };
  fit(root / "pristine", 1);  // 8 batches: backups after batches 3 and 6
  REQUIRE(fs::exists(root / "pristine" / "checkpoint-1" / "manifest.json"));
  REQUIRE(fs::exists(root / "pristine" / "checkpoint-2" / "manifest.json"));
  const auto edit_manifest = [](const fs::path& m, auto&& change) {
    std::ifstream in(m);
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    change(j);
    std::ofstream(m, std::ios::trunc) << j.dump();
  };
  struct damage {
    const char* what;
    std::function<void(const fs::path&)> harm;
  };
  const damage cases[] = {
      {"a truncated shard",
       [](const fs::path& c) { fs::resize_file(c / "shard-00000.bin", 10); }},
      {"flipped bytes",
       [](const fs::path& c) {
         std::fstream f(c / "shard-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(20);
         f.put('\x7f');
         f.put('\x01');
       }},
      {"the wrong model",
       [&](const fs::path& c) {
         edit_manifest(c / "manifest.json", [](nlohmann::json& j) {
           j["variables"][0]["shape"] = {7, 8};
         });
       }},
      {"a missing variable",
       [&](const fs::path& c) {
         edit_manifest(c / "manifest.json",
                       [](nlohmann::json& j) { j["variables"].erase(j["variables"].begin()); });
       }},
      {"a checkpoint without its manifest",
       [](const fs::path& c) { fs::remove(c / "manifest.json"); }},
      {"a manifest whose shards are missing",
       [](const fs::path& c) { fs::remove(c / "shard-00000.bin"); }},
      {"damaged metadata",
       [&](const fs::path& c) {
         edit_manifest(c / "manifest.json",
                       [](nlohmann::json& j) { j["metadata"]["batch"] = "6"; });
       }},
  };
  for (const damage& d : cases) {
    INFO(d.what);
    const fs::path dir = root / "run";
    fs::remove_all(dir);
    fs::copy(root / "pristine", dir, fs::copy_options::recursive);
    d.harm(dir / "checkpoint-2");
    const tessel::training_position p = fit(dir, 1);
    CHECK(p.epoch == 0);
    CHECK(p.step == 3);  // checkpoint-1's: after batch 3
  }
  // What the errors say, loading directly.
  {
    const fs::path c = root / "missing";
    fs::remove_all(c);
    fs::copy(root / "pristine" / "checkpoint-2", c, fs::copy_options::recursive);
    edit_manifest(c / "manifest.json",
                  [](nlohmann::json& j) { j["variables"].erase(j["variables"].begin()); });
    model_t model;
    model.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    CHECK_THROWS_WITH(tessel::load_checkpoint(model, c),
                      Catch::Contains("it lacks the model's 'dense/kernel'"));
  }
  // Without double_checkpoint's second backup, the damage is the error.
  const fs::path dir = root / "single";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(root / "pristine" / "checkpoint-2", dir / "checkpoint-2", fs::copy_options::recursive);
  fs::resize_file(dir / "checkpoint-2" / "shard-00000.bin", 10);
  CHECK_THROWS_WITH(fit(dir, 1), Catch::Contains("shard-00000.bin") &&
                                     Catch::Contains("restore from another checkpoint"));
  fs::remove_all(root);
}

TEST_CASE("load_checkpoint: a damaged manifest is a clear error, never a crash or a wrong load",
          "[saving]") {
  // A checkpoint of a small model, its manifest altered in ways fuzz_checkpoint_manifest
  // (tests/fuzz) reaches: values of the wrong JSON type (nlohmann's exceptions escaped), a file
  // outside the checkpoint's directory (read), two blocks at the same place leaving rows
  // unwritten (loaded as zeros). Each is a tessel error naming the manifest; the model keeps its
  // state.
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<6>, dense<4>, dense<3>>;
  using nlohmann::json;
  const fs::path root = fs::temp_directory_path() / ("tessel_manifest_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  model_t saved;
  saved.compile({.optimizer = "adam", .loss = "mse"});
  tessel::array<float> x({8, 6}), y({8, 3});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 7) / 7;
  for (std::size_t i = 0; i < y.size(); ++i) y.values[i] = static_cast<float>(i % 3) / 3;
  saved.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0});
  tessel::save_checkpoint(saved, root / "pristine", json{{"epoch", 1}});
  std::ifstream in(root / "pristine" / "manifest.json");
  const json pristine = json::parse(in);
  model_t model;
  model.compile({.optimizer = "adam", .loss = "mse"});
  const auto before = model.get_weights();
  // The error of loading the checkpoint with its manifest changed; other exceptions escape.
  const auto load_error = [&](auto&& change) {
    const fs::path c = root / "damaged";
    fs::remove_all(c);
    fs::copy(root / "pristine", c);
    json m = pristine;
    change(m);
    std::ofstream(c / "manifest.json", std::ios::trunc) << m.dump();
    try {
      tessel::load_checkpoint(model, c);
    } catch (const tessel::runtime_error& e) {
      return std::string(e.what());
    } catch (const tessel::value_error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  const std::string manifest = (root / "damaged" / "manifest.json").string();
  const auto check_damaged = [&](const std::string& error, const std::string& what) {
    CHECK_THAT(error, Catch::Contains(manifest) &&
                          Catch::Contains("restore from another checkpoint") &&
                          Catch::Contains(what));
  };
  check_damaged(load_error([](json& m) { m["variables"][0]["shape"] = "6x4"; }), "has no shape");
  check_damaged(load_error([](json& m) { m["variables"][0]["blocks"][0]["at"] = -4; }),
                "has no place in its file");
  check_damaged(load_error([](json& m) { m.erase("files"); }), "has no list of its files");
  CHECK_THAT(load_error([](json& m) { m = json::array({m}); }),
             Catch::Contains("is not a tessel checkpoint manifest"));
  check_damaged(load_error([](json& m) {
                  for (json& v : m["variables"])
                    if (v["path"] == "adam/iteration") v["value"] = "12";
                }),
                "'adam/iteration'), an int64 scalar, has no int64 value");
  // A shard outside the directory (a copy of the real one, which would load) is never read.
  fs::copy_file(root / "pristine" / "shard-00000.bin", root / "outside.bin");
  check_damaged(load_error([](json& m) {
                  m["files"]["../outside.bin"] = m["files"]["shard-00000.bin"];
                  for (json& v : m["variables"])
                    if (v.contains("blocks"))
                      for (json& b : v["blocks"]) b["file"] = "../outside.bin";
                }),
                "'../outside.bin', which is not the name of a file");
  // The first kernel's block as two blocks of its first rows (their checksums right): the
  // values copied add up to the kernel's, and its last rows would load as zeros.
  std::ifstream shard(root / "pristine" / "shard-00000.bin", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(shard), std::istreambuf_iterator<char>()};
  check_damaged(load_error([&](json& m) {
                  json& k = m["variables"][0];
                  REQUIRE(k["path"] == "dense/kernel");
                  REQUIRE(k["shape"] == json::array({6, 4}));
                  json b = k["blocks"][0];
                  b["extent"] = {3, 4};
                  b["chunks"] = {tessel::saving::detail::crc32_of(
                      bytes.data() + b["at"].get<std::size_t>(), 3 * 4 * sizeof(float))};
                  k["blocks"] = {b, b};
                }),
                "'dense/kernel')'s blocks 0 and 1 overlap");
  CHECK(model.get_weights() == before);
  fs::remove_all(root);
}

TEST_CASE("load_checkpoint: a float64 scalar that is not finite survives the round trip",
          "[saving]") {
  // A NaN loss makes the loss metric's float64 total NaN, which JSON cannot hold: nlohmann
  // wrote it as null and the load failed on it with nlohmann's type_error. It is saved as "nan"
  // (and "inf", "-inf") and read back as it was; a null is read as NaN.
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<2>, dense<1>>;
  const fs::path dir = fs::temp_directory_path() / ("tessel_nan_" + std::to_string(getpid()));
  fs::remove_all(dir);
  model_t m;
  m.compile({.optimizer = "sgd", .loss = "mse"});
  tessel::array<float> x({4, 2}), y({4, 1});
  x.values.assign(8, std::numeric_limits<float>::quiet_NaN());
  y.values.assign(4, 1.0f);
  m.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0});
  const auto total = [](auto& model) {
    for (const auto& v : model.get_state_tree().metrics_variables)
      if (v.path == "loss/total") return v.real();
    FAIL("no loss/total");
    return 0.0;
  };
  REQUIRE(std::isnan(total(m)));
  tessel::save_checkpoint(m, dir);
  model_t r;
  r.compile({.optimizer = "sgd", .loss = "mse"});
  tessel::load_checkpoint(r, dir);
  CHECK(std::isnan(total(r)));
  fs::remove_all(dir);
}

TEST_CASE("backup_and_restore: the metadata of a backup, checked", "[callbacks][saving]") {
  // Where fit goes on from, as backup_and_restore saves it; anything else is an error naming the
  // backup (nlohmann's exceptions escaped fit, and a negative or fractional count was converted).
  using tessel::callbacks::detail::backup_position;
  const tessel::training_position p =
      backup_position(R"({"batch": 5, "data_pass": 7, "epoch": 2})", "b/checkpoint-3");
  CHECK(p.epoch == 2);
  CHECK(p.step == 5);
  CHECK(p.data_pass == 7);
  // The training data's description, when the backup has one.
  const tessel::training_position d = backup_position(
      R"({"batch": 5, "data_pass": 7, "epoch": 2, "data": [{"what": "the batch size",
          "value": 8, "kind": "number"}, {"what": "the values of x", "value": 12345,
          "kind": "fingerprint"}]})",
      "b/checkpoint-3");
  REQUIRE(d.data.size() == 2);
  CHECK(d.data[0].what == "the batch size");
  CHECK(d.data[0].value == 8);
  CHECK(d.data[1].shown == tessel::fact::kind::fingerprint);
  for (const char* metadata :
       {R"({"batch": 5, "data_pass": 7, "epoch": 2, "data": 3})",
        R"({"batch": 5, "data_pass": 7, "epoch": 2, "data": [{"what": "b", "value": -1,
            "kind": "number"}]})",
        R"({"batch": 5, "data_pass": 7, "epoch": 2, "data": [{"what": "b", "value": 1,
            "kind": "colour"}]})",
        R"({"batch": -1, "data_pass": 7, "epoch": 2})",
        R"({"batch": 1.5, "data_pass": 7, "epoch": 2})", R"({"batch": 5, "data_pass": 7})",
        R"({"batch": 5, "data_pass": "7", "epoch": 2})", "null", "[5, 7, 2]", "{\"batch\": 5"}) {
    INFO(metadata);
    CHECK_THROWS_AS(backup_position(metadata, "b/checkpoint-3"), tessel::runtime_error);
    CHECK_THROWS_WITH(backup_position(metadata, "b/checkpoint-3"),
                      Catch::Contains("The backup 'b/checkpoint-3' is damaged: its metadata") &&
                          Catch::Contains("restore from another checkpoint"));
  }
}

TEST_CASE("model_checkpoint: a long width is formatted whole, a width past a path's is refused",
          "[callbacks][saving]") {
  const tessel::logs l{{"val_loss", 0.5}};
  // Python: "{:0200d}".format(3) is 200 characters (a fixed buffer cut it at 127).
  const std::string long_width = format_filepath("{epoch:0200d}", 2, std::nullopt, l);
  CHECK(long_width == std::string(199, '0') + "3");
  CHECK(format_filepath("{val_loss:.150f}", 0, std::nullopt, l).size() == 152);
  // A width that overflowed an int (undefined behaviour) is an error naming the field.
  CHECK_THROWS_WITH(format_filepath("{epoch:99999999999999d}", 0, std::nullopt, l),
                    Catch::Contains("width") && Catch::Contains("'epoch'"));
  CHECK_THROWS_WITH(format_filepath("{val_loss:.99999999999f}", 0, std::nullopt, l),
                    Catch::Contains("precision") && Catch::Contains("'val_loss'"));
}

TEST_CASE("backup_and_restore: a name like a backup's with a number past 64 bits is not one",
          "[callbacks][saving]") {
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<4>, dense<2>>;
  const fs::path dir =
      fs::temp_directory_path() / ("tessel_bar_big_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "checkpoint-99999999999999999999");  // std::stoull threw here
  tessel::array<float> x({16, 4}), y({16, 2});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 5);
  model_t model;
  model.compile({.optimizer = "sgd", .loss = "mse"});
  tessel::callbacks::backup_and_restore backup(
      {.backup_dir = dir.string(), .save_freq = 2, .delete_checkpoint = false});
  CHECK_NOTHROW(model.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0,
                                 .callbacks = {backup}}));
  CHECK(fs::exists(dir / "checkpoint-99999999999999999999"));  // not ours: left alone
  CHECK(fs::exists(dir / "checkpoint-2" / "manifest.json"));  // ours: the newest kept
  fs::remove_all(dir);
}
