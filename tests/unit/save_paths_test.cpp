// What a save does with the user's files, and what a resume does with changed data: a save
// onto a full disk is the system's error and leaves nothing (.weights.h5, .keras); sharded
// weights are saved and loaded as one set; save_checkpoint removes or replaces nothing it did
// not write; backup_and_restore refuses a mid-epoch resume over other training data. Built also
// with ASan+UBSan in every build (tests/sanitize, sanitize.save_paths_test).
#include <hdf5.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "keras_models.hpp"
#include "test_helpers.hpp"

namespace {

using namespace tessel::layers;
using tessel::array;
using tessel::testing::message_of;
using tessel::testing::temp_dir;
namespace fs = std::filesystem;
namespace seed001 = tessel::testing::keras_models::seed001;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::vector<float>> weights_of(const auto& m) {
  std::vector<std::vector<float>> out;
  for (const auto& w : m.get_weights()) out.push_back(w.values);
  return out;
}

}  // namespace

namespace {
// Runs `f` in a child process whose files may grow to `limit` bytes alone (RLIMIT_FSIZE, with
// SIGXFSZ ignored: a write past it fails with EFBIG, as one onto a full disk fails with ENOSPC),
// then shuts libhdf5 down there as its exit handler does (H5close), and returns what f returned,
// "H5close failed" if it did, and the signal the child ended on, if any.
std::string with_file_size_limit(rlim_t limit, const std::function<std::string()>& f) {
  return tessel::testing::in_child_process([&] {
    const rlimit l{limit, limit};
    if (std::signal(SIGXFSZ, SIG_IGN) == SIG_ERR || ::setrlimit(RLIMIT_FSIZE, &l) != 0)
      return std::string("could not limit the file size");
    std::string out;
    try {
      out = f();
    } catch (const std::exception& e) {
      out = e.what();
    }
    if (H5close() < 0) out += "; H5close failed";
    return out;
  });
}
}  // namespace

TEST_CASE("saving: a weights file onto a full disk is the system's error, and nothing is left",
          "[saving]") {
  // libhdf5 wrote the file itself: when the disk filled, its H5Fclose failed, the file stayed
  // open inside libhdf5 (its temporary name removed under it), and the process died with SIGSEGV
  // in libhdf5's exit handler after printing the error. Now libhdf5 builds the file in memory and
  // tessel writes it: the error names the system's cause, the library closes cleanly, and no
  // file is left. Each limit stops the write at another place (the start, the superblock, the
  // data, tessel's checksum trailer of the 242,712-byte file).
  temp_dir dir;
  for (const rlim_t limit : {rlim_t{0}, rlim_t{1024}, rlim_t{120000}, rlim_t{242700}}) {
    INFO("file size limit " << limit);
    const std::string out = with_file_size_limit(limit, [&] {
      tessel::sequential<input<64>, dense<256, {.activation = "relu"}>, dense<10>> model;
      model.compile({.optimizer = "adam", .loss = "mse"});
      model.train_on_batch(array<float>({4, 64}), array<float>({4, 10}));
      model.save_weights((dir / "full.weights.h5").string());
      return std::string("saved");
    });
    CHECK_THAT(out, Catch::Contains("Cannot write the weights file") &&
                        Catch::Contains("File too large") && !Catch::Contains("signal") &&
                        !Catch::Contains("H5close failed"));
    CHECK(fs::is_empty(dir.path));
  }
  // With room, the same save is whole.
  const std::string out = with_file_size_limit(1u << 22, [&] {
    tessel::sequential<input<64>, dense<256, {.activation = "relu"}>, dense<10>> model;
    model.compile({.optimizer = "adam", .loss = "mse"});
    model.train_on_batch(array<float>({4, 64}), array<float>({4, 10}));
    model.save_weights((dir / "room.weights.h5").string());
    return std::string("saved");
  });
  CHECK(out == "saved");
  CHECK(fs::exists(dir / "room.weights.h5"));
  CHECK(fs::file_size(dir / "room.weights.h5") == 242712);  // the limits above fall inside it
}

TEST_CASE("keras archive: a write that fails names the system's cause", "[saving][keras_archive]") {
  // An archive onto a full disk said only "cannot write entry 'model.weights.h5'". /dev/full
  // fails every write with ENOSPC, as a full disk does.
  REQUIRE(std::filesystem::exists("/dev/full"));
  std::ofstream out("/dev/full", std::ios::binary);
  REQUIRE(out);
  tessel::saving::zip::writer z(out, "/dev/full");
  const std::string data(std::size_t{1} << 20, 'w');  // past the stream's buffer
  try {
    z.add("model.weights.h5", data);
    z.finish();
    FAIL("no error writing to /dev/full");
  } catch (const tessel::runtime_error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("cannot write") != std::string::npos);
    CHECK(m.find("No space left on device") != std::string::npos);
    CHECK(m.find("is the disk full?") != std::string::npos);
  }
}

