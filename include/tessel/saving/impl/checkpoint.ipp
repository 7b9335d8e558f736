// The definitions of saving/checkpoint.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include checkpoint.hpp.
namespace tessel::checkpoint_detail {

TESSEL_INLINE std::string shard_name(std::size_t device, const char* ext) {
  char name[40];
  std::snprintf(name, sizeof name, "shard-%05zu.%s", device, ext);
  return name;
}

TESSEL_INLINE void write_file(const fs::path& p, const void* data, std::size_t bytes) {
  saving::file_writer f(p, "checkpoint file");
  f.write(data, bytes);
  f.finish();
}

TESSEL_INLINE void write_text(const fs::path& p, const std::string& text) {
  write_file(p, text.data(), text.size());
}

TESSEL_INLINE json read_json(const fs::path& p, const std::string& what) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw runtime_error("Cannot read " + what + " '" + p.string() +
                        "': " + data::open_failure(p, errno, false));
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw runtime_error("The checkpoint's " + what + " '" + p.string() +
                        "' is damaged (not valid JSON: " + e.what() +
                        "); restore from another checkpoint");
  }
}

TESSEL_INLINE std::size_t linear(std::span<const std::size_t> at,
                                 std::span<const std::size_t> extent) {
  std::size_t k = 0;
  for (std::size_t d = 0; d < extent.size(); ++d) k = k * extent[d] + at[d];
  return k;
}

