// The callbacks that save: model_checkpoint (Keras's ModelCheckpoint: .weights.h5 or .keras files
// named after the epoch and the logs) and backup_and_restore (Keras's BackupAndRestore), on the
// sharded checkpoints of saving/checkpoint.hpp.
//
//   model.fit(train, {.epochs = 10, .callbacks = {tessel::callbacks::model_checkpoint(
//                         {.filepath = "ckpt/weights-{epoch:02d}-{val_loss:.2f}.weights.h5",
//                          .save_best_only = true, .save_weights_only = true})}});
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

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../saving/checkpoint.hpp"
#include "callbacks.hpp"

namespace tessel::callbacks {

// Keras's save_freq: "epoch", or a number of batches.
struct save_freq_arg {
  std::size_t batches = 0;  // 0: at the end of every epoch
  save_freq_arg(const char* s);
  save_freq_arg(int n);
};

// Keras's count of the batches since the last save (its callbacks' _should_save_on_batch): a
// batch index not past the last one seen starts a new epoch. `last` empty: none seen yet.
struct batch_counter {
  std::size_t since = 0;
  std::optional<std::size_t> last;
  // Counts up to `batch`; true (and the count starts again) when `every` batches are reached.
  bool due(std::size_t batch, std::size_t every) {
    since += !last || batch <= *last ? batch + 1 : batch - *last;
    last = batch;
    if (since < every) return false;
    since = 0;
    return true;
  }
};

namespace detail {

// One `{name}` or `{name:spec}` field of Python's str.format, for a filepath: spec is
// [0][width][.precision][type] with type d (integers), f, e, g, % or none.
TESSEL_INLINE std::string format_field(const std::string& spec, std::optional<long long> integer,
                                       double real, const std::string& name);

}  // namespace detail

// Keras's filepath.format(epoch=epoch + 1, batch=batch + 1, **logs): `{epoch:02d}`,
// `{val_loss:.2f}`, `{batch}`. A name neither given nor in the logs is Keras's KeyError.
TESSEL_INLINE std::string format_filepath(const std::string& filepath, std::size_t epoch,
                                          std::optional<std::size_t> batch, const logs& l);

// keras.callbacks.ModelCheckpoint, with Keras's arguments, defaults, checks and messages: at
// the end of every epoch (or every save_freq batches) the weights (save_weights_only, a
// .weights.h5 filepath) or the whole model (.keras) to the formatted filepath; with
// save_best_only, only when `monitor` improves (mode "auto", "min" or "max"; beyond
// initial_value_threshold when given). Every process calls it; the files are written as
// save_weights and save write them (by process 0 under data parallelism).
class model_checkpoint : public callback {
 public:
  struct options {
    std::string filepath;
    std::string monitor = "val_loss";
    int verbose = 0;
    bool save_best_only = false;
    bool save_weights_only = false;
    std::string mode = "auto";
    save_freq_arg save_freq = "epoch";
    std::optional<double> initial_value_threshold = std::nullopt;
  };
  explicit model_checkpoint(options o);
  // The best monitored value so far (Keras's `best`).
  std::optional<double> best;

  void on_train_begin(const logs&) override {
    best = o_.initial_value_threshold;
    increases_.reset();
    batches_ = {};  // ModelCheckpoint starts with no batch seen (None)
  }
  void on_epoch_begin(std::size_t epoch, const logs&) override { epoch_ = epoch; }
  void on_train_batch_end(std::size_t batch, const logs& l) override {
    if (o_.save_freq.batches != 0 && batches_.due(batch, o_.save_freq.batches))
      save(epoch_, batch, l);
  }
  void on_epoch_end(std::size_t epoch, const logs& l) override;

 private:
  void save(std::size_t epoch, std::optional<std::size_t> batch, const logs& l);

