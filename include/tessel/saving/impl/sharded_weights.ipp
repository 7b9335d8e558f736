// The definitions of saving/sharded_weights.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include sharded_weights.hpp.
namespace tessel::saving::detail {

TESSEL_INLINE std::string shard_name(const std::string& base, std::size_t i) {
  char b[24];
  std::snprintf(b, sizeof b, "%05zu", i);
  return base + "_" + b + ".weights.h5";
}

TESSEL_INLINE file_sum write_shard(const std::filesystem::path& tmp,
                                   const std::vector<shard_item>& items) {
  {
    std::vector<known_crc> known;
    h5::memory_file memory(tmp.string());
    const h5::object& file = memory.root();
    for (const shard_item& it : items) {
      // Create the group path as far as it goes.
      std::vector<h5::object> chain;
      std::string part;
      const h5::object* parent = &file;
      h5::object holder;
      std::size_t start = 0;
      while (start <= it.group.size()) {
        const std::size_t end = std::min(it.group.find('/', start), it.group.size());
        part = it.group.substr(start, end - start);
        holder = h5::has(*parent, part) ? h5::open_group(*parent, part)
                                        : h5::create_group(*parent, part);
        chain.push_back(std::move(holder));
        parent = &chain.back();
        start = end + 1;
      }
      const h5::object& vars = chain.back();
      if (it.makes_group) {
        h5::write_attribute(vars, "name", it.name);
        continue;
      }
      if (it.variable != nullptr) {
        write_variable(vars, it.index, *it.variable, known);
      } else if (it.is_iterations) {
        h5::write_attribute(h5::write_scalar(vars, "0", it.iterations), crc_attribute,
                            crc32_of(&it.iterations, sizeof it.iterations));
      } else {
        const auto x = static_cast<float>(it.real);
        const h5::object d =
            h5::write_dataset(vars, std::to_string(it.index), {}, std::span<const float>(&x, 1));
        h5::write_attribute(d, crc_attribute, crc32_of(&x, sizeof x));
        if (it.index == 1) h5::write_attribute(d, learning_rate_attribute, it.real);
      }
    }
    return write_memory_file(memory, tmp, known);
  }
}
}  // namespace tessel::saving::detail

