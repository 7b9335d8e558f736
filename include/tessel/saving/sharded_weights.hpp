// sharded_weights: Keras's sharded weights (save_weights(..., max_shard_size=GB);
// keras/src/saving/saving_lib.py, ShardedH5IOStore): `<name>.weights.json` beside the shards
// `<name>_00000.weights.h5`, `<name>_00001.weights.h5`, ... Each shard is a weights file in
// Keras's layout holding some of the variables; Keras fills one until the next variable would
// take it past max_shard_size bytes (a variable larger than that is an error), and a layer's
// variables may span two shards. The JSON, written with indent 4 as Keras writes it, holds
//
//   {"metadata": {"total_size": <bytes of every variable, a float>},
//    "weight_map": {"/layers/dense/vars": "m_00000.weights.h5"  (one variable written)
//                   "/layers/dense_1/vars": ["m_00000.weights.h5", "m_00001.weights.h5"], ...}}
//
// Every shard is written atomically first, the JSON last (it is what a reader starts from). A
// shard tessel wrote carries its checksums (weights_file.hpp). Reading checks the JSON and every
// shard it names, then merges the shards' variables into one temporary weights file and reads it
// as read_weights_file does, so that the checks and errors are the same.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "../core/compilation.hpp"
#include "../core/errors.hpp"
#include "atomic_file.hpp"
#include "file_checksum.hpp"
#include "h5.hpp"
#include "keras_archive.hpp"
#include "weights_file.hpp"

namespace tessel::saving {

// save_weights' keyword arguments, by Keras's names.
struct save_weights_options {
  // The largest shard, in GB (2^30 bytes, as Keras counts them); none: one .weights.h5 file.
  std::optional<double> max_shard_size = std::nullopt;
};

namespace detail {
// What goes where: each variable (or counter) of `content` and the shard it is written to.
struct shard_item {
  std::string group;  // "layers/dense/vars", "optimizer/vars", "vars"
  std::string name;   // the group's name attribute, set where Keras makes the group
  bool makes_group = false;
  std::size_t index = 0;
  const saved_variable* variable = nullptr;  // else a counter
  std::int32_t iterations = 0;
  double real = 0;  // a float scalar's value: the learning rate (index 1), the optimizer's own
  bool is_iterations = false;
};

TESSEL_INLINE std::string shard_name(const std::string& base, std::size_t i);

// Writes one shard's file at `path` (not renamed: the set is committed together); returns its
// content's size and CRC-32, as its trailer records them.
TESSEL_INLINE file_sum write_shard(const std::filesystem::path& path,
                                   const std::vector<shard_item>& items);
}  // namespace detail

// Writes `content` as Keras's sharded weights at `path` (a `.weights.json` name), shards of at
// most `max_shard_size` GB. The set is written as one: every shard first, under temporary names
// beside the old set (which stays whole if anything fails: the temporary files are removed), then
// the shards renamed into place and the index last. The index records each shard's size and
// CRC-32 (`tessel_shards`; Keras reads `weight_map` alone), so that a load refuses a shard of
// another save: a set left mixed by a save that stopped between its renames is an error, never
// a silent mix.
TESSEL_INLINE void write_sharded_weights(const std::filesystem::path& path,
                                         const weights_content& content, double max_shard_size);

// Reads Keras's sharded weights at `path` (the .weights.json) into `expected`
// (read_weights_file's contract).
TESSEL_INLINE optimizer_found read_sharded_weights(const std::filesystem::path& path,
                                                   weights_content& expected,
                                                   std::string_view where = "load_weights");

}  // namespace tessel::saving

// Definitions (compiled once in tessel::tessel; see core/compilation.hpp).
#if TESSEL_DEFINITIONS
#include "impl/sharded_weights.ipp"  // IWYU pragma: keep
#endif  // TESSEL_DEFINITIONS
