// The CUDA backend's multi-tensor optimizer launches (backend/tensor_batches.hpp), checked on the
// CPU: each non-empty tensor is updated exactly once, empty ones never, at most 32 per launch, in
// order. The batching before this header advanced by 32 while skipping empty tensors past the
// batch's end, so that a model of 40 variables with empty ones among the first 32 updated
// tensors 32-35 twice.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <tessel/backend/tensor_batches.hpp>
#include <vector>

namespace {

constexpr std::size_t per_launch = 32;

// How many times each tensor was given to a launch, and the launches' sizes.
struct batching {
  std::vector<int> times;
  std::vector<std::size_t> launches;
};
batching batch(const std::vector<std::size_t>& sizes) {
  batching r{std::vector<int>(sizes.size(), 0), {}};
  std::size_t last = 0;
  bool first = true;
  tessel::backend::for_each_tensor_batch<per_launch>(
      sizes.size(), [&](std::size_t i) { return sizes[i]; },
      [&](const std::array<std::size_t, per_launch>& indices, std::size_t n) {
        r.launches.push_back(n);
        for (std::size_t k = 0; k < n; ++k) {
          REQUIRE(indices[k] < sizes.size());
          CHECK((first || indices[k] > last));  // in order, none twice
          last = indices[k];
          first = false;
          ++r.times[indices[k]];
        }
      });
  return r;
}
void check_once(const std::vector<std::size_t>& sizes) {
  const batching r = batch(sizes);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("tensor " << i << " of " << sizes.size() << " (" << sizes[i] << " elements)");
    CHECK(r.times[i] == (sizes[i] == 0 ? 0 : 1));
  }
  std::size_t non_empty = 0;
  for (std::size_t s : sizes) non_empty += s != 0;
  for (std::size_t n : r.launches) CHECK((n >= 1 && n <= per_launch));
  // As few launches as the count allows.
  CHECK(r.launches.size() == (non_empty + per_launch - 1) / per_launch);
}

}  // namespace

TEST_CASE("tensor batches: 40 tensors with empty ones among the first 32, each updated once",
          "[cuda][optimizers]") {
  std::vector<std::size_t> sizes(40, 100);
  for (std::size_t i : {3, 10, 31, 33}) sizes[i] = 0;
  check_once(sizes);
}

TEST_CASE("tensor batches: every third empty, none empty, all empty, none at all",
          "[cuda][optimizers]") {
  std::vector<std::size_t> thirds(100, 7);
  for (std::size_t i = 0; i < thirds.size(); i += 3) thirds[i] = 0;
  check_once(thirds);
  check_once(std::vector<std::size_t>(64, 1));
  check_once(std::vector<std::size_t>(65, 1));
  check_once(std::vector<std::size_t>(50, 0));
  check_once({});
}