namespace tessel::saving {

TESSEL_INLINE void write_sharded_weights(const std::filesystem::path& path,
                                         const weights_content& content, double max_shard_size) {
  const std::string p = path.string();
  if (!p.ends_with(".weights.json"))
    throw value_error(
        "save_weights: The filename must end in `.weights.json` when `max_shard_size` is "
        "specified. Received: filepath=" +
        p);
  if (!(max_shard_size > 0) || !std::isfinite(max_shard_size))
    throw value_error("save_weights: max_shard_size must be a positive number of GB. Received: " +
                      std::to_string(max_shard_size));
  const double max_bytes = max_shard_size * 1024.0 * 1024.0 * 1024.0;
  const std::string file = path.filename().string();
  const std::string base = file.substr(0, file.size() - std::string_view(".weights.json").size());
  std::vector<std::vector<detail::shard_item>> shards(1);
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  double total = 0, current = 0;
  auto make = [&](const std::string& group, const std::string& name) {
    detail::shard_item it;
    it.group = group;
    it.name = name;
    it.makes_group = true;
    shards.back().push_back(it);
  };
  auto put = [&](detail::shard_item it, double bytes, const std::string& what) {
    total += bytes;
    if (bytes > max_bytes)
      throw value_error("save_weights: The size of " + what + " is " +
                        std::to_string(static_cast<long long>(bytes)) +
                        " bytes, which exceeds the maximum shard size of " +
                        std::to_string(static_cast<long long>(max_bytes)) +
                        " bytes. You can increase the `max_shard_size` parameter to "
                        "accommodate the size.");
    current += bytes;
    if (current > max_bytes) {
      shards.emplace_back();
      current = bytes;
    }
    const std::string shard = detail::shard_name(base, shards.size() - 1);
    shards.back().push_back(std::move(it));
    const std::string key = "/" + shards.back().back().group;
    if (!map.contains(key)) {
      map[key] = shard;
    } else {
      if (!map[key].is_array()) map[key] = nlohmann::ordered_json::array({map[key]});
      if (std::find(map[key].begin(), map[key].end(), shard) == map[key].end())
        map[key].push_back(shard);
    }
  };
  make("vars", content.model_name);
  for (const saved_layer& l : content.layers) {
    const std::string group = "layers/" + l.group + "/vars";
    make(group, l.name);
    for (std::size_t i = 0; i < l.variables.size(); ++i) {
      detail::shard_item it;
      it.group = group;
      it.index = i;
      it.variable = &l.variables[i];
      put(it, 4.0 * static_cast<double>(detail::elements(l.variables[i].shape)),
          l.variables[i].path);
    }
  }
  if (content.optimizer) {
    const saved_optimizer& o = *content.optimizer;
    make("optimizer/vars", o.name);
    if (o.iterations < 0 || o.iterations > std::numeric_limits<std::int32_t>::max())
      throw value_error("save_weights: the optimizer's iteration count " +
                        std::to_string(o.iterations) +
                        " does not fit Keras's int32 counter in a weights file");
    detail::shard_item it;
    it.group = "optimizer/vars";
    it.is_iterations = true;
    it.iterations = static_cast<std::int32_t>(o.iterations);
    put(it, 4.0, "the optimizer's iteration count");
    it.is_iterations = false;
    if (o.learning_rate) {
      it.index = 1;
      it.real = *o.learning_rate;
      put(it, 4.0, "the optimizer's learning rate");
    }
    for (std::size_t i = 0; i < o.slots.size(); ++i) {
      detail::shard_item s;
      s.group = "optimizer/vars";
      s.index = i + o.counters();
      s.variable = &o.slots[i];
      put(s, 4.0 * static_cast<double>(detail::elements(o.slots[i].shape)), o.slots[i].path);
    }
    if (o.scalar) {
      it.index = o.counters() + o.slots.size();
      it.real = *o.scalar;
      put(it, 4.0, "the optimizer's own scalar");
    }
  }
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  {
    const data::path_access where = data::check_path(dir, data::path_kind::directory);
    if (!where.ok())
      throw value_error("Cannot write '" + p + "': the directory '" + dir.string() + "' " +
                        where.reason + ".");
  }
  // Every shard under a temporary name first: the old set stays whole until the new one is.
  std::vector<std::filesystem::path> written;
  nlohmann::ordered_json sums = nlohmann::ordered_json::object();
  try {
    for (std::size_t k = 0; k < shards.size(); ++k) {
      const std::string name = detail::shard_name(base, k);
      written.push_back(temporary_path(dir / name));
      const file_sum s = detail::write_shard(written.back(), shards[k]);
      sums[name] = {{"bytes", s.bytes}, {"crc32", s.crc}};
    }
  } catch (...) {
    std::error_code ignored;  // this save's temporary files, not a directory of that name
    for (const auto& t : written)
      if (std::filesystem::is_regular_file(std::filesystem::symlink_status(t, ignored)))
        std::filesystem::remove(t, ignored);
    throw;
  }
  // Then into place, and the index last: a load of an index whose shards are not all of its
  // save is refused by their sums.
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const std::filesystem::path to = dir / detail::shard_name(base, k);
    if (std::rename(written[k].c_str(), to.c_str()) != 0)
      throw runtime_error("Cannot rename '" + written[k].string() + "' to '" + to.string() +
                          "': " + std::strerror(errno));
    ++files_written();
  }
  detail::sync_path(dir, true);
  nlohmann::ordered_json j;
  j["metadata"]["total_size"] = total;
  j["weight_map"] = map;
  j["tessel_shards"] = sums;
  const std::string text = j.dump(4);
  write_atomically(path, [&](const std::filesystem::path& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw runtime_error("Cannot write '" + tmp.string() + "'.");
  });
}

