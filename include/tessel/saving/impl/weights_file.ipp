// The definitions of saving/weights_file.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include weights_file.hpp.
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

TESSEL_INLINE std::vector<std::size_t> keras_slot_order(const std::vector<int>& pass) {
  std::vector<std::size_t> order(pass.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return pass[a] < pass[b]; });
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
                                  std::vector<known_crc>& known) {
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
}

TESSEL_INLINE file_sum write_memory_file(h5::memory_file& file,
                                         const std::filesystem::path& path,
                                         const std::vector<known_crc>& known) {
  const std::span<const unsigned char> image = file.close();
  const std::optional<std::uint32_t> crc = crc32_of_image(image, known);
  if (!crc) throw runtime_error("Cannot checksum the image of '" + path.string() + "'.");
  const auto trailer = checksum_trailer(image.size(), *crc);
  file_writer out(path, "weights file");
  out.write(image.data(), image.size());
  out.write(trailer.data(), trailer.size());
  out.finish();
  return {image.size(), *crc};
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
    const std::size_t n = h5::members(vars).size(), counters = o.counters();
    const std::size_t all = counters + o.slots.size() + (o.scalar ? 1 : 0);
    if (n != counters && n != all)
      throw value_error(head + "the file's optimizer" + (name ? " '" + *name + "'" : "") +
                        " has " + std::to_string(n) + " variables, and this model's ('" + o.name +
                        "') has " + std::to_string(all) +
                        " (the iteration count, " +
                        (o.learning_rate ? "the learning rate and " : "no learning rate (a "
                                                                      "schedule's) and ") +
                        std::to_string(o.slots.size()) + " slots" +
                        (o.scalar ? " and its own scalar" : "") +
                        "). Compile the model as the saved one was (the same optimizer "
                        "and arguments) before loading.");
    for (std::size_t i = 0; i < counters; ++i)
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
    if (o.learning_rate) {
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
    if (n == counters) return optimizer_found::counters;
    for (std::size_t i = 0; i < o.slots.size(); ++i)
      detail::read_variable(vars, i + counters, o.slots[i], head, "the optimizer '" + o.name + "'",
                            verified);
    if (o.scalar) {
      // (Its value follows from the iteration count: the state derives it; its form is checked.)
      auto [d, info] = h5::open_dataset(vars, std::to_string(all - 1));
      if (!info.shape.empty() || info.type_class != H5T_FLOAT)
        throw value_error(head + "'" + d.path + "', the optimizer's own scalar, is not a float "
                          "scalar.");
      float x = 0;
      h5::read_values(d, std::span<float>(&x, 1));
      o.scalar = x;
    }
    return optimizer_found::all;
  } catch (const value_error& e) {
    // libhdf5's failures (h5.hpp) name the file; say which call met them too.
    if (std::string_view(e.what()).starts_with(where)) throw;
    throw value_error(std::string(where) + ": cannot load " + e.what());
  }
}

}  // namespace tessel::saving
