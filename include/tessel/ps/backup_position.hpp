#pragma once
// The position file of a parameter-server fit's backup (`position.json` beside
// `checkpoint.weights.h5`, written by the chief, coordinator_core.hpp): where training stands,
// and the size and CRC-32 of the weights file written with it, so that a position is never paired
// with weights from another backup. The file comes back from a disk, a copy or a person's editor:
// every field is checked (type, range, agreement with the fit and the weights file) and a bad one
// is refused naming the file and the field; the backup is kept.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "../core/errors.hpp"

namespace tessel::ps {

struct backup_point {
  std::uint64_t epochs_done = 0;
  std::uint64_t steps_per_epoch = 0;
  std::uint64_t next_index = 0;  // the global index of the next batch to hand out
  // The weights file's content as its checksum trailer records it (saving/file_checksum.hpp).
  std::uint64_t weights_bytes = 0;
  std::uint32_t weights_crc32 = 0;
};

inline std::string position_text(const backup_point& p) {
  return nlohmann::json{{"epochs_done", p.epochs_done},
                        {"steps_per_epoch", p.steps_per_epoch},
                        {"next_index", p.next_index},
                        {"weights", {{"bytes", p.weights_bytes}, {"crc32", p.weights_crc32}}}}
      .dump();
}

// The position in `text` (the file `file`), checked against the fit that reads it: `steps` per
// epoch, `epochs` in all. A value_error names the file and the field.
inline backup_point parse_position(std::string_view text, const std::string& file,
                                   std::uint64_t steps, std::uint64_t epochs) {
  const auto fail = [&](const std::string& what) {
    throw value_error("BackupAndRestore: " + file + ": " + what +
                      ". The backup is kept as it is: give another backup_dir, or remove it to "
                      "start over");
  };
  const auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail("not a JSON object; this is not a backup this library wrote");
  const auto count = [&](const nlohmann::json& o, const char* field, const std::string& name) {
    if (!o.contains(field)) fail("'" + name + "' is missing");
    if (!o[field].is_number_unsigned())
      fail("'" + name + "' is " + o[field].dump() + ", not a whole number of at least 0");
    return o[field].get<std::uint64_t>();
  };
  backup_point p;
  p.epochs_done = count(j, "epochs_done", "epochs_done");
  p.steps_per_epoch = count(j, "steps_per_epoch", "steps_per_epoch");
  p.next_index = count(j, "next_index", "next_index");
  if (!j.contains("weights") || !j["weights"].is_object())
    fail("'weights' is missing or not an object");
  p.weights_bytes = count(j["weights"], "bytes", "weights.bytes");
  const std::uint64_t crc = count(j["weights"], "crc32", "weights.crc32");
  if (crc > std::numeric_limits<std::uint32_t>::max())
    fail("'weights.crc32' is " + std::to_string(crc) + ", more than 32 bits");
  p.weights_crc32 = static_cast<std::uint32_t>(crc);
  if (p.steps_per_epoch != steps)
    fail("'steps_per_epoch' is " + std::to_string(p.steps_per_epoch) + ", this fit has " +
         std::to_string(steps) + " steps per epoch; give the same steps_per_epoch");
  if (p.epochs_done > epochs)
    fail("'epochs_done' is " + std::to_string(p.epochs_done) + ", more than this fit's " +
         std::to_string(epochs) + " epochs; give epochs of at least " +
         std::to_string(p.epochs_done));
  if (p.epochs_done > 0 && steps > std::numeric_limits<std::uint64_t>::max() / p.epochs_done)
    fail("'epochs_done' is " + std::to_string(p.epochs_done) +
         ", more batches than can be counted");
  if (p.next_index < p.epochs_done * steps)
    fail("'next_index' is " + std::to_string(p.next_index) + ", before the " +
         std::to_string(p.epochs_done * steps) + " batches of the " +
         std::to_string(p.epochs_done) + " epochs done");
  return p;
}

}  // namespace tessel::ps
