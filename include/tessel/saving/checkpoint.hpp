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
  model.check_replicas("load_checkpoint");
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
#if TESSEL_EXTERN_CUDA_TEMPLATES
TESSEL_CHECKPOINT_TEMPLATES(extern, backend::cuda)
#endif

// The newest checkpoint in `dir` (seeds/001's "restore the latest" step), or an empty path if
// there is none: of the complete ones there (a directory with its manifest.json, as
// save_checkpoint and backup_and_restore write; a .weights.h5 or .keras file, as
// model_checkpoint writes), the one modified last, ties going to the larger name. Temporary names
// of a save that did not finish (`<name>.partial`, `<name>.tmp.<pid>`) do not count.
TESSEL_INLINE std::filesystem::path latest_checkpoint(const std::filesystem::path& dir);

}  // namespace tessel

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/checkpoint.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
