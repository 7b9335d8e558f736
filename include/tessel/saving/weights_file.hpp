// weights_file: Keras 3's .weights.h5 layout (keras/src/saving/saving_lib.py, H5IOStore), written
// and read from plain values. The file holds
//
//   vars                     group, attribute name = the model's name ("sequential")
//   layers/<group>/vars/<i>  each layer's variables, trainable first, in creation order; the group
//                            named from the layer's class ("dense", "dense_1", "conv2d",
//                            "re_lu"), attribute name = the layer's name ("d1", "large_k")
//   optimizer/vars/<i>       the iteration count (int32 scalar), the learning rate (float32
//                            scalar), then the optimizer's slots in Keras's order;
//                            attribute name = the optimizer's ("adam", "rm_sprop")
//
// Every group a layer without variables gets ("layers/flatten/vars") is written too, as Keras
// writes it. What tessel adds, which Keras ignores: a CRC-32 of the whole file in a trailer after
// the HDF5 content (file_checksum.hpp), a CRC-32 of each dataset's values (attribute
// tessel_crc32: it stays with the data where a tool copies the datasets into another file), and
// the learning rate in full (float64, attribute tessel_learning_rate on its dataset). Before
// libhdf5 sees a file, tessel checks that it exists, is not empty, matches its trailer's
// checksum (where it has one), starts with HDF5's signature and is as long as its superblock
// says. The file format is HDF5 1.8's (checksummed metadata), which every libhdf5 since reads.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../data/file_access.hpp"
#include "atomic_file.hpp"
#include "file_checksum.hpp"
#include "file_writer.hpp"
#include "h5.hpp"

