// The callbacks that save the training state: backup_and_restore (Keras's BackupAndRestore), on
// the sharded checkpoints of saving/checkpoint.hpp.
//
//   model.fit(train, {.epochs = 10, .callbacks = {tessel::callbacks::backup_and_restore(
//                         {.backup_dir = "/tmp/backup", .save_freq = 100})}});
//
// Each backup is the whole training state (weights, moving statistics, the optimizer's variables,
// the metric accumulators, the random-stream counter) with fit's position (the epoch, the batches
// of it done, the dataset's pass, which gives its shuffle order): a job restarted after a crash
// goes on from the batch after the backup, and ends with the weights of a run that never stopped,
// bit for bit on the same machine, thread count and process count. (Keras 3 stores the epoch and
// the batch but replays the epoch from its first batch with the mid-epoch weights.)
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "../core/errors.hpp"
#include "../saving/checkpoint.hpp"
#include "callbacks.hpp"

namespace tessel::callbacks {

// Keras's save_freq: "epoch", or a number of batches.
struct save_freq_arg {
  std::size_t batches = 0;  // 0: at the end of every epoch
  save_freq_arg(const char* s) {  // NOLINT(google-explicit-constructor): as Keras's "epoch"
    if (std::string_view(s) != "epoch")
      throw value_error(std::string("Invalid value for argument `save_freq`. Received: "
                                    "save_freq=") + s +
                        ". Expected either 'epoch' or an integer value.");
  }
  save_freq_arg(int n) {  // NOLINT(google-explicit-constructor): as Keras's integer
    if (n <= 0)
      throw value_error("Invalid value for argument `save_freq`. Received: save_freq=" +
                        std::to_string(n) + ". Expected either 'epoch' or a positive integer.");
    batches = static_cast<std::size_t>(n);
  }
};

// keras.callbacks.BackupAndRestore, with Keras's arguments and defaults. The backups are
// directories `<backup_dir>/checkpoint-<n>`; the newest complete one is restored at the start of
// fit (with double_checkpoint, the one before it where the newest cannot be read, saying so).
class backup_and_restore : public callback {
 public:
  struct options {
    std::string backup_dir;
    save_freq_arg save_freq = "epoch";
    bool delete_checkpoint = true;
    bool double_checkpoint = false;
    // tessel's: write each backup beside training (as Orbax's save_on_background): the step
    // waits for a copy of the state; the next backup and the end of fit wait for the files.
    bool save_on_background = false;
  };
  explicit backup_and_restore(options o) : o_(std::move(o)) {
    if (o_.backup_dir.empty()) throw value_error("Empty `backup_dir` argument passed");
  }

  // The newest backup's path (empty if none), and where the last restore went on from.
  [[nodiscard]] std::filesystem::path latest() const { return latest_checkpoint(o_.backup_dir); }
  [[nodiscard]] const training_position& restored_position() const noexcept { return restored_; }

  void on_train_begin(const logs&) override {
    since_save_ = 0;
    last_batch_ = 0;
    restored_ = {};
    const std::filesystem::path newest = latest();
    seq_ = number_of(newest);
    if (newest.empty()) return;
    std::string meta;
    try {
      meta = model->load_checkpoint(newest.string());
    } catch (const std::exception& e) {
      const std::filesystem::path previous = previous_of(seq_);
      if (!o_.double_checkpoint || previous.empty()) throw;
      if (model->is_chief())
        std::fprintf(stderr,
                     "BackupAndRestore: the newest backup '%s' cannot be restored (%s); "
                     "restoring the previous one, '%s'\n",
                     newest.string().c_str(), e.what(), previous.string().c_str());
      meta = model->load_checkpoint(previous.string());
    }
    const nlohmann::json m = nlohmann::json::parse(meta);
    restored_ = {m.at("epoch").get<std::size_t>(), m.at("batch").get<std::size_t>(),
                 m.at("data_pass").get<std::uint64_t>()};
    if (restored_.step > 0) last_batch_ = restored_.step - 1;  // the batches before are seen
    model->resume_from(restored_);
  }
  void on_train_batch_end(std::size_t batch, const logs&) override {
    if (o_.save_freq.batches == 0) return;
    // Keras's count of the batches since the last save (a batch index not past the last one
    // starts a new epoch).
    since_save_ += batch <= last_batch_ ? batch + 1 : batch - last_batch_;
    last_batch_ = batch;
    if (since_save_ >= o_.save_freq.batches) {
      since_save_ = 0;
      save();
    }
  }
  void on_epoch_end(std::size_t, const logs&) override {
    last_batch_ = 0;
    if (o_.save_freq.batches == 0) save();
  }
  void on_train_end(const logs&) override {
    model->wait_for_checkpoint();
    prune();
    if (o_.delete_checkpoint && model->is_chief()) {
      std::error_code ec;
      std::filesystem::remove_all(o_.backup_dir, ec);
    }
  }

 private:
  void save() {
    const training_position p = model->position();
    const nlohmann::json meta{
        {"epoch", p.epoch}, {"batch", p.step}, {"data_pass", p.data_pass}};
    if (o_.save_on_background) {
      model->wait_for_checkpoint();  // the backup before is complete: the older ones may go
      prune();
    }
    ++seq_;
    model->save_checkpoint(path_of(seq_).string(), meta.dump(), o_.save_on_background);
    if (!o_.save_on_background) prune();
  }
  // The backups before the kept ones (the newest complete one, and the one before it with
  // double_checkpoint) go.
  void prune() {
    if (!model->is_chief() || seq_ == 0) return;
    const std::uint64_t keep = o_.double_checkpoint ? 2 : 1;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.backup_dir, ec)) {
      const std::uint64_t n = number_of(e.path());
      if (n != 0 && n + keep <= seq_) std::filesystem::remove_all(e.path(), ec);
    }
  }
  std::filesystem::path path_of(std::uint64_t n) const {
    return std::filesystem::path(o_.backup_dir) / ("checkpoint-" + std::to_string(n));
  }
  // A backup's number (0: none, or not a backup).
  static std::uint64_t number_of(const std::filesystem::path& p) {
    const std::string name = p.filename().string();
    constexpr std::string_view prefix = "checkpoint-";
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) return 0;
    return std::stoull(digits);
  }
  // The newest complete backup before number n, or an empty path.
  std::filesystem::path previous_of(std::uint64_t n) const {
    std::filesystem::path best;
    std::uint64_t best_n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.backup_dir, ec)) {
      const std::uint64_t k = number_of(e.path());
      if (k != 0 && k < n && k > best_n && std::filesystem::exists(e.path() / "manifest.json"))
        best = e.path(), best_n = k;
    }
    return best;
  }

  options o_;
  std::uint64_t seq_ = 0;
  std::size_t since_save_ = 0, last_batch_ = 0;
  training_position restored_{};
};

}  // namespace tessel::callbacks