TESSEL_INLINE optimizer_found read_sharded_weights(const std::filesystem::path& path,
                                                   weights_content& expected,
                                                   std::string_view where) {
  const std::string p = path.string();
  const std::string head = std::string(where) + ": cannot load '" + p + "': ";
  const data::path_access a = data::check_path(path, data::path_kind::file);
  if (!a.ok()) throw value_error(head + "it " + a.reason + ".");
  nlohmann::json j;
  try {
    std::ifstream in(path, std::ios::binary);
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw value_error(head + "it is not valid JSON (" + e.what() +
                      "); a sharded weights file is the JSON save_weights writes with "
                      "max_shard_size.");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw value_error(head +
                      "it has no \"weight_map\" object, so it is not Keras's sharded weights "
                      "file (save_weights with max_shard_size writes one).");
  // The shards, in the order the map first names them.
  std::vector<std::string> files;
  for (const auto& [key, v] : j["weight_map"].items()) {
    const auto names = v.is_array() ? v : nlohmann::json::array({v});
    for (const auto& n : names) {
      if (!n.is_string())
        throw value_error(head + "its weight_map entry \"" + key +
                          "\" is not a file name or a list of them.");
      const std::string f = n.get<std::string>();
      // A NUL would cut the name short where the system opens it (another file than named).
      if (f.empty() || f.find_first_of(std::string_view("/\0", 2)) != std::string::npos ||
          f == "." || f == "..") {
        std::string shown;  // a NUL would end the message where it stands
        for (const char c : f) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
        throw value_error(head + "its weight_map names the shard \"" + shown +
                          "\", which is not a file name beside it.");
      }
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  }
  // The sums tessel recorded for the shards of one save (an index Keras wrote has none).
  const auto recorded = j.find("tessel_shards");
  if (recorded != j.end() && !recorded->is_object())
    throw value_error(head + "its \"tessel_shards\" is not an object of the shards' sums.");
  const detail::temporary_file merged(".weights.h5");
  {
    // Built in memory, then written (h5::memory_file: a full disk is an error, not a crash).
    h5::memory_file memory(merged.path().string());
    const h5::object& out = memory.root();
    for (const std::string& f : files) {
      const std::filesystem::path shard = path.parent_path() / f;
      const data::path_access s = data::check_path(shard, data::path_kind::file);
      if (!s.ok())
        throw value_error(head + "its shard '" + shard.string() + "' " + s.reason +
                          ". Copy every shard the .weights.json names beside it.");
      check_weights_file(shard, where);
      if (recorded != j.end()) {
        const auto e = recorded->find(f);
        const std::optional<file_sum> has = read_checksum_trailer(shard);
        const bool same = e != recorded->end() && e->is_object() && has &&
                          e->contains("bytes") && (*e)["bytes"].is_number_unsigned() &&
                          e->contains("crc32") && (*e)["crc32"].is_number_unsigned() &&
                          (*e)["bytes"].get<std::uint64_t>() == has->bytes &&
                          (*e)["crc32"].get<std::uint64_t>() == has->crc;
        if (!same)
          throw value_error(head + "its shard '" + shard.string() +
                            "' is not the one this index was saved with (its size or CRC-32 "
                            "differs from the index's): a save that stopped part-way, or a "
                            "shard of another save. Save the weights again, or use a complete "
                            "copy of the set.");
      }
      const h5::object in = h5::open_file(shard.string());
      std::vector<std::string> groups;
      if (h5::has(in, "vars")) groups.push_back("vars");
      if (h5::has(in, "layers"))
        for (const auto& g : h5::members(h5::open_group(in, "layers")))
          groups.push_back("layers/" + g + "/vars");
      if (h5::has(in, "optimizer")) groups.push_back("optimizer/vars");
      for (const std::string& g : groups) {
        if (H5Lexists(in.id(), g.c_str(), H5P_DEFAULT) <= 0) continue;  // a layer's name alone
        h5::handle src(H5Gopen2(in.id(), g.c_str(), H5P_DEFAULT), H5Gclose);
        if (!src) h5::fail(shard.string(), "cannot open the group '" + g + "'");
        const h5::object from{std::move(src), shard.string(), "/" + g};
        if (H5Lexists(out.id(), g.c_str(), H5P_DEFAULT) <= 0) {
          h5::handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
          H5Pset_create_intermediate_group(lcpl.id(), 1);
          h5::handle made(H5Gcreate2(out.id(), g.c_str(), lcpl.id(), H5P_DEFAULT, H5P_DEFAULT),
                          H5Gclose);
          if (!made) h5::fail(merged.path().string(), "cannot create the group '" + g + "'");
        }
        h5::handle dst(H5Gopen2(out.id(), g.c_str(), H5P_DEFAULT), H5Gclose);
        const h5::object to{std::move(dst), merged.path().string(), "/" + g};
        if (const auto name = h5::read_string_attribute(from, "name"))
          if (!h5::read_string_attribute(to, "name")) h5::write_attribute(to, "name", *name);
        for (const auto& m : h5::members(from)) {
          if (h5::has(to, m))
            throw value_error(head + "the variable '/" + g + "/" + m +
                              "' is in more than one shard (again in '" + f + "').");
          if (H5Ocopy(from.id(), m.c_str(), to.id(), m.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
            h5::fail(shard.string(), "cannot copy '/" + g + "/" + m + "'");
        }
      }
    }
    const std::span<const unsigned char> bytes = memory.close();
    file_writer written(merged.path(), "temporary weights file");
    written.write(bytes.data(), bytes.size());
    written.finish();
  }
  try {
    return read_weights_file(merged.path(), expected, where);
  } catch (const value_error& e) {
    throw value_error(detail::renamed(e.what(), merged.path().string(), p));
  }
}

}  // namespace tessel::saving