  options o_;
  std::optional<bool> increases_;
  std::size_t epoch_ = 0;
  batch_counter batches_;
};

namespace detail {
// Where fit goes on from after restoring `backup`: the metadata backup_and_restore saved with it
// (the JSON text load_checkpoint returns), checked. A damaged one is a runtime_error naming the
// backup, as damage elsewhere in a checkpoint is (and falls back to the backup before it alike).
TESSEL_INLINE training_position backup_position(const std::string& metadata,
                                                const std::filesystem::path& backup);
}  // namespace detail

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
  [[nodiscard]] std::filesystem::path latest() const { return previous_of(~std::uint64_t{0}); }
  [[nodiscard]] const training_position& restored_position() const noexcept { return restored_; }

  void on_train_begin(const logs&) override;
  void on_train_batch_end(std::size_t batch, const logs&) override {
    if (o_.save_freq.batches != 0 && batches_.due(batch, o_.save_freq.batches)) save();
  }
  void on_epoch_end(std::size_t, const logs&) override {
    batches_.last = 0;
    if (o_.save_freq.batches == 0) save();
  }
  void on_train_end(const logs&) override;

 private:
  void save();
  // The backups before the kept ones (the newest complete one, and the one before it with
  // double_checkpoint) go.
  void prune();
  std::filesystem::path path_of(std::uint64_t n) const {
    return std::filesystem::path(o_.backup_dir) / ("checkpoint-" + std::to_string(n));
  }
  // A backup's number (0: none, or not a backup).
  static std::uint64_t number_of(const std::filesystem::path& p);
  // The newest complete backup before number n, or an empty path.
  std::filesystem::path previous_of(std::uint64_t n) const;

  options o_;
  std::uint64_t seq_ = 0;
  batch_counter batches_{0, 0};
  training_position restored_{};
};

}  // namespace tessel::callbacks

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace tessel::callbacks {

TESSEL_INLINE save_freq_arg::save_freq_arg(
    const char* s) {  // NOLINT(google-explicit-constructor): as Keras's "epoch"
  if (std::string_view(s) != "epoch")
    throw value_error(std::string("Invalid value for argument `save_freq`. Received: "
                                  "save_freq=") +
                      s + ". Expected either 'epoch' or an integer value.");
}

TESSEL_INLINE save_freq_arg::save_freq_arg(
    int n) {  // NOLINT(google-explicit-constructor): as Keras's integer
  if (n <= 0)
    throw value_error("Invalid value for argument `save_freq`. Received: save_freq=" +
                      std::to_string(n) + ". Expected either 'epoch' or a positive integer.");
  batches = static_cast<std::size_t>(n);
}
}  // namespace tessel::callbacks

namespace tessel::callbacks::detail {

TESSEL_INLINE std::string format_field(const std::string& spec, std::optional<long long> integer,
                                       double real, const std::string& name) {
  std::size_t i = 0;
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') zero = true, ++i;
  // A width or precision longer than a path may be (PATH_MAX, 4096) cannot make a filepath.
  constexpr int most = 4096;
  const auto number = [&](const char* what) {
    int n = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
      n = n * 10 + (spec[i++] - '0');
      if (n > most)
        throw value_error("The " + std::string(what) + " in the format specifier '" + spec +
                          "' for '" + name + "' in a filepath is more than " +
                          std::to_string(most) + ", longer than a path may be");
    }
    return n;
  };
  const int width = number("width");
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = number("precision");
  }
  const char type = i < spec.size() ? spec[i++] : '\0';
  if (i != spec.size())
    throw value_error("Invalid format specifier '" + spec + "' for '" + name + "' in a filepath");
  // snprintf into a string of the length it asks for (a width of 200 makes 200 characters).
  const auto print = [](const char* fmt, auto... args) {
    const int n = std::snprintf(nullptr, 0, fmt, args...);
    std::string out(static_cast<std::size_t>(std::max(n, 0)), '\0');
    std::snprintf(out.data(), out.size() + 1, fmt, args...);
    return out;
  };
  if (integer && (type == 'd' || type == '\0') && precision < 0)
    return print(zero ? "%0*lld" : "%*lld", width, *integer);
  if (type == 'd')
    throw value_error("Unknown format code 'd' for object of type 'float' ('" + name +
                      "' in a filepath)");
  const double v = integer ? static_cast<double>(*integer) : real;
  if (type == '\0' && precision < 0) {  // Python's str(float)
    std::string r = integer ? std::to_string(*integer) : python_float_repr(v);
    if (static_cast<int>(r.size()) < width) r.insert(0, width - r.size(), zero ? '0' : ' ');
    return r;
  }
  const char conv = type == '\0' ? 'g' : type == '%' ? 'f' : type;
  if (conv != 'f' && conv != 'e' && conv != 'g')
    throw value_error(std::string("Unknown format code '") + type + "' for '" + name +
                      "' in a filepath");
  const std::string fmt = std::string(zero ? "%0*.*" : "%*.*") + conv;
  return print(fmt.c_str(), width, precision < 0 ? 6 : precision, type == '%' ? v * 100 : v) +
         (type == '%' ? "%" : "");
}
}  // namespace tessel::callbacks::detail

