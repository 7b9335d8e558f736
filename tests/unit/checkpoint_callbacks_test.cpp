// The saving callbacks' own logic (trainer/checkpoint_callbacks.hpp): model_checkpoint's filepath
// formatting as Python's str.format does it for Keras (`{epoch:02d}`, `{val_loss:.2f}`, the
// epoch and batch counted from 1, a float's repr, Keras's KeyError text), its argument checks
// with Keras's messages, and save_freq's two spellings; latest_checkpoint; model_checkpoint's
// files through fit; backup_and_restore's fall back from each kind of damaged backup.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
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
