// The saving callbacks' own logic (trainer/checkpoint_callbacks.hpp): model_checkpoint's filepath
// formatting as Python's str.format does it for Keras (`{epoch:02d}`, `{val_loss:.2f}`, the
// epoch and batch counted from 1, a float's repr, Keras's KeyError text), its argument checks
// with Keras's messages, and save_freq's two spellings; latest_checkpoint.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
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
  fs::create_directories(dir / "checkpoint-4.partial");  // unfinished: no manifest
  fs::create_directories(dir / "checkpoint-5");
  CHECK(tessel::latest_checkpoint(dir) == dir / "ckpt-2.keras");  // checkpoint-5 is unfinished
  touch(dir / "checkpoint-5" / "manifest.json", 5);
  fs::last_write_time(dir / "checkpoint-5", fs::file_time_type::clock::now() - std::chrono::seconds(10));
  CHECK(tessel::latest_checkpoint(dir) == dir / "checkpoint-5");
  fs::remove_all(dir);
}