TEST_CASE("keras archive: sharded weights are saved and loaded as one set",
          "[saving][keras_archive]") {
  // A save wrote each shard over the old one in turn and the index last: one that failed
  // part-way left new shards beside the old index, and a load took the mix (new weights, old
  // optimizer slots) without a word. Now the old set stays whole until every new shard is
  // written, and the index's sums refuse a shard of another save.
  temp_dir dir;
  const fs::path index = dir / "s.weights.json";
  seed001::model a, b;
  seed001::compile(a);
  seed001::compile(b);
  b.set_weights([&] {
    auto w = b.get_weights();
    for (auto& t : w)
      for (auto& v : t.values) v += 0.5f;
    return w;
  }());
  a.save_weights(index.string(), {.max_shard_size = 1.0 / 1024});
  REQUIRE(fs::exists(dir / "s_00001.weights.h5"));
  const auto j = nlohmann::json::parse(read_file(index));
  CHECK(j["tessel_shards"]["s_00000.weights.h5"]["crc32"].is_number_unsigned());
  const std::string old_index = read_file(index), old_first = read_file(dir / "s_00000.weights.h5");

  // The second shard cannot be written (its temporary name is taken by a directory): the old
  // set is whole, no temporary file is left, and it loads a's weights.
  const fs::path blocked = tessel::saving::temporary_path(dir / "s_00001.weights.h5");
  fs::create_directory(blocked);
  CHECK_THROWS_WITH(b.save_weights(index.string(), {.max_shard_size = 1.0 / 1024}),
                    Catch::Contains("s_00001.weights.h5.tmp"));
  CHECK(fs::is_directory(blocked));  // not tessel's: left
  fs::remove(blocked);
  CHECK(read_file(index) == old_index);
  CHECK(read_file(dir / "s_00000.weights.h5") == old_first);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1 + j["tessel_shards"].size());
  seed001::model r;
  seed001::compile(r);
  r.load_weights(index.string());
  CHECK(weights_of(r) == weights_of(a));

  // A shard of another save beside this index (as a save stopped between its renames leaves
  // it): refused, naming the shard.
  fs::create_directory(dir / "other");
  b.save_weights((dir / "other" / "s.weights.json").string(), {.max_shard_size = 1.0 / 1024});
  fs::copy_file(dir / "other" / "s_00001.weights.h5", dir / "s_00001.weights.h5",
                fs::copy_options::overwrite_existing);
  CHECK_THAT(message_of([&] { r.load_weights(index.string()); }),
             Catch::Contains("s_00001.weights.h5' is not the one this index was saved with") &&
                 Catch::Contains("Save the weights again"));
  CHECK(weights_of(r) == weights_of(a));  // nothing loaded
}