namespace tessel::callbacks {

TESSEL_INLINE std::string format_filepath(const std::string& filepath, std::size_t epoch,
                                          std::optional<std::size_t> batch, const logs& l) {
  std::string out;
  for (std::size_t i = 0; i < filepath.size(); ++i) {
    const char c = filepath[i];
    if (c == '{' && i + 1 < filepath.size() && filepath[i + 1] == '{') {
      out += '{', ++i;
      continue;
    }
    if (c == '}' && i + 1 < filepath.size() && filepath[i + 1] == '}') {
      out += '}', ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    const std::size_t close = filepath.find('}', i);
    if (close == std::string::npos)
      throw value_error("Failed to format this callback filepath: \"" + filepath +
                        "\". Reason: Single '{' encountered in format string");
    const std::string field = filepath.substr(i + 1, close - i - 1);
    const std::size_t colon = field.find(':');
    const std::string name = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    if (name == "epoch") {
      out += detail::format_field(spec, static_cast<long long>(epoch + 1), 0, name);
    } else if (name == "batch" && batch) {
      out += detail::format_field(spec, static_cast<long long>(*batch + 1), 0, name);
    } else if (const std::optional<double> v = find_log(l, name)) {
      out += detail::format_field(spec, std::nullopt, *v, name);
    } else {
      throw value_error("Failed to format this callback filepath: \"" + filepath + "\". Reason: '" +
                        name + "'");
    }
    i = close;
  }
  return out;
}

TESSEL_INLINE model_checkpoint::model_checkpoint(options o) : o_(std::move(o)) {
  if (o_.mode != "auto" && o_.mode != "min" && o_.mode != "max")
    throw value_error("ModelCheckpoint mode '" + o_.mode +
                      "' is unknown; use one of 'auto', 'min' or 'max'.");
  const auto ends = [&](std::string_view e) {
    return o_.filepath.size() >= e.size() &&
           o_.filepath.compare(o_.filepath.size() - e.size(), e.size(), e) == 0;
  };
  if (o_.save_weights_only && !ends(".weights.h5"))
    throw value_error(
        "When using `save_weights_only=True` in `ModelCheckpoint`, the filepath "
        "provided must end in `.weights.h5` (Keras weights format). Received: "
        "filepath=" +
        o_.filepath);
  if (!o_.save_weights_only && !ends(".keras") && !ends(".h5"))
    throw value_error(
        "The filepath provided must end in `.keras` (Keras model format). "
        "Received: filepath=" +
        o_.filepath);
  // Keras also writes its legacy whole-model .h5 format; tessel writes only .keras archives.
  if (!o_.save_weights_only && !ends(".keras"))
    throw value_error(
        "ModelCheckpoint: tessel saves whole models as `.keras` archives, not "
        "Keras's legacy `.h5` format. Received: filepath=" +
        o_.filepath +
        "; use a `.keras` filepath, or save_weights_only=True with a "
        "`.weights.h5` filepath.");
}

TESSEL_INLINE void model_checkpoint::on_epoch_end(std::size_t epoch, const logs& l) {
  if (!increases_) increases_ = monitor_increases(*model, o_.mode, o_.monitor, "ModelCheckpoint");
  if (o_.save_freq.batches == 0) save(epoch, std::nullopt, l);
}

TESSEL_INLINE void model_checkpoint::save(std::size_t epoch, std::optional<std::size_t> batch,
                                          const logs& l) {
  const std::string path = format_filepath(o_.filepath, epoch, batch, l);
  const bool chief = model->is_chief();
  if (o_.save_best_only) {
    if (!increases_) increases_ = monitor_increases(*model, o_.mode, o_.monitor, "ModelCheckpoint");
    const std::optional<double> current = find_log(l, o_.monitor);
    if (!current) {
      if (chief)
        std::cerr << "UserWarning: Can save best model only with " << o_.monitor << " available.\n";
    } else {
      char best_text[64] = "None", now[64];
      if (best) std::snprintf(best_text, sizeof best_text, "%.5f", *best);
      std::snprintf(now, sizeof now, "%.5f", *current);
      if (!monitor_improves(*current, best, 0.0, *increases_)) {
        if (o_.verbose > 0 && chief)
          std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " did not improve from "
                    << best_text << "\n";
        return;
      }
      if (o_.verbose > 0 && chief)
        std::cout << "\nEpoch " << epoch + 1 << ": " << o_.monitor << " improved from " << best_text
                  << " to " << now << ", saving model to " << path << "\n";
      best = *current;
    }
  } else if (o_.verbose > 0 && chief) {
    std::cout << "\nEpoch " << epoch + 1 << ": saving model to " << path << "\n";
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && chief) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  }
  if (o_.save_weights_only)
    model->save_weights(path);
  else
    model->save(path);
  if (o_.verbose > 0 && chief)
    std::cout << "\nEpoch " << epoch + 1 << ": finished saving model to " << path << "\n";
}
}  // namespace tessel::callbacks

