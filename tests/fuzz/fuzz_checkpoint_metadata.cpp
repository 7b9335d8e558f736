// libFuzzer harness for the metadata backup_and_restore keeps in its backups
// (include/tessel/trainer/checkpoint_callbacks.hpp, callbacks::detail::backup_position): the JSON
// text load_checkpoint returns from a backup's manifest, from which a restarted fit takes the
// epoch, the batches of it done and the dataset's pass (its shuffle order).
//
// Input: the metadata's text, whole (a JSON text may hold 0 bytes only inside strings, escaped).
//
// The documented error is tessel::runtime_error, whose message must name the backup. Any other
// exception (nlohmann's json::exception among them), a crash or a sanitizer report is a finding,
// and so is an accepted position other than the one the text holds: written back as
// backup_and_restore writes it and read again, it must give the same position.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tessel/core/errors.hpp>
#include <tessel/trainer/checkpoint_callbacks.hpp>

#include "fuzz_support.hpp"

using tessel_fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::filesystem::path backup = "/backups/checkpoint-7";
  try {
    const tessel::training_position p = tessel::callbacks::detail::backup_position(text, backup);
    const nlohmann::json again{{"epoch", p.epoch}, {"batch", p.step}, {"data_pass", p.data_pass}};
    const tessel::training_position q =
        tessel::callbacks::detail::backup_position(again.dump(), backup);
    if (q.epoch != p.epoch || q.step != p.step || q.data_pass != p.data_pass)
      fail("a position written back and read again differs");
    const nlohmann::json read = nlohmann::json::parse(text);  // accepted: valid JSON
    if (read["epoch"] != p.epoch || read["batch"] != p.step || read["data_pass"] != p.data_pass)
      fail("an accepted position is not the one the metadata holds");
  } catch (const tessel::runtime_error& e) {
    if (std::string(e.what()).find(backup.string()) == std::string::npos)
      fail("a metadata error does not name the backup");
  }
  return 0;
}