TESSEL_INLINE std::size_t read_overlap(const fs::path& dir, const saved_block& s,
                                       std::span<const std::size_t> mo,
                                       std::span<const std::size_t> me, std::span<float> out,
                                       const std::string& path) {
  const std::size_t rank = me.size();
  std::vector<std::size_t> lo(rank), hi(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(mo[d], s.offset[d]);
    hi[d] = std::min(mo[d] + me[d], s.offset[d] + s.extent[d]);
    if (lo[d] >= hi[d]) return 0;
  }
  std::size_t block_values = 1;
  for (auto e : s.extent) block_values *= e;
  // The first and last values needed, relative to the saved block.
  std::vector<std::size_t> first(rank), last(rank);
  for (std::size_t d = 0; d < rank; ++d)
    first[d] = lo[d] - s.offset[d], last[d] = hi[d] - 1 - s.offset[d];
  const std::size_t begin_byte = linear(first, s.extent) * sizeof(float);
  const std::size_t end_byte = (linear(last, s.extent) + 1) * sizeof(float);
  const std::size_t c0 = begin_byte / chunk_bytes, c1 = (end_byte - 1) / chunk_bytes + 1;
  const std::size_t block_bytes = block_values * sizeof(float);
  if (s.chunks.size() != (block_bytes + chunk_bytes - 1) / chunk_bytes)
    throw runtime_error("The checkpoint manifest in '" + dir.string() + "' lists " +
                        std::to_string(s.chunks.size()) + " checksums for a block of '" + path +
                        "' that has " + std::to_string(block_bytes) +
                        " bytes: the manifest is damaged; restore from another checkpoint");
  const std::size_t span_begin = c0 * chunk_bytes;
  const std::size_t span_end = std::min(c1 * chunk_bytes, block_bytes);
  // The block is `mine` whole (a load onto the layout it was saved from): read into `out` itself.
  bool whole = true;
  for (std::size_t d = 0; d < rank; ++d)
    whole = whole && s.offset[d] == mo[d] && s.extent[d] == me[d];
  std::unique_ptr<float[]> own;
  if (!whole) own.reset(new float[(span_end - span_begin) / sizeof(float)]);
  float* const buf = whole ? out.data() : own.get();
  const fs::path file = dir / s.file;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw runtime_error("Cannot read the checkpoint file '" + file.string() +
                        "': " + data::open_failure(file, errno, false));
  std::size_t done = 0;
  const std::size_t want = span_end - span_begin;
  auto* dst = reinterpret_cast<char*>(buf);
  while (done < want) {
    const ssize_t n =
        ::pread(fd, dst + done, want - done, static_cast<off_t>(s.at + span_begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done < want)
    throw runtime_error("The checkpoint file '" + file.string() + "' is truncated: '" + path +
                        "' needs bytes up to " + std::to_string(s.at + span_end) +
                        "; restore from another checkpoint");
  for (std::size_t c = c0; c < c1; ++c) {
    const std::size_t b = c * chunk_bytes - span_begin;
    const std::size_t n = std::min(chunk_bytes, block_bytes - c * chunk_bytes);
    if (saving::detail::crc32_of(dst + b, n) != s.chunks[c])
      throw runtime_error("The checkpoint file '" + file.string() + "' is damaged: bytes " +
                          std::to_string(s.at + c * chunk_bytes) + " to " +
                          std::to_string(s.at + c * chunk_bytes + n) + " of '" + path +
                          "' do not match their checksum; restore from another checkpoint");
  }
  if (whole) return block_values;
  // Copy the overlap's contiguous runs along the last dimension (a rank-0 block: its one value).
  std::vector<std::size_t> idx(lo);
  const std::size_t run = rank == 0 ? 1 : hi[rank - 1] - lo[rank - 1];
  std::size_t copied = 0;
  std::vector<std::size_t> rel_s(rank), rel_m(rank);
  while (true) {
    for (std::size_t d = 0; d < rank; ++d)
      rel_s[d] = idx[d] - s.offset[d], rel_m[d] = idx[d] - mo[d];
    const std::size_t from = linear(rel_s, s.extent) - span_begin / sizeof(float);
    std::copy_n(buf + from, run, out.data() + linear(rel_m, me));
    copied += run;
    std::size_t d = rank == 0 ? 0 : rank - 1;
    while (d-- > 0) {
      if (++idx[d] < hi[d]) break;
      idx[d] = lo[d];
    }
    if (d == static_cast<std::size_t>(-1)) break;
  }
  return copied;
}

TESSEL_INLINE json real_to_json(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

TESSEL_INLINE std::optional<double> real_from_json(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null() || v == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (v == "inf") return std::numeric_limits<double>::infinity();
  if (v == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

TESSEL_INLINE std::optional<std::vector<std::size_t>> sizes_of(const json* v) {
  if (v == nullptr || !v->is_array()) return std::nullopt;
  std::vector<std::size_t> out;
  out.reserve(v->size());
  for (const json& x : *v) {
    if (!x.is_number_unsigned()) return std::nullopt;
    out.push_back(x.get<std::size_t>());
  }
  return out;
}

TESSEL_INLINE const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

TESSEL_INLINE std::string sizes_text(const std::vector<std::size_t>& s) {
  std::string t = "[";
  for (std::size_t d = 0; d < s.size(); ++d) t += (d ? ", " : "") + std::to_string(s[d]);
  return t + "]";
}

TESSEL_INLINE manifest read_manifest(const fs::path& dir) {
  const fs::path mpath = dir / "manifest.json";
  std::error_code ec;
  if (!fs::exists(mpath, ec))
    throw runtime_error("No checkpoint at '" + dir.string() +
                        "': it has no manifest.json (a save that did not finish, or not a "
                        "tessel checkpoint directory); pass a directory save_checkpoint wrote");
  const json m = read_json(mpath, "manifest");
  const json* format = m.is_object() ? field(m, "format") : nullptr;
  if (format == nullptr || *format != "tessel-checkpoint" || !m.contains("variables"))
    throw runtime_error("'" + mpath.string() + "' is not a tessel checkpoint manifest");
  const auto damaged = [&](const std::string& what) {
    return runtime_error("The checkpoint manifest '" + mpath.string() + "' is damaged: " + what +
                         "; restore from another checkpoint");
  };

  // The files, each checked against the disk before any block in it is trusted.
  const json* files = field(m, "files");
  if (files == nullptr || !files->is_object())
    throw damaged("it has no list of its files (\"files\")");
  std::vector<std::pair<std::string, std::uint64_t>> sizes;
  for (const auto& item : files->items()) {
    const std::string& file = item.key();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      throw damaged("it lists the file '" + file +
                    "', which is not the name of a file in the checkpoint's directory");
    if (!item.value().is_number_unsigned())
      throw damaged("the size it lists for '" + file + "' is not a number of bytes");
    const std::uint64_t bytes = item.value().get<std::uint64_t>();
    const fs::path f = dir / file;
    const auto size = fs::file_size(f, ec);
    if (ec)
      throw runtime_error("The checkpoint '" + dir.string() + "' lacks its file '" + file +
                          "'; restore from another checkpoint");
    if (size != bytes)
      throw runtime_error("The checkpoint file '" + f.string() + "' has " + std::to_string(size) +
                          " bytes, but the manifest says " + std::to_string(bytes) +
                          " (truncated or replaced); restore from another checkpoint");
    sizes.emplace_back(file, bytes);
  }

  const json& variables = m["variables"];
  if (!variables.is_array()) throw damaged("its \"variables\" is not a list");
  manifest out;
  out.variables.reserve(variables.size());
  for (std::size_t k = 0; k < variables.size(); ++k) {
    const json& e = variables[k];
    std::string which = "variable " + std::to_string(k);
    if (!e.is_object()) throw damaged(which + " is not an object");
    manifest_variable v;
    const json* path = field(e, "path");
    if (path == nullptr || !path->is_string()) throw damaged(which + " has no path");
    v.path = path->get<std::string>();
    which += " ('" + v.path + "')";
    const json* group = field(e, "group");
    const auto* g = group == nullptr ? std::end(group_names)
                                     : std::find_if(std::begin(group_names), std::end(group_names),
                                                    [&](const char* n) { return *group == n; });
    if (g == std::end(group_names)) throw damaged(which + " has no group of a training state");
    v.group = static_cast<std::size_t>(g - std::begin(group_names));
    const json* dtype = field(e, "dtype");
    if (dtype == nullptr || !(*dtype == "float32" || *dtype == "int64" || *dtype == "float64"))
      throw damaged(which + " has no dtype of tessel's (float32, int64 or float64)");
    v.dtype = dtype->get<std::string>();
    std::optional<std::vector<std::size_t>> shape = sizes_of(field(e, "shape"));
    if (!shape) throw damaged(which + " has no shape (a list of sizes)");
    v.shape = std::move(*shape);

    if (v.dtype != "float32") {
      const json* value = field(e, "value");
      if (v.dtype == "int64") {
        if (value == nullptr || !value->is_number_integer() ||
            (value->is_number_unsigned() &&
             value->get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()}))
          throw damaged(which + ", an int64 scalar, has no int64 value");
        v.integer = value->get<std::int64_t>();
      } else {
        const std::optional<double> x = value == nullptr ? std::nullopt : real_from_json(*value);
        if (!x) throw damaged(which + ", a float64 scalar, has no number as its value");
        v.real = *x;
      }
      out.variables.push_back(std::move(v));
      continue;
    }

    const std::size_t rank = v.shape.size();
    // Its number of values (unless that overflows: then no files could hold them).
    std::uint64_t volume = 0;
    bool overflows = false;
    if (std::find(v.shape.begin(), v.shape.end(), std::size_t{0}) == v.shape.end()) {
      volume = 1;
      for (std::size_t n : v.shape) {
        if (volume > std::numeric_limits<std::uint64_t>::max() / n) {
          overflows = true;
          break;
        }
        volume *= n;
      }
    }
    const json* blocks = field(e, "blocks");
    if (blocks == nullptr || !blocks->is_array())
      throw damaged(which + ", a float32 tensor, has no list of blocks");
    std::uint64_t held = 0;  // the values of its blocks, which are disjoint
    for (std::size_t b = 0; b < blocks->size(); ++b) {
      const json& x = (*blocks)[b];
      const std::string block = which + "'s block " + std::to_string(b);
      if (!x.is_object()) throw damaged(block + " is not an object");
      saved_block s;
      const json* file = field(x, "file");
      const auto in = file == nullptr
                          ? sizes.end()
                          : std::find_if(sizes.begin(), sizes.end(),
                                         [&](const auto& f) { return *file == f.first; });
      if (in == sizes.end()) throw damaged(block + " is in no file the manifest lists");
      s.file = in->first;
      std::optional<std::vector<std::size_t>> offset = sizes_of(field(x, "offset"));
      std::optional<std::vector<std::size_t>> extent = sizes_of(field(x, "extent"));
      if (!offset || !extent || offset->size() != rank || extent->size() != rank)
        throw damaged(block + " has no offset and extent of the variable's rank (" +
                      std::to_string(rank) + ")");
      s.offset = std::move(*offset);
      s.extent = std::move(*extent);
      for (std::size_t d = 0; d < rank; ++d)
        if (s.offset[d] > v.shape[d] || s.extent[d] > v.shape[d] - s.offset[d])
          throw damaged(block + " (offset " + sizes_text(s.offset) + ", extent " +
                        sizes_text(s.extent) + ") lies outside the variable's shape " +
                        sizes_text(v.shape));
      const json* at = field(x, "at");
      if (at == nullptr || !at->is_number_unsigned())
        throw damaged(block + " has no place in its file (\"at\")");
      s.at = at->get<std::uint64_t>();
      // Its bytes, inside its file: the extents' product never exceeds the file's size.
      const std::uint64_t file_bytes = in->second;
      std::uint64_t values = 0;
      bool fits = true;
      if (std::find(s.extent.begin(), s.extent.end(), std::size_t{0}) == s.extent.end()) {
        values = 1;
        for (std::size_t n : s.extent) {
          if (values > file_bytes / sizeof(float) / n) {
            fits = false;
            break;
          }
          values *= n;
        }
      }
      if (!fits || s.at > file_bytes || values * sizeof(float) > file_bytes - s.at)
        throw damaged(block + " (extent " + sizes_text(s.extent) + ", at byte " +
                      std::to_string(s.at) + ") runs past the end of '" + s.file + "' (" +
                      std::to_string(file_bytes) + " bytes)");
      const json* chunks = field(x, "chunks");
      const std::uint64_t want = (values * sizeof(float) + chunk_bytes - 1) / chunk_bytes;
      if (chunks == nullptr || !chunks->is_array() || chunks->size() != want)
        throw damaged(block + " has no list of " + std::to_string(want) +
                      " checksums, one per MiB");
      for (const json& c : *chunks) {
        if (!c.is_number_unsigned() ||
            c.get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max())
          throw damaged(block + " has a checksum that is not a CRC-32");
        s.chunks.push_back(c.get<std::uint32_t>());
      }
      held += values;
      v.blocks.push_back(std::move(s));
    }
    // Disjoint (a sweep along the first dimension: a block meets only those that start before it
    // ends there), so that the values they hold add up to the tensor's when they cover it.
    std::vector<std::size_t> order(v.blocks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto first_row = [&](std::size_t i) {
      return rank == 0 ? std::size_t{0} : v.blocks[i].offset[0];
    };
    const auto past_row = [&](std::size_t i) {
      return rank == 0 ? std::size_t{1} : v.blocks[i].offset[0] + v.blocks[i].extent[0];
    };
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return first_row(a) < first_row(b); });
    for (std::size_t i = 0; i < order.size(); ++i)
      for (std::size_t j = i + 1; j < order.size() && first_row(order[j]) < past_row(order[i]);
           ++j) {
        const saved_block& a = v.blocks[order[i]];
        const saved_block& b = v.blocks[order[j]];
        bool meet = true;
        for (std::size_t d = 0; d < rank && meet; ++d)
          meet = std::max(a.offset[d], b.offset[d]) <
                 std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
        if (meet)
          throw damaged(which + "'s blocks " + std::to_string(std::min(order[i], order[j])) +
                        " and " + std::to_string(std::max(order[i], order[j])) + " overlap");
      }
    if (overflows || held != volume)
      throw damaged(which + "'s blocks hold " + std::to_string(held) + " values of its shape " +
                    sizes_text(v.shape) + "'s " +
                    (overflows ? std::string("more than 2^64") : std::to_string(volume)));
    out.variables.push_back(std::move(v));
  }
  // No two blocks share bytes of a file (each was written once): the values the manifest
  // declares are at most what its files hold.
  struct span_in_file {
    std::string_view file;
    std::uint64_t at, bytes;
    const std::string* path;
  };
  std::vector<span_in_file> spans;
  for (const manifest_variable& v : out.variables)
    for (const saved_block& b : v.blocks) {
      std::uint64_t values = 1;
      for (std::size_t n : b.extent) values *= n;  // checked above: inside the file
      if (values > 0) spans.push_back({b.file, b.at, values * sizeof(float), &v.path});
    }
  std::sort(spans.begin(), spans.end(), [](const span_in_file& a, const span_in_file& b) {
    return a.file != b.file ? a.file < b.file : a.at < b.at;
  });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].file == spans[i - 1].file && spans[i].at < spans[i - 1].at + spans[i - 1].bytes)
      throw damaged("blocks of '" + *spans[i - 1].path + "' and '" + *spans[i].path +
                    "' share bytes of '" + std::string(spans[i].file) + "' (at " +
                    std::to_string(spans[i].at) + ")");
  const json* metadata = field(m, "metadata");
  if (metadata != nullptr) out.metadata = *metadata;
  return out;
}

TESSEL_INLINE void write_snapshot(snapshot& s) {
  const auto start = std::chrono::steady_clock::now();
  const std::string bin = shard_name(s.device, "bin");
  saving::file_writer file(s.staging / bin, "checkpoint file");
  for (std::size_t k = 0; k < s.values.size(); ++k) {
    const std::span<const char> bytes = s.values[k];
    json chunks = json::array();
    for (std::size_t c = 0; c < bytes.size(); c += chunk_bytes) {
      const std::size_t n = std::min(chunk_bytes, bytes.size() - c);
      chunks.push_back(saving::detail::crc32_of(bytes.data() + c, n));
      file.write(bytes.data() + c, n);
    }
    s.blocks[k]["chunks"] = std::move(chunks);
  }
  const std::uint64_t size = file.size();
  file.finish();
  write_text(s.staging / shard_name(s.device, "json"),
             json{{"file", bin}, {"bytes", size}, {"blocks", s.blocks}}.dump());
  s.values.clear();
  s.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TESSEL_INLINE void commit_snapshot(snapshot& s) {
  if (!s.chief) return;
  json variables = std::move(s.variables);
  json files = json::object();
  for (std::size_t d = 0; d < s.devices; ++d) {
    const json shard = read_json(s.staging / shard_name(d, "json"), "shard list");
    files[shard.at("file").get<std::string>()] = shard.at("bytes");
    for (const auto& b : shard.at("blocks")) {
      std::size_t k = 0;
      while (k < variables.size() &&
             !(variables[k]["group"] == b["group"] && variables[k]["index"] == b["index"]))
        ++k;
      if (k == variables.size())
        throw runtime_error("The shard list '" + (s.staging / shard_name(d, "json")).string() +
                            "' names a variable process 0 does not have");
      variables[k]["blocks"].push_back({{"file", shard["file"]},
                                        {"offset", b["offset"]},
                                        {"extent", b["extent"]},
                                        {"at", b["at"]},
                                        {"chunks", b["chunks"]}});
    }
  }
  const json manifest{{"format", "tessel-checkpoint"}, {"version", 1},   {"mesh", s.mesh},
                      {"processes", s.devices},        {"files", files}, {"variables", variables},
                      {"metadata", s.metadata}};
  write_text(s.staging / "manifest.json", manifest.dump(1));
  saving::detail::sync_path(s.staging, true);
  std::error_code ec;
  // Checked again: something may have appeared there while the shards were written.
  if (fs::symlink_status(s.dir, ec).type() != fs::file_type::not_found &&
      !holds_only_checkpoint_files(s.dir))
    throw value_error(not_a_checkpoint(s.dir) + " The new checkpoint is complete in '" +
                      s.staging.string() + "'.");
  fs::remove_all(s.dir, ec);
  fs::rename(s.staging, s.dir);
  saving::detail::sync_path(s.dir.has_parent_path() ? s.dir.parent_path() : fs::path("."), true);
}

TESSEL_INLINE std::string not_a_checkpoint(const fs::path& dir) {
  return "save_checkpoint: '" + dir.string() + "' exists and is not a checkpoint tessel wrote " +
         "(a directory of shard files and their manifest.json, nothing else); tessel replaces " +
         "only its own checkpoints and leaves it as it is. Choose another path for the " +
         "checkpoint, or move '" + dir.string() + "' away first.";
}

TESSEL_INLINE fs::path checkpoint_path(const fs::path& dir) {
  fs::path p = dir.lexically_normal();
  if (!p.empty() && !p.has_filename()) p = p.parent_path();  // "run/ckpt/" -> "run/ckpt"
  const auto refuse = [&](const char* what) {
    throw value_error("save_checkpoint: the path '" + dir.string() + "' is " + what +
                      ", which a checkpoint would replace; give the checkpoint a directory of "
                      "its own, such as 'checkpoints/step-100'");
  };
  if (p.empty() || p == ".") refuse("the working directory");
  if (p.filename() == "..") refuse("a parent directory");
  if (p == p.root_path()) refuse("the root directory");
  std::error_code ec;
  if (fs::equivalent(p, fs::current_path(ec), ec)) refuse("the working directory");
  if (const char* home = std::getenv("HOME"); home && *home && fs::equivalent(p, home, ec))
    refuse("the home directory");
  return p;
}

TESSEL_INLINE bool holds_only_checkpoint_files(const fs::path& p) {
  std::error_code ec;
  if (fs::is_symlink(p, ec) || !fs::is_directory(p, ec)) return false;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (e.is_symlink(ec) || !e.is_regular_file(ec)) return false;
    const std::string name = e.path().filename().string();
    if (name == "manifest.json") {
      try {
        const json m = read_json(e.path(), "manifest");
        if (!m.is_object() || m.value("format", std::string()) != "tessel-checkpoint") return false;
      } catch (const std::exception&) {
        return false;
      }
      continue;
    }
    if (!(name.starts_with("shard-") && (name.ends_with(".bin") || name.ends_with(".json"))))
      return false;
  }
  return !ec;
}

TESSEL_INLINE void make_staging(const snapshot& s) {
  if (!s.chief) return;
  std::error_code ec;
  // Nothing is removed that tessel did not write: a checkpoint at the path is replaced when the
  // new one is complete; anything else there, or beside it in the staging name, is an error.
  if (fs::symlink_status(s.dir, ec).type() != fs::file_type::not_found &&
      !holds_only_checkpoint_files(s.dir))
    throw value_error(not_a_checkpoint(s.dir));
  if (fs::symlink_status(s.staging, ec).type() != fs::file_type::not_found) {
    if (!holds_only_checkpoint_files(s.staging))
      throw value_error("save_checkpoint: '" + s.staging.string() + "' exists and holds what a "
                        "checkpoint save did not write; a save to '" + s.dir.string() +
                        "' is staged there. Move it away, or choose another path for the "
                        "checkpoint.");
    fs::remove_all(s.staging, ec);
  }
  if (s.dir.has_parent_path()) fs::create_directories(s.dir.parent_path(), ec);
  if (!fs::create_directory(s.staging, ec) || ec)
    throw runtime_error("Cannot make the checkpoint directory '" + s.staging.string() +
                        "': " + (ec ? ec.message() : std::string("it exists")) +
                        "; check that its parent is writable");
}

TESSEL_INLINE json parse_metadata(const std::string& text) { return json::parse(text); }

TESSEL_INLINE std::string metadata_text(const json& metadata) { return metadata.dump(); }

}  // namespace tessel::checkpoint_detail

namespace tessel {

TESSEL_INLINE std::filesystem::path latest_checkpoint(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  fs::path best;
  fs::file_time_type best_time{};
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return best;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const auto ends = [&](std::string_view x) {
      return name.size() > x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
    };
    const bool complete = e.is_directory(ec)
                              ? !ends(".partial") && fs::exists(e.path() / "manifest.json", ec)
                              : ends(".weights.h5") || ends(".keras");
    if (!complete) continue;
    const fs::file_time_type t = fs::last_write_time(e.path(), ec);
    if (ec) continue;
    if (best.empty() || t > best_time || (t == best_time && e.path() > best))
      best = e.path(), best_time = t;
  }
  return best;
}

}  // namespace tessel
