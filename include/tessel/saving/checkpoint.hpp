// checkpoint: a model's whole training state (get_state_tree: weights, moving statistics, the
// optimizer's variables, the metric accumulators, the random-stream counter) saved as a
// directory that every process writes in parallel, and restored onto any mesh, as PyTorch's
// distributed checkpoint (DCP) and Orbax do.
//
//   <dir>/shard-<device>.bin    the float32 blocks this device owns, one after another
//   <dir>/shard-<device>.json   what each block is: its variable, offset, extent, place, checksums
//   <dir>/manifest.json         every variable's path, group, dtype, global shape, layout and
//                               blocks, the mesh, the scalars, the caller's metadata; written last
//
// A block is written once: by the device at coordinate 0 of every mesh axis the variable is not
// split over (a replicated variable by device 0 alone). The directory is built as
// `<dir>.partial`; when every process has synced its shard, process 0 writes the manifest, syncs
// it and the directory, and renames the directory into place: a checkpoint is complete exactly
// when `<dir>/manifest.json` exists. Loading takes the model's own layouts (any mesh, any process
// count): each process reads, of each saved block that overlaps its own, the span of the bytes it
// needs (rounded to the checksummed chunks of 1 MiB), checks those chunks' CRC-32, and copies its
// part; it checks that its block is covered whole. What is damaged or missing is an error on
// every process, naming the file and the variable, before the model changes.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "../core/tensor_layout.hpp"
#include "../data/file_access.hpp"
#include "../model/sequential.hpp"
#include "../state.hpp"
#include "atomic_file.hpp"
#include "file_checksum.hpp"
#include "file_writer.hpp"
#include "model_view.hpp"