namespace tessel::callbacks::detail {

TESSEL_INLINE training_position backup_position(const std::string& metadata,
                                                const std::filesystem::path& backup) {
  const auto damaged = [&](const std::string& what) {
    return runtime_error("The backup '" + backup.string() + "' is damaged: its metadata " + what +
                         "; restore from another checkpoint");
  };
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(metadata);
  } catch (const nlohmann::json::exception& e) {
    throw damaged(std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!m.is_object()) throw damaged("is not an object holding the epoch, batch and data pass");
  const auto count = [&](const char* key) {
    const auto it = m.find(key);
    if (it == m.end() || !it->is_number_unsigned())
      throw damaged(std::string("has no \"") + key + "\" (a count)");
    return it->get<std::uint64_t>();
  };
  training_position p;
  p.epoch = count("epoch");
  p.step = count("batch");
  p.data_pass = count("data_pass");
  // The training data's description (absent in backups of older versions: not checked).
  if (const auto it = m.find("data"); it != m.end()) {
    if (!it->is_array()) throw damaged("has a \"data\" that is not a list");
    for (const auto& e : *it) {
      if (!e.is_object() || !e.contains("what") || !e["what"].is_string() ||
          !e.contains("value") || !e["value"].is_number_unsigned() || !e.contains("kind") ||
          !e["kind"].is_string())
        throw damaged("has a \"data\" entry that is not {what, value, kind}");
      const std::string kind = e["kind"].get<std::string>();
      if (kind != "number" && kind != "signed_number" && kind != "fingerprint")
        throw damaged("has a \"data\" entry of unknown kind '" + kind + "'");
      p.data.push_back({e["what"].get<std::string>(), e["value"].get<std::uint64_t>(),
                        kind == "fingerprint"     ? fact::kind::fingerprint
                        : kind == "signed_number" ? fact::kind::signed_number
                                                  : fact::kind::number});
    }
  }
  return p;
}
}  // namespace tessel::callbacks::detail

