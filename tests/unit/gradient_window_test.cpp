// gradient_window (core/memory_plan.hpp): where reduce-scattered gradient buckets take turns in
// one buffer, the layout both the memory plan and gradient_buckets use. Over many random models
// (layers of one to four gradients of random sizes, random bucket caps and process counts), every
// bucket lies inside the window, never over a bucket that holds gradients of its own first layer
// or of the layer before (backward still fills those, or reduces them while it computes this
// layer), the buckets follow the cap rule, and the window is used only where it and the parts of
// the sums take less than all the buckets. With `always` (the split weights' window, which a
// layer's forward and backward gather into) it is used in every model, the buckets placed alike;
// kept apart from their own layer's buckets only (one layer at a time), the same properties hold;
// so they do with buckets of one layer at most; weights_window (whose buckets are so) takes the
// two layers' window where it saves, else the smaller of the two.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include <tessel/core.hpp>

namespace {
using tessel::bucketed_gradient;
using tessel::gradient_window;
using tessel::gradient_window_layout;

struct bucket_oracle {
  std::vector<std::size_t> size, first_layer, last_layer;
};

// The buckets by the cap rule (and with `per_layer`, one layer's at most), and each one's first
// and last layer, written out plainly.
bucket_oracle buckets_of(const std::vector<bucketed_gradient>& g, std::size_t cap,
                         bool per_layer) {
  bucket_oracle o;
  std::size_t layer = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool new_layer = i > 0 && g[i].op != g[i - 1].op;
    if (new_layer) ++layer;
    if (o.size.empty() || o.size.back() + g[i].size > cap || (per_layer && new_layer)) {
      o.size.push_back(0);
      o.first_layer.push_back(layer);
      o.last_layer.push_back(layer);
    }
    o.size.back() += g[i].size;
    o.last_layer.back() = layer;
  }
  return o;
}

void check_layout(const std::vector<bucketed_gradient>& g, std::size_t cap, std::size_t parts,
                  bool always = false, bool adjacent = true, bool per_layer = false) {
  const gradient_window_layout w =
      gradient_window(g.data(), g.size(), cap, parts, always, adjacent, per_layer);
  const bucket_oracle o = buckets_of(g, cap, per_layer);
  std::size_t total = 0;
  for (const auto& x : g) total += x.size;
  REQUIRE(w.buckets == o.size.size());
  for (std::size_t b = 0; b < o.size.size(); ++b) REQUIRE(w.size[b] == o.size[b]);
  if (always && adjacent) {
    // The same places as the gradients' layout, where that one is used.
    REQUIRE(w.window > 0);
    const gradient_window_layout saving =
        gradient_window(g.data(), g.size(), cap, parts, false, true, per_layer);
    for (std::size_t b = 0; b < w.buckets && saving.window > 0; ++b)
      REQUIRE(w.at[b] == saving.at[b]);
  }
  if (w.window == 0) return;
  if (!always) REQUIRE(total / parts + w.window < total);
  for (std::size_t b = 0; b < w.buckets; ++b) {
    REQUIRE(w.at[b] + w.size[b] <= w.window);
    for (std::size_t j = 0; j < b; ++j) {
      const bool held = o.last_layer[j] + (adjacent ? 1 : 0) >= o.first_layer[b];
      const bool overlap = w.at[j] < w.at[b] + w.size[b] && w.at[b] < w.at[j] + w.size[j];
      INFO("bucket " << j << " and bucket " << b);
      REQUIRE(!(held && overlap));
    }
  }
}
}  // namespace

TEST_CASE("gradient_window keeps the buckets backward fills and reduces apart", "[memory]") {
  std::mt19937_64 rng(39);
  std::size_t used = 0;
  for (int model = 0; model < 2000; ++model) {
    std::vector<bucketed_gradient> g;
    const std::size_t layers = 1 + rng() % 12;
    for (std::size_t l = 0; l < layers && g.size() + 4 <= tessel::max_variables; ++l) {
      const std::size_t n = 1 + rng() % 4;
      for (std::size_t v = 0; v < n; ++v)
        g.push_back({layers - l, 2 * (1 + rng() % (rng() % 2 ? 1000 : 20))});
    }
    const std::size_t cap = 1 + rng() % 3000, parts = 2 + rng() % 7;
    check_layout(g, cap, parts);
    check_layout(g, cap, parts, true);
    check_layout(g, cap, parts, true, false);
    check_layout(g, cap, parts, false, true, true);
    check_layout(g, cap, parts, true, true, true);
    check_layout(g, cap, parts, true, false, true);
    // The split weights' window, its buckets one layer's at most: the two layers' where it
    // saves, else the smaller.
    const auto two = gradient_window(g.data(), g.size(), cap, parts, true, true, true);
    const auto one = gradient_window(g.data(), g.size(), cap, parts, true, false, true);
    const auto chosen = tessel::weights_window(g.data(), g.size(), cap, parts);
    std::size_t total = 0;
    for (const auto& x : g) total += x.size;
    REQUIRE(chosen.window == (total / parts + two.window < total
                                  ? two.window
                                  : std::min(one.window, two.window)));
    used += gradient_window(g.data(), g.size(), cap, parts).window > 0;
  }
  // (Most random models gain from the window: the property is checked where it is used.)
  CHECK(used > 500);
}

TEST_CASE("gradient_window of six equal layers in buckets of one gradient", "[memory]") {
  // Backward order: the head (op 6), then each layer's kernel and bias (ops 5 .. 0).
  std::vector<bucketed_gradient> g{{6, 40}, {6, 2}};
  for (std::size_t op = 6; op-- > 0;) g.push_back({op, 1000}), g.push_back({op, 10});
  const gradient_window_layout w = gradient_window(g.data(), g.size(), 1, 2);
  // Two layers' kernels and biases, and the head's kernel where its place leaves a gap.
  CHECK(w.window >= 2 * 1010);
  CHECK(w.window <= 2 * 1010 + 40);
  check_layout(g, 1, 2);
  // On one process nothing is reduce-scattered; with one bucket there is nothing to gain.
  CHECK(gradient_window(g.data(), g.size(), 1, 1).window == 0);
  CHECK(gradient_window(g.data(), g.size(), 1'000'000, 2).window == 0);
}