namespace tessel {

namespace checkpoint_detail {

using json = nlohmann::json;
namespace fs = std::filesystem;

inline constexpr std::size_t chunk_bytes = std::size_t{1} << 20;
inline constexpr const char* group_names[] = {"trainable_variables", "non_trainable_variables",
                                              "optimizer_variables", "metrics_variables"};

template <class B>
std::array<const state_list<B>*, 4> groups_of(const state_tree<B>& t) {
  return {&t.trainable_variables, &t.non_trainable_variables, &t.optimizer_variables,
          &t.metrics_variables};
}
template <class B>
std::array<state_list<B>*, 4> groups_of(state_tree<B>& t) {
  return {&t.trainable_variables, &t.non_trainable_variables, &t.optimizer_variables,
          &t.metrics_variables};
}

TESSEL_INLINE std::string shard_name(std::size_t device, const char* ext);

TESSEL_INLINE void write_file(const fs::path& p, const void* data, std::size_t bytes);
TESSEL_INLINE void write_text(const fs::path& p, const std::string& text);

TESSEL_INLINE json read_json(const fs::path& p, const std::string& what);

// The row-major element offset of `at` in a box of `extent`.
TESSEL_INLINE std::size_t linear(std::span<const std::size_t> at,
                                 std::span<const std::size_t> extent);

// A saved block as the manifest lists it.
struct saved_block {
  std::string file;
  std::vector<std::size_t> offset, extent;
  std::uint64_t at = 0;  // its first byte in the file
  std::vector<std::uint32_t> chunks;
};

// Reads, from a saved block, the part of it inside `mine` (offset, extent) into `out` (mine's
// row-major values): the byte span it needs, in whole chunks whose checksums it checks. Returns
// how many values it copied.
TESSEL_INLINE std::size_t read_overlap(const fs::path& dir, const saved_block& s,
                                       std::span<const std::size_t> mo,
                                       std::span<const std::size_t> me, std::span<float> out,
                                       const std::string& path);

// A variable as the manifest lists it, checked by read_manifest.
struct manifest_variable {
  std::size_t group = 0;    // its index in group_names
  std::string path, dtype;  // "float32" (a tensor), "int64" or "float64" (a scalar)
  std::vector<std::size_t> shape;
  std::int64_t integer = 0;         // an int64 scalar's value
  double real = 0;                  // a float64 scalar's value
  std::vector<saved_block> blocks;  // a tensor's blocks: inside its shape, disjoint, covering it
};

// A checkpoint's manifest, checked: what load_checkpoint may trust without looking again.
struct manifest {
  std::vector<manifest_variable> variables;
  json metadata;  // the caller's (null when the manifest has none)
};

// A float64 scalar as the manifest holds it: JSON has no NaN or infinity, so save_checkpoint
// writes them as the strings "nan", "inf" and "-inf" (and nlohmann's dump writes them as null).
TESSEL_INLINE json real_to_json(double x);
TESSEL_INLINE std::optional<double> real_from_json(const json& v);

// A list of sizes (non-negative integers), or nothing when `v` is absent or is not one.
TESSEL_INLINE std::optional<std::vector<std::size_t>> sizes_of(const json* v);
TESSEL_INLINE const json* field(const json& object, const char* key);
TESSEL_INLINE std::string sizes_text(const std::vector<std::size_t>& s);

// Reads `dir`'s manifest.json and checks everything in it that a load trusts: its files are plain
// names in `dir`, there, of the sizes it lists; every variable has a known group and dtype, a
// shape, and a value (a scalar) or blocks (a tensor); every block lies inside its file and its
// variable's shape, has one checksum per chunk, the blocks of a variable are disjoint and cover
// it, and no two blocks share bytes of a file. Anything else is a runtime_error naming the manifest
// and what is wrong: a damaged manifest never reaches a read, an allocation or an index.
TESSEL_INLINE manifest read_manifest(const fs::path& dir);

}  // namespace checkpoint_detail

namespace checkpoint_detail {

// Host memory a background save copies the state into, kept from one save to the next: a fresh
// gigabyte costs its page faults (on a virtual machine, more than the copy itself) once, not at
// every save. Not zeroed: every byte a save uses, it writes first.
struct staging_buffer {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0;
  char* reserve(std::size_t n) {
    if (n > capacity) {
      data.reset();
      data.reset(new char[n]);
      capacity = n;
    }
    return data.get();
  }
};

// What one process saves, taken from the model on the training thread (the only part a step
// waits for): its owned blocks' values and what they are, and (process 0) the variables' list;
// then written to the staging directory on any thread, then committed. The values are either the
// model's own memory (a save in the foreground on the host: nothing is copied, the file is
// written from it) or a copy in `buffer` (a save in the background, or from a device).
struct snapshot {
  fs::path dir, staging;
  std::size_t device = 0, devices = 1;
  bool chief = false;
  staging_buffer buffer;                      // the copy, when the values are copied
  std::vector<std::span<const char>> values;  // each block's bytes, in the shard's order
  json blocks;                                // what each block in it is
  json variables;                             // process 0: every variable, without its blocks
  std::string mesh;
  json metadata;
  double copy_seconds = 0, write_seconds = 0;
};

// The directory a checkpoint path names, normalised ("run/ckpt/" and "run/./ckpt" are
// "run/ckpt"), so that the staging directory beside it is "run/ckpt.partial" and never inside
// it. The working directory, a parent directory (".."), the root and the home directory are
// refused: a checkpoint replaces its directory, and these hold what tessel did not write.
TESSEL_INLINE fs::path checkpoint_path(const fs::path& dir);
// Whether `p` holds nothing but what a checkpoint save writes: shard files and a manifest.json of
// the "tessel-checkpoint" format (a checkpoint, or one whose save did not finish or that was
// damaged). Only such a directory is ever replaced or removed by a save; anything else at a
// checkpoint's path, or in its staging name, is refused.
TESSEL_INLINE bool holds_only_checkpoint_files(const fs::path& p);
TESSEL_INLINE std::string not_a_checkpoint(const fs::path& dir);

// `copy`: whether the values are copied into `buffer` (the caller's, kept between saves) for
// the write to go on while the model trains; otherwise they are the model's own memory where it
// is the host's, valid until the model next changes.
template <class B>
snapshot take_snapshot(const saving::model_view<B>& model, const fs::path& dir,
                       const json& metadata, bool copy, staging_buffer buffer = {}) {
  const auto start = std::chrono::steady_clock::now();
  const mesh_value mesh = model.shape;
  snapshot s;
  s.dir = checkpoint_path(dir);
  s.staging = s.dir;
  s.staging += ".partial";
  s.device = model.device;
  s.devices = model.size;
  s.chief = model.device == 0;
  s.mesh = to_string(mesh);
  s.metadata = metadata;
  s.blocks = json::array();
  s.variables = json::array();
  s.buffer = std::move(buffer);
  const auto state = model.state_tree_view();
  const auto groups = groups_of(state);
  // A block is written by the device at coordinate 0 of every axis it is not split over.
  const auto owned = [&](const basic_dtensor<B>& t) {
    const std::uint32_t split = t.layout().sharded_axes();
    for (std::size_t a = 0; a < mesh.rank; ++a)
      if (!((split >> a) & 1u) && model.coordinates[a] != 0) return false;
    return true;
  };
  const bool borrow = host_memory<B> && !copy;
  char* into = nullptr;
  if (!borrow) {
    std::size_t total = 0;
    for (const auto* g : groups)
      for (const auto& v : *g)
        if (v.is_tensor() && owned(v.tensor())) total += v.tensor().size() * sizeof(float);
    into = s.buffer.reserve(total);
  }
  std::size_t at = 0;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t i = 0; i < groups[g]->size(); ++i) {
      const state_variable<B>& v = (*groups[g])[i];
      if (s.chief) {
        json e{{"group", group_names[g]},
               {"index", i},
               {"path", v.path},
               {"dtype", std::string(v.dtype())},
               {"shape", v.shape}};
        if (v.is_tensor()) {
          e["layout"] = to_string(v.tensor().layout(), mesh);
          e["blocks"] = json::array();
        } else if (v.dtype() == "int64") {
          e["value"] = v.integer();
        } else {
          e["value"] = real_to_json(v.real());
        }
        s.variables.push_back(std::move(e));
      }
      if (!v.is_tensor() || !owned(v.tensor())) continue;
      const basic_dtensor<B>& t = v.tensor();
      const std::size_t n = t.size() * sizeof(float);
      if (borrow) {
        s.values.emplace_back(reinterpret_cast<const char*>(t.local().data()), n);
      } else {
        B::download(t.local(), std::span<float>(reinterpret_cast<float*>(into + at), t.size()));
        s.values.emplace_back(into + at, n);
      }
      const std::size_t rank = t.global_shape().rank;
      const block& b = t.shard();
      s.blocks.push_back({{"group", group_names[g]},
                          {"index", i},
                          {"path", v.path},
                          {"offset", std::vector<std::size_t>(b.offset.extents.begin(),
                                                              b.offset.extents.begin() + rank)},
                          {"extent", std::vector<std::size_t>(b.extent.extents.begin(),
                                                              b.extent.extents.begin() + rank)},
                          {"at", at}});
      at += n;
    }
  s.copy_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

// This process's shard and its list into the staging directory (made by process 0 first):
// no collective, so it may run beside training. Each chunk's checksum is taken just before the
// chunk is written, while it is in the cache, and the file goes to the disk as it is written
// (file_writer.hpp).
TESSEL_INLINE void write_snapshot(snapshot& s);

// Process 0, once every shard is written: the manifest from every shard's list, synced, and
// the staging directory renamed into place.
TESSEL_INLINE void commit_snapshot(snapshot& s);

// Process 0 makes the staging directory, fresh, before anyone writes into it.
TESSEL_INLINE void make_staging(const snapshot& s);

// The caller's metadata from its text and back (model_base's save_checkpoint and
// load_checkpoint carry it as text).
TESSEL_INLINE json parse_metadata(const std::string& text);
TESSEL_INLINE std::string metadata_text(const json& metadata);

// save_checkpoint on a model's view (below, for any model).
template <class B>
void save(const saving::model_view<B>& model, const std::filesystem::path& dir,
          const nlohmann::json& metadata) {
  snapshot s = take_snapshot(model, dir, metadata, /*copy=*/false);
  tessel::detail::on_every_process(model, "save_checkpoint", [&] { make_staging(s); });
  tessel::detail::on_every_process(model, "save_checkpoint", [&] { write_snapshot(s); });
  tessel::detail::on_every_process(model, "save_checkpoint", [&] { commit_snapshot(s); });
}

// async_checkpointer on a model's view (below, for any model).
template <class B>
class async_saver {
 public:
  explicit async_saver(saving::model_view<B> model) : model_(std::move(model)) {}
  async_saver(const async_saver&) = delete;
  async_saver& operator=(const async_saver&) = delete;
  ~async_saver() {
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessel: a background checkpoint failed: %s\n", e.what());
    }
  }