TEST_CASE("backup_and_restore: a resume over other training data is refused mid-epoch",
          "[callbacks][saving]") {
  // The backup records what its batches were batches of. Resumed mid-epoch with another batch
  // size (4 batches an epoch where the backup had done 6 of 8), fit trained nothing of that
  // epoch and said nothing; now it names what changed. From the end of an epoch, the next epoch
  // starts on the new data, as it would have.
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<6>, dense<8, {.activation = "relu"}>,
                                     dense<3, {.activation = "softmax"}>>;
  const fs::path root = fs::temp_directory_path() / ("tessel_resume_" + std::to_string(getpid()));
  fs::remove_all(root);
  tessel::array<float> x({64, 6});
  tessel::array<std::int32_t> y({64});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>((i * 37) % 11) / 11;
  for (std::size_t r = 0; r < 64; ++r) y.values[r] = static_cast<std::int32_t>((r * 7) % 3);
  struct run {
    tessel::training_position restored;
    std::size_t batches = 0;  // trained by this fit
  };
  const auto fit = [&](const fs::path& dir, const tessel::array<float>& xs, std::int64_t batch,
                       tessel::callbacks::save_freq_arg freq) {
    model_t model;
    model.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    tessel::callbacks::backup_and_restore backup(
        {.backup_dir = dir.string(), .save_freq = freq, .delete_checkpoint = false});
    run r;
    tessel::callbacks::lambda_callback count(
        {.on_batch_end = [&](std::size_t, const tessel::logs&) { ++r.batches; }});
    model.fit(xs, y, {.batch_size = batch, .epochs = 1, .verbose = 0, .callbacks = {backup, count}});
    r.restored = backup.restored_position();
    return r;
  };
  // As if interrupted after batch 6 of 8: a whole run's backups (delete_checkpoint false), the
  // newest after batch 6.
  const fs::path mid = root / "mid";
  fit(mid, x, 8, 3);
  REQUIRE(fs::exists(mid / "checkpoint-2" / "manifest.json"));
  const auto copy_of = [&](const fs::path& from, const char* name) {
    const fs::path to = root / name;
    fs::remove_all(to);
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  };
  // The same data: the last 2 batches.
  const run same = fit(copy_of(mid, "same"), x, 8, 3);
  CHECK(same.restored.step == 6);
  CHECK(same.batches == 2);
  // Another batch size.
  CHECK_THROWS_WITH(fit(copy_of(mid, "batch"), x, 16, 3),
                    Catch::Contains("the restored backup stopped after batch 6 of epoch 1") &&
                        Catch::Contains("the batch size was 8, now 16") &&
                        Catch::Contains("Resume with the training data of the interrupted run"));
  // Other values.
  tessel::array<float> other = x;
  other.values[5] += 1.0f;
  CHECK_THROWS_WITH(fit(copy_of(mid, "values"), other, 8, 3),
                    Catch::Contains("the values of x (a checksum of 64 samples) differs"));
  // A backup without the description (an older tessel's): the position past the end of the
  // epoch's batches is still an error, not an epoch skipped.
  const fs::path old = copy_of(mid, "old");
  {
    const fs::path m = old / "checkpoint-2" / "manifest.json";
    std::ifstream in(m);
    nlohmann::json j = nlohmann::json::parse(in);
    in.close();
    REQUIRE(j["metadata"].contains("data"));
    j["metadata"].erase("data");
    std::ofstream(m, std::ios::trunc) << j.dump();
  }
  CHECK_THROWS_WITH(fit(old, x, 16, 3),
                    Catch::Contains("stopped after batch 6 of epoch 1, but this epoch's data has "
                                    "4 batches"));
  // From the end of an epoch, another batch size goes on: the next epoch, all of it.
  const fs::path ended = root / "ended";
  fit(ended, x, 8, "epoch");
  const run next = fit(ended, x, 16, "epoch");
  CHECK(next.restored.epoch == 1);
  CHECK(next.restored.step == 0);
  CHECK(next.batches == 0);  // epochs = 1: that epoch is done
  fs::remove_all(root);
}