namespace tessel::callbacks {

TESSEL_INLINE void backup_and_restore::on_train_begin(const logs&) {
  batches_ = {0, 0};  // BackupAndRestore starts with batch 0 as the last seen
  restored_ = {};
  const std::filesystem::path newest = latest();
  seq_ = number_of(newest);
  if (newest.empty()) return;
  try {
    restored_ = detail::backup_position(model->load_checkpoint(newest.string()), newest);
  } catch (const std::exception& e) {
    const std::filesystem::path previous = previous_of(seq_);
    if (!o_.double_checkpoint || previous.empty()) throw;
    if (model->is_chief())
      std::fprintf(stderr,
                   "BackupAndRestore: the newest backup '%s' cannot be restored (%s); "
                   "restoring the previous one, '%s'\n",
                   newest.string().c_str(), e.what(), previous.string().c_str());
    restored_ = detail::backup_position(model->load_checkpoint(previous.string()), previous);
  }
  if (restored_.step > 0) batches_.last = restored_.step - 1;  // the batches before are seen
  model->resume_from(restored_);
}

TESSEL_INLINE void backup_and_restore::on_train_end(const logs&) {
  model->wait_for_checkpoint();
  prune();
  if (o_.delete_checkpoint && model->is_chief()) {
    // Keras removes the whole backup_dir; tessel removes the backups it wrote (checkpoint-N
    // directories of checkpoint files alone), then the directory if that left it empty, so that
    // a backup_dir that also holds files of the user's keeps them.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(o_.backup_dir, ec))
      if (number_of(e.path()) != 0 && checkpoint_detail::holds_only_checkpoint_files(e.path()))
        std::filesystem::remove_all(e.path(), ec);
    if (std::filesystem::is_empty(o_.backup_dir, ec)) std::filesystem::remove(o_.backup_dir, ec);
  }
}

TESSEL_INLINE void backup_and_restore::save() {
  const training_position p = model->position();
  nlohmann::json meta{{"epoch", p.epoch}, {"batch", p.step}, {"data_pass", p.data_pass}};
  // What the batches counted are batches of, so that a resume over other data is refused.
  nlohmann::json data = nlohmann::json::array();
  for (const fact& f : p.data)
    data.push_back({{"what", f.what},
                    {"value", f.value},
                    {"kind", f.shown == fact::kind::fingerprint       ? "fingerprint"
                             : f.shown == fact::kind::signed_number ? "signed_number"
                                                                    : "number"}});
  meta["data"] = std::move(data);
  if (o_.save_on_background) {
    model->wait_for_checkpoint();  // the backup before is complete: the older ones may go
    prune();
  }
  ++seq_;
  model->save_checkpoint(path_of(seq_).string(), meta.dump(), o_.save_on_background);
  if (!o_.save_on_background) prune();
}

TESSEL_INLINE void backup_and_restore::prune() {
  if (!model->is_chief() || seq_ == 0) return;
  const std::uint64_t keep = o_.double_checkpoint ? 2 : 1;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(o_.backup_dir, ec)) {
    const std::uint64_t n = number_of(e.path());
    if (n != 0 && n + keep <= seq_ && checkpoint_detail::holds_only_checkpoint_files(e.path()))
      std::filesystem::remove_all(e.path(), ec);
  }
}

TESSEL_INLINE std::uint64_t backup_and_restore::number_of(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  constexpr std::string_view prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string digits = name.substr(prefix.size());
  std::uint64_t n = 0;
  // A number past 64 bits is not a name backup_and_restore wrote.
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  return ec == std::errc() && end == digits.data() + digits.size() ? n : 0;
}

TESSEL_INLINE std::filesystem::path backup_and_restore::previous_of(std::uint64_t n) const {
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

}  // namespace tessel::callbacks
#endif  // TESSEL_DEFINITIONS
