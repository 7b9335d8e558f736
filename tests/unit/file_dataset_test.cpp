// dataset::from_files and dataset::shard_files (what auto_shard_policy file does to a dataset):
// files read in order, one at a time and only when reached; each shard opens only its own files
// and takes its part of the global batch; the shards together are the dataset once; and the
// errors name the file, the count or the policy to use instead.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <tessel/data/dataset.hpp>
#include <tessel/data/idx.hpp>
#include <utility>
#include <vector>

using Catch::Matchers::Contains;
using tessel::array;
using ds_t = tessel::dataset<float, std::int32_t>;

namespace {

using tessel::testing::message_of;
using tessel::testing::temp_dir;

// Files of samples numbered from 0: file k holds sizes[k] samples, each an IDX row of 4 bytes,
// the label (its number) then 3 features.
std::vector<std::filesystem::path> write_files(const temp_dir& dir,
                                               const std::vector<std::size_t>& sizes) {
  std::vector<std::filesystem::path> paths;
  std::uint8_t next = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    array<std::uint8_t> a({sizes[k], 4});
    for (std::size_t r = 0; r < sizes[k]; ++r, ++next)
      for (std::size_t j = 0; j < 4; ++j)
        a.values[r * 4 + j] = static_cast<std::uint8_t>(next + j * 7 * (j != 0));
    paths.push_back(dir.path / ("part-" + std::to_string(k) + ".idx"));
    tessel::data::write_idx(paths.back(), a);
  }
  return paths;
}

// A reader that records which files it opened.
struct recording_reader {
  std::shared_ptr<std::vector<std::string>> opened = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::pair<array<float>, array<std::int32_t>> operator()(const std::filesystem::path& p) const {
    {
      const std::lock_guard lock(*mutex);
      opened->push_back(p.filename().string());
    }
    const array<std::uint8_t> a = tessel::data::read_idx(p);
    const std::size_t n = a.shape[0];
    array<float> x({n, 3});
    array<std::int32_t> y({n});
    for (std::size_t r = 0; r < n; ++r) {
      y.values[r] = a.values[r * 4];
      for (std::size_t j = 0; j < 3; ++j) x.values[r * 3 + j] = a.values[r * 4 + 1 + j];
    }
    return {std::move(x), std::move(y)};
  }
};

std::vector<std::int32_t> labels_of(const ds_t& ds,
                                    std::vector<std::size_t>* batch_sizes = nullptr) {
  std::vector<std::int32_t> out;
  for (const auto& [x, y] : ds) {
    if (batch_sizes) batch_sizes->push_back(y.shape.empty() ? 1 : y.shape[0]);
    out.insert(out.end(), y.values.begin(), y.values.end());
  }
  return out;
}

std::vector<std::int32_t> iota_vector(std::int32_t n) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("data: from_files reads each file's samples in order, batches across files",
          "[data][dataset][files]") {
  const temp_dir dir;
  const auto paths = write_files(dir, {3, 5, 4});
  const recording_reader reader;
  const ds_t ds = ds_t::from_files(paths, reader);
  CHECK(ds.file_count() == 3);
  CHECK_FALSE(ds.cardinality().has_value());  // unknown until the files are read
  CHECK(reader.opened->empty());              // nothing is read before a pass

  std::size_t samples = 0;
  for (const auto& [x, y] : ds) {
    CHECK(x.shape == std::vector<std::size_t>{3});
    CHECK(y.shape.empty());
    CHECK(x.values[0] == static_cast<float>(y.values[0] + 7));
    ++samples;
  }
  CHECK(samples == 12);
  CHECK(*reader.opened == std::vector<std::string>{"part-0.idx", "part-1.idx", "part-2.idx"});

  std::vector<std::size_t> sizes;
  CHECK(labels_of(ds.batch(5), &sizes) == iota_vector(12));
  CHECK(sizes == std::vector<std::size_t>{5, 5, 2});
  CHECK(labels_of(ds.shuffle(12, 3).batch(4).prefetch(2).repeat(2)).size() == 24);

  // A pass left after one element has opened only the first file.
  reader.opened->clear();
  CHECK(labels_of(ds.take(2)) == iota_vector(2));
  CHECK(*reader.opened == std::vector<std::string>{"part-0.idx"});
}

