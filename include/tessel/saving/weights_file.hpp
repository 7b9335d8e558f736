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
// together ("<v>_velocity", "<v>_momentum" for each v); Keras's Adam and SGD do too, but its
// RMSprop adds every velocity, then every momentum, then every average gradient. Returns, for
// each place in Keras's order, the index in `slot_paths` (tessel's order).
TESSEL_INLINE std::vector<std::size_t> keras_slot_order(std::string_view keras_optimizer,
                                                        const std::vector<std::string>& slot_paths);

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
  double learning_rate = 0;
  std::vector<saved_variable> slots;
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
// values lie in the file (so that the file's checksum does not read them back). `fd`, the file's
// descriptor (h5::file_descriptor, or -1): its values go to the disk at once, while the next
// variable is checksummed and written, instead of all of them at the final fsync
// (file_writer.hpp).
TESSEL_INLINE void write_variable(const h5::object& vars, std::size_t i, const saved_variable& v,
                                  std::vector<known_crc>& known, int fd);
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
    h5::object file = h5::create_file(tmp.string());
    const int fd = h5::file_descriptor(file);
    h5::write_attribute(h5::create_group(file, "vars"), "name", content.model_name);
    {
      const h5::object layers = h5::create_group(file, "layers");
      for (const auto& layer : content.layers) {
        const h5::object vars = h5::create_group(h5::create_group(layers, layer.group), "vars");
        h5::write_attribute(vars, "name", layer.name);
        for (std::size_t i = 0; i < layer.variables.size(); ++i) {
          wait();
          detail::write_variable(vars, i, layer.variables[i], known, fd);
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
      const auto lr = static_cast<float>(o.learning_rate);
      const h5::object d = h5::write_dataset(vars, "1", {}, std::span<const float>(&lr, 1));
      h5::write_attribute(d, detail::crc_attribute, detail::crc32_of(&lr, sizeof lr));
      h5::write_attribute(d, detail::learning_rate_attribute, o.learning_rate);
      for (std::size_t i = 0; i < o.slots.size(); ++i) {
        wait();
        detail::write_variable(vars, i + 2, o.slots[i], known, fd);
      }
    }
    if (!file.h.close()) h5::fail(tmp.string(), "libhdf5 cannot finish writing the file");
    append_checksum(tmp, known);
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

// Definitions (compiled once in tessel::compiled; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
namespace tessel::saving {

TESSEL_INLINE std::string keras_snake_case(std::string_view class_name) {
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  std::string s;
  for (char c : class_name)  // re.sub(r"\W+", "", name)
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') s += c;
  std::string a;  // re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
  for (std::size_t i = 0; i < s.size();) {
    if (i + 2 < s.size() && upper(s[i + 1]) && lower(s[i + 2])) {
      std::size_t j = i + 2;
      while (j < s.size() && lower(s[j])) ++j;
      a += s[i];
      a += '_';
      a.append(s, i + 1, j - i - 1);
      i = j;
    } else {
      a += s[i++];
    }
  }
  std::string b;  // re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()
  for (std::size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && lower(a[i]) && upper(a[i + 1])) {
      b += a[i];
      b += '_';
      b += a[i + 1];
      i += 2;
    } else {
      b += a[i++];
    }
  }
  for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return b;
}

TESSEL_INLINE std::vector<std::string> keras_unique_names(const std::vector<std::string>& bases) {
  std::vector<std::string> out;
  std::vector<std::pair<std::string, std::size_t>> used;
  for (const auto& b : bases) {
    auto it = std::find_if(used.begin(), used.end(), [&](const auto& u) { return u.first == b; });
    if (it == used.end()) {
      used.emplace_back(b, 0);
      out.push_back(b);
    } else {
      out.push_back(b + "_" + std::to_string(++it->second));
    }
  }
  return out;
}

TESSEL_INLINE std::vector<std::size_t> keras_slot_order(
    std::string_view keras_optimizer, const std::vector<std::string>& slot_paths) {
  std::vector<std::size_t> order(slot_paths.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (keras_optimizer != "rm_sprop") return order;
  auto kind = [&](std::size_t i) {
    const std::string& p = slot_paths[i];
    if (p.ends_with("_velocity")) return 0;
    if (p.ends_with("_momentum")) return 1;
    return 2;  // _average_gradient
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return kind(a) < kind(b); });
  return order;
}
}  // namespace tessel::saving

namespace tessel::saving::detail {

TESSEL_INLINE std::string shape_text(const std::vector<std::size_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

TESSEL_INLINE std::size_t elements(const std::vector<std::size_t>& s) {
  std::size_t n = 1;
  for (std::size_t d : s) n *= d;
  return n;
}

TESSEL_INLINE void write_variable(const h5::object& vars, std::size_t i, const saved_variable& v,
                                  std::vector<known_crc>& known, int fd) {
  const std::span<const float> values = v.data();
  if (values.size() != elements(v.shape))
    throw value_error("save_weights: variable '" + v.path + "' has " +
                      std::to_string(values.size()) + " values for its shape " +
                      shape_text(v.shape));
  const h5::object d = h5::write_dataset(vars, std::to_string(i), v.shape, values);
  const std::uint32_t crc = crc32_of(values.data(), values.size_bytes());
  h5::write_attribute(d, crc_attribute, crc);
  if (const auto at = h5::raw_data_offset(d); at && !values.empty())
    known.push_back({*at, values.size_bytes(), crc});
  if (fd >= 0) start_writeback(fd);
}

TESSEL_INLINE std::uint64_t little_endian(const unsigned char* p, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE checksum_state check_weights_file(const std::filesystem::path& path,
                                                std::string_view where) {
  const std::string p = path.string();
  const std::string head = std::string(where) + ": cannot load '" + p + "': ";
  const data::path_access a = data::check_path(path, data::path_kind::file);
  if (!a.ok()) throw value_error(head + "it " + a.reason + ".");
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw value_error(head + "cannot read its size: " + ec.message() + ".");
  if (size == 0)
    throw value_error(head +
                      "the file is empty (0 bytes), not a weights file. Was its write "
                      "interrupted? Save the weights again or use another copy.");
  std::uint64_t content = size;
  const checksum_state checksum = verify_checksum(path, size, content);
  if (checksum == checksum_state::damaged)
    throw value_error(head +
                      "the file was damaged after tessel wrote it: its bytes do not match "
                      "the CRC-32 tessel recorded at its end (flipped bytes on the disk or in a "
                      "copy, or a part overwritten). Use another copy of the file.");
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 96> b{};
  in.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(b.size()));
  const auto got = static_cast<std::size_t>(in.gcount());
  if (!in && !in.eof()) throw value_error(head + "the file cannot be read.");
  static constexpr unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (got < 8 || std::memcmp(b.data(), signature, 8) != 0)
    throw value_error(head +
                      "it is not an HDF5 file (it does not start with HDF5's signature "
                      "\\x89HDF\\r\\n\\x1a\\n, as every .weights.h5 file Keras or tessel writes "
                      "does). Pass a file written by save_weights.");
  const std::string truncated =
      head + "the file is truncated: it has " + std::to_string(size) + " bytes, ";
  const std::string again =
      " Was a copy or a write cut short? Save the weights again or use "
      "another copy.";
  if (got < 12) throw value_error(truncated + "too few for an HDF5 superblock." + again);
  // The superblock (HDF5 file format, "Superblock"): versions 0 and 1 keep the end-of-file
  // address after the base and free-space addresses, 2 and 3 after the base and extension ones.
  const unsigned version = b[8];
  std::size_t offsets = 0, at = 0;
  if (version <= 1) {
    // Its size of offsets is byte 13: a file cut before it is cut inside the superblock.
    if (got < 14) throw value_error(truncated + "too few for its superblock." + again);
    offsets = b[13];
    at = (version == 0 ? 24 : 28) + 2 * offsets;
  } else if (version <= 3) {
    offsets = b[9];
    at = 12 + 2 * offsets;
  } else {
    return checksum;  // a later format: libhdf5 checks it
  }
  if (offsets != 2 && offsets != 4 && offsets != 8) return checksum;
  if (at + offsets > got) throw value_error(truncated + "too few for its superblock." + again);
  const std::size_t base_at = version <= 1 ? (version == 0 ? 24 : 28) : 12;
  const std::uint64_t base = detail::little_endian(b.data() + base_at, offsets);
  const std::uint64_t eof = detail::little_endian(b.data() + at, offsets);
  // base + eof may not fit 64 bits (damaged addresses): no sum that wraps passes for a size.
  if (eof > size || base > size - eof)
    throw value_error(truncated + "and its HDF5 superblock says it ends at byte " +
                      (base > ~eof ? std::string("2^64 or later") : std::to_string(base + eof)) +
                      "." + again);
  return checksum;
}
}  // namespace tessel::saving

namespace tessel::saving::detail {

TESSEL_INLINE void read_variable(const h5::object& vars, std::size_t i, saved_variable& v,
                                 const std::string& head, const std::string& what, bool verified) {
  const std::string name = std::to_string(i);
  if (!h5::has(vars, name))
    throw value_error(head + "the file has no variable " + std::to_string(i) + " of " + what +
                      " ('" + vars.child_path(name) + "', the model's '" + v.path +
                      "'). The file is of another model; load a file saved from this one.");
  auto [d, info] = h5::open_dataset(vars, name);
  if (info.type_class != H5T_FLOAT && info.type_class != H5T_INTEGER)
    throw value_error(head + "'" + d.path + "' (the model's '" + v.path +
                      "') does not hold numbers.");
  if (info.shape != v.shape)
    throw value_error(head + "variable '" + v.path + "' has shape " + shape_text(v.shape) +
                      " in this model, but " + shape_text(info.shape) + " in the file ('" + d.path +
                      "'). The file is of another model (or of this model built with "
                      "other sizes); load a file saved from this one.");
  v.values.assign(elements(v.shape), 0.0f);
  h5::read_values(d, std::span<float>(v.values));
  if (verified) return;  // the file's checksum covered these bytes
  const std::optional<std::uint32_t> crc = h5::read_attribute<std::uint32_t>(d, crc_attribute);
  if (crc && *crc != crc32_of(v.values.data(), v.values.size() * sizeof(float)))
    throw value_error(head + "the values of '" + v.path + "' ('" + d.path +
                      "') do not match the checksum tessel recorded when it wrote them: the file "
                      "was damaged after it was written (flipped bytes on the disk or in a "
                      "copy). Use another copy of the file.");
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE optimizer_found read_weights_file(const std::filesystem::path& path,
                                                weights_content& expected, std::string_view where) {
  // A file whose trailer matched its checksum holds every value as tessel wrote it: the
  // datasets' own checksums need not be computed again.
  const bool verified = check_weights_file(path, where) == checksum_state::ok;
  const std::string head = std::string(where) + ": cannot load '" + path.string() + "': ";
  try {
    const h5::object file = h5::open_file(path.string());
    if (!h5::has(file, "layers"))
      throw value_error(head +
                        "the file has no 'layers' group, so it is not a Keras weights "
                        "file (model.save_weights writes one).");
    const h5::object layers = h5::open_group(file, "layers");
    // Groups with variables in the file that the model has no layer for: another model.
    std::vector<std::string> ours;
    for (const auto& l : expected.layers) ours.push_back(l.group);
    for (const auto& g : h5::members(layers)) {
      if (std::find(ours.begin(), ours.end(), g) != ours.end()) continue;
      const h5::object group = h5::open_group(layers, g);
      if (!h5::has(group, "vars") || h5::members(h5::open_group(group, "vars")).empty()) continue;
      std::string with;
      for (const auto& l : expected.layers)
        if (!l.variables.empty()) with += (with.empty() ? "" : ", ") + l.group;
      throw value_error(head + "the file has weights for a layer 'layers/" + g +
                        "', which this model does not have (its layers with weights: " + with +
                        "). The file is of another model; load a file saved from this one.");
    }
    for (auto& l : expected.layers) {
      if (l.variables.empty()) continue;
      std::string paths;
      for (const auto& v : l.variables) paths += (paths.empty() ? "" : ", ") + v.path;
      const std::string what = "layer '" + l.name + "' (group 'layers/" + l.group + "')";
      if (!h5::has(layers, l.group) || !h5::has(h5::open_group(layers, l.group), "vars"))
        throw value_error(head + "the file has no weights for " + what + ", whose variables are " +
                          paths +
                          ". The file is of another model; load a file saved from this "
                          "one.");
      const h5::object vars = h5::open_group(h5::open_group(layers, l.group), "vars");
      const std::size_t n = h5::members(vars).size();
      if (n != l.variables.size())
        throw value_error(head + "the file has " + std::to_string(n) + " variables for " + what +
                          ", this model has " + std::to_string(l.variables.size()) + " (" + paths +
                          "). The file is of another model; load a file saved from "
                          "this one.");
      for (std::size_t i = 0; i < l.variables.size(); ++i)
        detail::read_variable(vars, i, l.variables[i], head, what, verified);
    }
    if (!expected.optimizer || !h5::has(file, "optimizer")) return optimizer_found::none;
    const h5::object group = h5::open_group(file, "optimizer");
    if (!h5::has(group, "vars")) return optimizer_found::none;
    const h5::object vars = h5::open_group(group, "vars");
    saved_optimizer& o = *expected.optimizer;
    // Keras names an optimizer after its class unless told otherwise: a file of another of
    // Keras's optimizers is refused by name (Adam's and RMSprop's slots have the same shapes); a
    // name of the user's own is left to the counts and shapes below.
    static constexpr std::string_view keras_optimizers[] = {
        "sgd",   "adam", "adam_w", "rm_sprop", "adagrad",   "adadelta", "adamax",
        "nadam", "ftrl", "lion",   "lamb",     "adafactor", "muon"};
    const std::optional<std::string> name = h5::read_string_attribute(vars, "name");
    if (name && *name != o.name &&
        std::find(std::begin(keras_optimizers), std::end(keras_optimizers), *name) !=
            std::end(keras_optimizers))
      throw value_error(head + "the file holds the state of the optimizer '" + *name +
                        "', and this model is compiled with '" + o.name +
                        "'. Compile the model with the file's optimizer before loading, or "
                        "load the weights into a model that is not compiled.");
    const std::size_t n = h5::members(vars).size();
    if (n != 2 && n != 2 + o.slots.size())
      throw value_error(head + "the file's optimizer '" + o.name + "' has " + std::to_string(n) +
                        " variables, and this model's has " + std::to_string(2 + o.slots.size()) +
                        " (the iteration count, the learning rate and " +
                        std::to_string(o.slots.size()) +
                        " slots). Compile the model as the saved one was (the same optimizer "
                        "and arguments) before loading.");
    for (std::size_t i = 0; i < 2; ++i)
      if (!h5::has(vars, std::to_string(i)))
        throw value_error(head + "the file's optimizer has no variable " + std::to_string(i) +
                          " ('" + vars.child_path(std::to_string(i)) + "', its " +
                          (i == 0 ? "iteration count" : "learning rate") + ").");
    {
      auto [d, info] = h5::open_dataset(vars, "0");
      if (!info.shape.empty() || info.type_class != H5T_INTEGER)
        throw value_error(head + "'" + d.path +
                          "', the optimizer's iteration count, is not an "
                          "integer scalar.");
      std::int64_t it = 0;
      h5::read_values(d, std::span<std::int64_t>(&it, 1));
      const auto crc = h5::read_attribute<std::uint32_t>(d, detail::crc_attribute);
      const auto it32 = static_cast<std::int32_t>(it);
      if (crc && *crc != detail::crc32_of(&it32, sizeof it32))
        throw value_error(head + "the optimizer's iteration count ('" + d.path +
                          "') does not match the checksum tessel recorded: the file was damaged "
                          "after it was written. Use another copy of the file.");
      o.iterations = it;
    }
    {
      auto [d, info] = h5::open_dataset(vars, "1");
      if (!info.shape.empty() || info.type_class != H5T_FLOAT)
        throw value_error(head + "'" + d.path +
                          "', the optimizer's learning rate, is not a "
                          "float scalar.");
      float lr = 0;
      h5::read_values(d, std::span<float>(&lr, 1));
      const auto crc = h5::read_attribute<std::uint32_t>(d, detail::crc_attribute);
      if (crc && *crc != detail::crc32_of(&lr, sizeof lr))
        throw value_error(head + "the optimizer's learning rate ('" + d.path +
                          "') does not match the checksum tessel recorded: the file was damaged "
                          "after it was written. Use another copy of the file.");
      // The learning rate in full where tessel wrote it and it is the dataset's, rounded.
      const auto full = h5::read_attribute<double>(d, detail::learning_rate_attribute);
      o.learning_rate = full && static_cast<float>(*full) == lr ? *full : lr;
    }
    if (n == 2) return optimizer_found::counters;
    for (std::size_t i = 0; i < o.slots.size(); ++i)
      detail::read_variable(vars, i + 2, o.slots[i], head, "the optimizer '" + o.name + "'",
                            verified);
    return optimizer_found::all;
  } catch (const value_error& e) {
    // libhdf5's failures (h5.hpp) name the file; say which call met them too.
    if (std::string_view(e.what()).starts_with(where)) throw;
    throw value_error(std::string(where) + ": cannot load " + e.what());
  }
}

}  // namespace tessel::saving
#endif  // TESSEL_DEFINITIONS