  // Waits for the save in flight (wait()), takes the state and starts writing it.
  void save(const std::filesystem::path& dir, const nlohmann::json& metadata = {});
  // Finishes the save in flight, if any: the files, then the commit on every process.
  void wait();
  [[nodiscard]] bool pending() const noexcept { return pending_ != nullptr; }
  // The last save's times: what the caller waited for (the copy), the background write, and
  // from the start of save() to the end of its commit.
  [[nodiscard]] double blocking_seconds() const noexcept { return last_blocking_; }
  [[nodiscard]] double write_seconds() const noexcept { return last_write_; }
  [[nodiscard]] double total_seconds() const noexcept { return last_total_; }

 private:
  saving::model_view<B> model_;
  std::unique_ptr<checkpoint_detail::snapshot> pending_;
  checkpoint_detail::staging_buffer buffer_;  // the host copy's memory, kept for the next save
  std::thread writer_;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point started_{};
  double last_blocking_ = 0, last_write_ = 0, last_total_ = 0;
};

template <class B>
void async_saver<B>::save(const std::filesystem::path& dir, const nlohmann::json& metadata) {
  namespace cd = checkpoint_detail;
  wait();
  const auto start = std::chrono::steady_clock::now();
  auto s = std::make_unique<cd::snapshot>(
      cd::take_snapshot(model_, dir, metadata, /*copy=*/true, std::move(buffer_)));
  tessel::detail::on_every_process(model_, "save_checkpoint", [&] { cd::make_staging(*s); });
  pending_ = std::move(s);
  error_ = nullptr;
  writer_ = std::thread([this] {
    try {
      checkpoint_detail::write_snapshot(*pending_);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  last_blocking_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  started_ = start;
}

template <class B>
void async_saver<B>::wait() {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  const std::unique_ptr<checkpoint_detail::snapshot> s = std::move(pending_);
  tessel::detail::on_every_process(model_, "save_checkpoint", [&] {
    if (error_) std::rethrow_exception(error_);
  });
  tessel::detail::on_every_process(model_, "save_checkpoint",
                                   [&] { checkpoint_detail::commit_snapshot(*s); });
  last_total_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  last_write_ = s->write_seconds;
  buffer_ = std::move(s->buffer);
}

// load_checkpoint on a model's view (below, for any model).
template <class B>
nlohmann::json load(const saving::model_view<B>& model, const std::filesystem::path& dir) {
  namespace cd = checkpoint_detail;
  // The model's own memory, which nothing changes until every process has read and checked all
  // it needs into `staged` (its blocks, one after another).
  state_tree<B> state = model.state_tree_view();
  std::size_t total = 0;
  for (const auto* g : cd::groups_of(state))
    for (const auto& v : *g)
      if (v.is_tensor()) total += v.tensor().size();
  cd::staging_buffer staged;
  auto* const into = reinterpret_cast<float*>(staged.reserve(total * sizeof(float)));
  std::size_t used = 0;
  std::vector<std::pair<const basic_dtensor<B>*, std::span<const float>>> reads;
  nlohmann::json metadata;
  tessel::detail::on_every_process(model, "load_checkpoint", [&] {
    const cd::manifest m = cd::read_manifest(dir);
    const auto groups = cd::groups_of(state);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      std::vector<const cd::manifest_variable*> saved;
      for (const auto& v : m.variables)
        if (v.group == g) saved.push_back(&v);
      if (groups[g]->empty()) continue;
      if (saved.size() != groups[g]->size()) {
        // Name the first variable one side has and the other lacks.
        std::string missing, extra;
        for (const auto& v : *groups[g])
          if (missing.empty() &&
              std::none_of(saved.begin(), saved.end(),
                           [&](const cd::manifest_variable* e) { return e->path == v.path; }))
            missing = v.path;
        for (const cd::manifest_variable* e : saved)
          if (extra.empty() && std::none_of(groups[g]->begin(), groups[g]->end(),
                                            [&](const auto& v) { return e->path == v.path; }))
            extra = e->path;
        throw value_error(
            "The checkpoint '" + dir.string() + "' has " + std::to_string(saved.size()) + " " +
            cd::group_names[g] + ", the model " + std::to_string(groups[g]->size()) +
            (missing.empty() ? "" : "; it lacks the model's '" + missing + "'") +
            (extra.empty() ? "" : "; it holds '" + extra + "', which the model lacks") +
            ": it was saved from another model (or another optimizer)");
      }
      for (std::size_t i = 0; i < saved.size(); ++i) {
        state_variable<B>& v = (*groups[g])[i];
        const cd::manifest_variable& e = *saved[i];
        if (e.path != v.path || e.dtype != v.dtype() || e.shape != v.shape)
          throw value_error("The checkpoint '" + dir.string() + "' holds '" + e.path + "' " +
                            e.dtype + " " + detail::shape_text(e.shape) + " where the model has '" +
                            v.path + "' " + std::string(v.dtype()) + " " +
                            detail::shape_text(v.shape) + " (" + cd::group_names[g] + " " +
                            std::to_string(i) + "): it was saved from another model");
        if (!v.is_tensor()) {
          if (v.dtype() == "int64")
            v.value = e.integer;
          else
            v.value = e.real;
          continue;
        }
        const basic_dtensor<B>& t = v.tensor();
        const std::size_t rank = t.global_shape().rank;
        std::vector<std::size_t> mo(t.shard().offset.extents.begin(),
                                    t.shard().offset.extents.begin() + rank);
        std::vector<std::size_t> me(t.shard().extent.extents.begin(),
                                    t.shard().extent.extents.begin() + rank);
        const std::span<float> host(into + used, t.size());
        used += t.size();
        std::size_t copied = 0;
        for (const cd::saved_block& s : e.blocks)
          copied += cd::read_overlap(dir, s, mo, me, host, v.path);
        if (copied != host.size())
          throw runtime_error("The checkpoint '" + dir.string() + "' does not hold all of '" +
                              v.path + "' (" + std::to_string(copied) + " of this device's " +
                              std::to_string(host.size()) +
                              " values): its manifest is damaged; restore from another checkpoint");
        reads.emplace_back(&t, host);
      }
    }
    metadata = m.metadata;
  });
  for (const auto& [t, values] : reads) B::upload(values, t->local());
  model.set_state_tree(state);  // the scalars (its tensors are the model's own: not copied)
  return metadata;
}

}  // namespace checkpoint_detail

// Saves `model`'s training state to the directory `dir` (replaced if it exists), every process
// writing the blocks it owns; `metadata` (any JSON value) is kept in the manifest for the caller
// (backup_and_restore keeps the epoch and step there). Collective over the model's processes.
template <class Model>
void save_checkpoint(Model& model, const std::filesystem::path& dir,
                     const nlohmann::json& metadata = {}) {
  checkpoint_detail::save(saving::view_of(model), dir, metadata);
}

// Saves in the background, as Orbax's and DCP's asynchronous saves do: save() waits for the
// previous save to finish (and commits it), copies the state to the host (what the training
// step waits for), and leaves the files to a thread beside training; wait() (the next save, the
// end of fit, the destructor) finishes and commits. Every call is collective over the model's
// processes; a checkpoint is complete only once committed (its manifest written).
template <class Model>
class async_checkpointer : public checkpoint_detail::async_saver<typename Model::backend> {
 public:
  explicit async_checkpointer(Model& model)
      : checkpoint_detail::async_saver<typename Model::backend>(saving::view_of(model)) {}
};

// Restores `model`'s training state from the checkpoint directory `dir`, saved on any mesh:
// each process reads its own blocks under the model's layouts. Returns the caller's metadata.
// Nothing changes unless every process read all it needs. Collective over the model's processes.
template <class Model>
nlohmann::json load_checkpoint(Model& model, const std::filesystem::path& dir) {
  return checkpoint_detail::load(saving::view_of(model), dir);
}

// The checkpoint code over one backend, compiled once for the host's (core/compilation.hpp).
#define TESSEL_CHECKPOINT_TEMPLATES(prefix, B)                                             \
  prefix template void checkpoint_detail::save<B>(                                         \
      const saving::model_view<B>&, const std::filesystem::path&, const nlohmann::json&);  \
  prefix template nlohmann::json checkpoint_detail::load<B>(const saving::model_view<B>&,  \
                                                            const std::filesystem::path&); \
  prefix template class checkpoint_detail::async_saver<B>;
#if TESSEL_EXTERN_TEMPLATES
TESSEL_CHECKPOINT_TEMPLATES(extern, backend::host)
#endif

// The newest checkpoint in `dir` (seeds/001's "restore the latest" step), or an empty path if
// there is none: of the complete ones there (a directory with its manifest.json, as
// save_checkpoint and backup_and_restore write; a .weights.h5 or .keras file, as
// model_checkpoint writes), the one modified last, ties going to the larger name. Temporary names
// of a save that did not finish (`<name>.partial`, `<name>.tmp.<pid>`) do not count.
TESSEL_INLINE std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

}  // namespace tessel

// Definitions (compiled once in tessel::compiled; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
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
#endif  // TESSEL_DEFINITIONS