TEST_CASE("save_checkpoint: removes or replaces nothing it did not write", "[saving]") {
  // save_checkpoint(".") removed every file of the working directory, and "run/ckpt/" staged the
  // save inside the old checkpoint, then removed both. A path is normalised first; the working,
  // parent, root and home directories are refused; and only a checkpoint of tessel's (or an
  // unfinished one in the staging name) is ever replaced.
  namespace fs = std::filesystem;
  using namespace tessel::layers;
  using model_t = tessel::sequential<tessel::one_device, input<2>, dense<1>>;
  const fs::path root = fs::temp_directory_path() / ("tessel_paths_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "work");
  model_t m;
  m.compile({.optimizer = "sgd", .loss = "mse"});
  const auto text_of = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto mine = [](const fs::path& p, const char* text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };

  // The working directory, by any name, and its parents: refused, the user's file kept.
  mine(root / "work" / "notes.txt", "mine");
  const fs::path before = fs::current_path();
  fs::current_path(root / "work");
  for (const char* path : {".", "./", "..", "sub/..", "../work"}) {
    INFO(path);
    CHECK_THROWS_AS(tessel::save_checkpoint(m, path), tessel::value_error);
  }
  CHECK_THROWS_WITH(tessel::save_checkpoint(m, "."),
                    Catch::Contains("the working directory") &&
                        Catch::Contains("a directory of its own"));
  CHECK_THROWS_WITH(tessel::save_checkpoint(m, ".."), Catch::Contains("a parent directory"));
  fs::current_path(before);
  CHECK(text_of(root / "work" / "notes.txt") == "mine");
  CHECK_THROWS_WITH(tessel::save_checkpoint(m, "/"), Catch::Contains("the root directory"));
  if (const char* home = std::getenv("HOME"); home && *home && fs::is_directory(home))
    CHECK_THROWS_WITH(tessel::save_checkpoint(m, home), Catch::Contains("the home directory"));

  // A trailing separator: the second save replaces the first, staged beside it, not inside.
  const fs::path ckpt = root / "run" / "ckpt";
  tessel::save_checkpoint(m, (root / "run" / "ckpt/").string());
  tessel::save_checkpoint(m, (root / "run" / "ckpt/").string());
  CHECK(fs::exists(ckpt / "manifest.json"));
  CHECK(!fs::exists(ckpt / ".partial"));
  CHECK(!fs::exists(root / "run" / "ckpt.partial"));
  {
    model_t r;
    r.compile({.optimizer = "sgd", .loss = "mse"});
    CHECK_NOTHROW(tessel::load_checkpoint(r, ckpt.string() + "/"));
    CHECK(r.get_weights() == m.get_weights());
  }

  // A directory of the user's, a regular file, a dangling link at the path: each refused,
  // naming it, and left as it was.
  mine(root / "photos" / "cat.jpg", "cat");
  CHECK_THROWS_WITH(tessel::save_checkpoint(m, root / "photos"),
                    Catch::Contains((root / "photos").string()) &&
                        Catch::Contains("is not a checkpoint tessel wrote") &&
                        Catch::Contains("Choose another path"));
  CHECK(text_of(root / "photos" / "cat.jpg") == "cat");
  CHECK(!fs::exists(root / "photos.partial"));
  mine(root / "report.txt", "report");
  CHECK_THROWS_AS(tessel::save_checkpoint(m, root / "report.txt"), tessel::value_error);
  CHECK(text_of(root / "report.txt") == "report");
  fs::create_symlink(root / "nowhere", root / "link");
  CHECK_THROWS_AS(tessel::save_checkpoint(m, root / "link"), tessel::value_error);
  CHECK(fs::is_symlink(root / "link"));
  // A directory with a manifest.json that is not a checkpoint's; a checkpoint holding a file
  // of the user's beside its own.
  mine(root / "site" / "manifest.json", R"({"name": "my web app"})");
  CHECK_THROWS_AS(tessel::save_checkpoint(m, root / "site"), tessel::value_error);
  CHECK(text_of(root / "site" / "manifest.json") == R"({"name": "my web app"})");
  mine(ckpt / "notes.txt", "notes");
  CHECK_THROWS_AS(tessel::save_checkpoint(m, ckpt), tessel::value_error);
  CHECK(text_of(ckpt / "notes.txt") == "notes");
  // A damaged checkpoint of tessel's (its manifest lost): replaced, as backup_and_restore's own
  // damaged backups are.
  fs::create_directories(root / "damaged");
  tessel::save_checkpoint(m, root / "damaged");
  fs::remove(root / "damaged" / "manifest.json");
  CHECK_NOTHROW(tessel::save_checkpoint(m, root / "damaged"));
  CHECK(fs::exists(root / "damaged" / "manifest.json"));

  // The staging name: an unfinished save of tessel's there is removed; anything else refused.
  fs::create_directories(root / "next.partial");
  mine(root / "next.partial" / "shard-00000.bin", "half");
  tessel::save_checkpoint(m, root / "next");
  CHECK(fs::exists(root / "next" / "manifest.json"));
  CHECK(!fs::exists(root / "next.partial"));
  mine(root / "other.partial" / "thesis.tex", "thesis");
  CHECK_THROWS_WITH(tessel::save_checkpoint(m, root / "other"),
                    Catch::Contains((root / "other.partial").string()) &&
                        Catch::Contains("holds what a checkpoint save did not write"));
  CHECK(text_of(root / "other.partial" / "thesis.tex") == "thesis");
  CHECK(!fs::exists(root / "other"));

  // backup_and_restore(delete_checkpoint): its backups go when fit ends, a file of the user's in
  // backup_dir stays (Keras removes the whole directory); a directory left empty goes.
  tessel::array<float> x({8, 2}), y({8, 1});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 3);
  for (const bool with_notes : {true, false}) {
    const fs::path backups = root / (with_notes ? "backups_notes" : "backups");
    if (with_notes) mine(backups / "notes.txt", "notes");
    tessel::callbacks::backup_and_restore backup({.backup_dir = backups.string(), .save_freq = 2});
    m.fit(x, y, {.batch_size = 2, .epochs = 1, .verbose = 0, .callbacks = {backup}});
    if (with_notes) {
      CHECK(text_of(backups / "notes.txt") == "notes");
      CHECK(static_cast<std::size_t>(std::distance(fs::directory_iterator(backups), {})) == 1);
    } else {
      CHECK(!fs::exists(backups));
    }
  }
  fs::remove_all(root);
}