TEST_CASE("data: shard_files opens only the shard's files and takes its part of the batch",
          "[data][dataset][files]") {
  const temp_dir dir;
  // 6 files of 5 samples: shard 0 of 2 reads files 0, 2, 4 (samples 0-4, 10-14, 20-24).
  const auto paths = write_files(dir, {5, 5, 5, 5, 5, 5});
  const recording_reader reader;
  const ds_t global = ds_t::from_files(paths, reader).batch(8);

  std::vector<std::int32_t> all;
  for (std::size_t i = 0; i < 2; ++i) {
    reader.opened->clear();
    const ds_t mine = global.shard_files(2, i);
    CHECK(mine.file_count() == 3);
    std::vector<std::size_t> sizes;
    const auto labels = labels_of(mine, &sizes);
    CHECK(sizes == std::vector<std::size_t>{4, 4, 4, 3});  // the global batch 8 over 2: 4
    std::set<std::string> opened(reader.opened->begin(), reader.opened->end());
    CHECK(opened.size() == 3);
    for (std::size_t k = 0; k < 6; ++k)
      CHECK(opened.count("part-" + std::to_string(k) + ".idx") == (k % 2 == i ? 1u : 0u));
    for (const std::int32_t l : labels) CHECK((l / 5) % 2 == static_cast<std::int32_t>(i));
    all.insert(all.end(), labels.begin(), labels.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(all == iota_vector(30));  // together, every sample once

  // A global batch of 10 over 4 shards: 3, 3, 2, 2, as the replicas split a batch of arrays.
  const ds_t ten = ds_t::from_files(paths, reader).batch(10);
  for (std::size_t i = 0; i < 4; ++i) {
    std::vector<std::size_t> sizes;
    (void)labels_of(ten.shard_files(4, i), &sizes);
    CHECK(sizes.front() == (i < 2 ? 3u : 2u));
  }
  // Only the last batch is the global one: an inner batch keeps its size.
  std::vector<std::size_t> outer;
  std::size_t inner = 0;
  for (const auto& [x, y] :
       ds_t::from_files(paths, reader).batch(2, true).batch(4).shard_files(2, 1)) {
    outer.push_back(y.shape[0]);
    inner = y.shape[1];
  }
  CHECK(outer == std::vector<std::size_t>{2, 2, 2, 1});
  CHECK(inner == 2);

  // The stages after the source are rebuilt as they were: a seeded shuffle gives each shard a
  // permutation of its own samples, the same on every pass with reshuffling off.
  const ds_t shuffled = ds_t::from_files(paths, reader).shuffle(15, 9, false).batch(6);
  const ds_t s0 = shuffled.shard_files(2, 0);
  const auto first = labels_of(s0);
  CHECK(first == labels_of(s0));
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::int32_t>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24});
  CHECK(first != sorted);
}

TEST_CASE("data: from_files and shard_files name what is wrong", "[data][dataset][files][error]") {
  const temp_dir dir;
  const auto paths = write_files(dir, {2, 2, 2});
  const recording_reader reader;

  CHECK_THAT(message_of([&] { (void)ds_t::from_files({}, reader); }),
             Contains("from_files: no files given"));
  CHECK_THAT(message_of([&] { (void)ds_t::from_files(paths, {}); }),
             Contains("from_files: no reader given"));
  const auto missing = dir.path / "part-9.idx";
  CHECK_THAT(message_of([&] {
               (void)ds_t::from_files({paths[0], missing}, reader);
             }),
             Contains("from_files: '" + missing.string() + "' does not exist"));
  CHECK_THAT(message_of([&] { (void)ds_t::from_files({dir.path}, reader); }),
             Contains("is not a regular file"));

  // A file that cannot be read: the reader's error, with the file named.
  std::filesystem::resize_file(paths[1], 5);
  const ds_t ds = ds_t::from_files(paths, reader);
  const std::string e = message_of([&] { (void)labels_of(ds); });
  CHECK_THAT(e, Contains("from_files: reading '" + paths[1].string() + "' failed: "));
  // A reader whose x and y disagree.
  const ds_t bad = ds_t::from_files(paths, [](const std::filesystem::path&) {
    return std::pair{array<float>({2, 3}), array<std::int32_t>({3})};
  });
  CHECK_THAT(message_of([&] { (void)labels_of(bad); }),
             Contains("the reader gave x of shape (2, 3) and y of shape (3,) for '" +
                      paths[0].string() + "'"));

  CHECK_THAT(message_of([&] { (void)ds.batch(4).shard_files(4, 0); }),
             Contains("the dataset reads 3 files, fewer than the 4 replicas"));
  CHECK(message_of([&] { (void)ds.batch(2).shard_files(3, 0); }) == "no exception");
  CHECK_THAT(message_of([&] { (void)ds.batch(2).shard_files(3, 2); }),
             Contains("the global batch size 2 is smaller than the 3 replicas"));
  CHECK_THAT(message_of([&] { (void)ds.shard_files(3, 3); }),
             Contains("shard_files: index 3 is not one of the 3 shards"));

  array<float> x({4, 3});
  array<std::int32_t> y({4});
  const auto arrays = tessel::from_tensor_slices(std::move(x), std::move(y)).batch(2);
  CHECK(arrays.file_count() == 0);
  CHECK_THAT(message_of([&] { (void)arrays.shard_files(2, 0); }),
             Contains("this dataset reads none (its source is arrays: from_tensor_slices)"));
}