namespace tessel::saving {

static_assert(std::endian::native == std::endian::little,
              "tessel's weights files store float32 little-endian, as the host holds them");

// Keras's naming.to_snake_case: "Dense" -> "dense", "GlobalAveragePooling2D" ->
// "global_average_pooling2d", "ReLU" -> "re_lu", "RMSprop" -> "rm_sprop".
TESSEL_INLINE std::string keras_snake_case(std::string_view class_name);

// Keras's _get_unique_name over a list of layers: the first of a name as it is, the next ones
// "<name>_1", "<name>_2", ... (the layers' groups in a weights file).
TESSEL_INLINE std::vector<std::string> keras_unique_names(const std::vector<std::string>& bases);

// Where Keras's optimizer.variables puts each of tessel's slots: tessel keeps a variable's slots
// together ("<v>_momentum", "<v>_velocity" for each v); Keras makes them in calls of
// add_optimizer_variables, each over every variable (`pass` gives each slot's call: Adam's
// moments in one, RMSprop's velocities, momentums and average gradients in three). Returns, for
// each place in Keras's order, the index of the slot in tessel's order.
TESSEL_INLINE std::vector<std::size_t> keras_slot_order(const std::vector<int>& pass);

// ---- the file's content as values ------------------------------------------------------------
// A variable: its path in the model ("dense/kernel", "adam/dense_kernel_momentum", for messages),
// its global shape and its values (row-major): held in `values`, or, when saving, `borrowed`
// from memory that outlives the write (a replicated variable's host memory, written without a
// copy).
struct saved_variable {
  std::string path;
  std::vector<std::size_t> shape;
  std::vector<float> values;
  std::span<const float> borrowed = {};
  std::span<const float> data() const {
    return borrowed.data() != nullptr ? borrowed : std::span<const float>(values);
  }
};
// A layer: its group ("dense_1"), its name ("d2") and its variables in Keras's order.
struct saved_layer {
  std::string group;
  std::string name;
  std::vector<saved_variable> variables;
};
// An optimizer: its Keras name ("adam", "rm_sprop"), its counters and its slots in Keras's order.
struct saved_optimizer {
  std::string name;
  std::int64_t iterations = 0;
  std::optional<double> learning_rate = 0.0;  // none when scheduled (Keras keeps no variable)
  std::vector<saved_variable> slots;
  std::optional<double> scalar;  // the optimizer's own float scalar after the slots (Nadam's)
  // The scalars before the slots: the iteration count and the learning rate, if any.
  [[nodiscard]] std::size_t counters() const noexcept { return learning_rate ? 2 : 1; }
};
struct weights_content {
  std::string model_name;
  std::vector<saved_layer> layers;
  std::optional<saved_optimizer> optimizer;
};

namespace detail {
inline constexpr std::string_view crc_attribute = "tessel_crc32";
inline constexpr std::string_view learning_rate_attribute = "tessel_learning_rate";

TESSEL_INLINE std::string shape_text(const std::vector<std::size_t>& s);
TESSEL_INLINE std::size_t elements(const std::vector<std::size_t>& s);

// Writes `v` as dataset `i` of `vars`, with its checksum, which `known` records with where its
// values lie in the file (so that the file's checksum does not read them back).
TESSEL_INLINE void write_variable(const h5::object& vars, std::size_t i, const saved_variable& v,
                                  std::vector<known_crc>& known);
// Writes the memory file `file` to `path`: its bytes, then tessel's checksum trailer (`known`:
// the runs whose CRC-32 write_variable has), through file_writer (each failure an error with
// the system's words: no space, permission, I/O), synced; libhdf5's file is closed first, which
// cannot fail for want of disk.
TESSEL_INLINE file_sum write_memory_file(h5::memory_file& file,
                                         const std::filesystem::path& path,
                                         const std::vector<known_crc>& known);
}  // namespace detail

// Writes `content` to `path` in Keras's layout, atomically (atomic_file.hpp). `ready(k)`, where
// given, is called before the file's k-th variable (from 0: the layers' variables, then the
// optimizer's slots) is read, and returns once its values may be read: a save whose values are
// still being gathered on another thread writes those it has meanwhile.
inline void write_weights_file(const std::filesystem::path& path, const weights_content& content,
                               const std::function<void(std::size_t)>& ready = {}) {
  std::size_t next = 0;
  const auto wait = [&] {
    if (ready) ready(next);
    ++next;
  };
  write_atomically(path, [&](const std::filesystem::path& tmp) {
    std::vector<known_crc> known;
    h5::memory_file memory(tmp.string());
    const h5::object& file = memory.root();
    h5::write_attribute(h5::create_group(file, "vars"), "name", content.model_name);
    {
      const h5::object layers = h5::create_group(file, "layers");
      for (const auto& layer : content.layers) {
        const h5::object vars = h5::create_group(h5::create_group(layers, layer.group), "vars");
        h5::write_attribute(vars, "name", layer.name);
        for (std::size_t i = 0; i < layer.variables.size(); ++i) {
          wait();
          detail::write_variable(vars, i, layer.variables[i], known);
        }
      }
    }
    if (content.optimizer) {
      const saved_optimizer& o = *content.optimizer;
      const h5::object vars = h5::create_group(h5::create_group(file, "optimizer"), "vars");
      h5::write_attribute(vars, "name", o.name);
      if (o.iterations < 0 || o.iterations > std::numeric_limits<std::int32_t>::max())
        throw value_error("save_weights: the optimizer's iteration count " +
                          std::to_string(o.iterations) +
                          " does not fit Keras's int32 counter in a weights file");
      const auto it = static_cast<std::int32_t>(o.iterations);
      h5::write_attribute(h5::write_scalar(vars, "0", it), detail::crc_attribute,
                          detail::crc32_of(&it, sizeof it));
      if (o.learning_rate) {
        const auto lr = static_cast<float>(*o.learning_rate);
        const h5::object d = h5::write_dataset(vars, "1", {}, std::span<const float>(&lr, 1));
        h5::write_attribute(d, detail::crc_attribute, detail::crc32_of(&lr, sizeof lr));
        h5::write_attribute(d, detail::learning_rate_attribute, *o.learning_rate);
      }
      for (std::size_t i = 0; i < o.slots.size(); ++i) {
        wait();
        detail::write_variable(vars, i + o.counters(), o.slots[i], known);
      }
      if (o.scalar) {
        const auto x = static_cast<float>(*o.scalar);
        const h5::object d = h5::write_dataset(vars, std::to_string(o.counters() + o.slots.size()),
                                               {}, std::span<const float>(&x, 1));
        h5::write_attribute(d, detail::crc_attribute, detail::crc32_of(&x, sizeof x));
      }
    }
    detail::write_memory_file(memory, tmp, known);
  });
}

// ---- reading -------------------------------------------------------------------------------
namespace detail {
// Reads a little-endian unsigned number of `n` bytes.
TESSEL_INLINE std::uint64_t little_endian(const unsigned char* p, std::size_t n);
}  // namespace detail

// What tessel checks before handing `path` to libhdf5 (which is not robust against every damaged
// file): it is a readable regular file, not empty, matches the checksum in its trailer (a file
// tessel wrote), starts with HDF5's signature, and is at least as long as its superblock says the
// file is (so a copy or a write cut short is named as such). Returns what the trailer said: ok,
// or none (a file without one, as Keras writes).
TESSEL_INLINE checksum_state check_weights_file(const std::filesystem::path& path,
                                                std::string_view where);

// What a weights file held of the optimizer.
enum class optimizer_found {
  none,      // no optimizer/vars group (a model saved before compile)
  counters,  // the iteration count and learning rate only (saved before the first step)
  all,       // the counters and every slot
};

namespace detail {
// Reads dataset `i` of `vars` into `v` (whose path and shape say what the model expects), with
// its checksum where tessel wrote one. `what` names the place for messages.
TESSEL_INLINE void read_variable(const h5::object& vars, std::size_t i, saved_variable& v,
                                 const std::string& head, const std::string& what, bool verified);
}  // namespace detail

// Reads `path` into `expected`, which gives what the model holds: every layer's group, name and
// variables (path and shape; the values are filled in), and the optimizer's name and slots (if
// the model has an optimizer whose state is wanted). A layer without variables may be missing
// from the file; a layer with variables must be there with each of them, of the same shape. The
// optimizer's values are read when the file has them: every slot, or the counters alone (a file
// saved before the first step). Anything else is an error naming the file, the variable or layer,
// and what to do.
TESSEL_INLINE optimizer_found read_weights_file(const std::filesystem::path& path,
                                                weights_content& expected,
                                                std::string_view where = "load_weights");

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/weights_file.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
