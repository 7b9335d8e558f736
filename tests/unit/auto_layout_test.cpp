// auto_layout's search against an oracle that plans every combination of choices (replicated,
// columns or rows over each model axis, per layer with a kernel): on chains, a residual graph, a
// 3-D mesh, a convolution and under memory budgets, the search's bytes per step are the
// smallest of all; under a budget its plan fits, past the budget it splits the state over the
// batch axis, and when nothing fits it names the smallest peak of all. And the chosen layout map
// as Keras code.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

namespace {
using namespace tessel;

struct best_of_all {
  bool found = false;
  std::size_t cost = 0, memory = 0, plans = 0;  // cost: bytes, and flops by bytes_per_flop
  std::size_t least_memory = 0;                 // of every combination, within the budget or not
};

// Every combination of the layers' choices, planned.
best_of_all every_combination(const distribution_value& base, const mesh_value& mesh,
                              const model_desc& model, const auto_layout_options& o) {
  layout_search s = start_layout_search(base, mesh, model, o);
  REQUIRE(s.ok);
  std::vector<layer_choice> options{{}};
  for (std::size_t a = 0; a < mesh.rank; ++a)
    if (a != base.batch_axis && mesh.sizes[a] > 1) {
      options.push_back({layer_choice::columns, static_cast<std::uint8_t>(a)});
      options.push_back({layer_choice::rows, static_cast<std::uint8_t>(a)});
    }
  std::array<std::size_t, max_ops> digit{};
  best_of_all best;
  for (;;) {
    std::array<layer_choice, max_ops> c{};
    for (std::size_t i = 0; i < model.count; ++i)
      c[i] = s.weight_rank[i] ? options[digit[i]] : layer_choice{};
    bool room = true;
    const distribution_value d = detail::rules_of(s, c, model.count, room);
    const model_plan p = plan_model(d, mesh, model, o.global_batch);
    ++best.plans;
    if (room && p.ok) {
      const std::size_t cost =
          detail::step_cost(detail::step_bytes(p), detail::step_flops(p, model), o);
      const std::size_t memory = plan_memory(p, d, o.optimizer_slots).peak();
      if (best.least_memory == 0 || memory < best.least_memory) best.least_memory = memory;
      if ((!o.memory_budget || memory <= o.memory_budget) &&
          (!best.found || cost < best.cost || (cost == best.cost && memory < best.memory)))
        best = {true, cost, memory, best.plans, best.least_memory};
    }
    std::size_t i = 0;
    for (; i < model.count; ++i) {
      if (!s.weight_rank[i]) continue;
      if (++digit[i] < options.size()) break;
      digit[i] = 0;
    }
    if (i == model.count) break;
  }
  return best;
}

// Every combination, and when none fits the budget (and the options allow it), every combination
// again with the state split over the batch axis (shard_state::gradients).
best_of_all exhaustive(const distribution_value& base, const mesh_value& mesh,
                       const model_desc& model, const auto_layout_options& o) {
  const best_of_all plain = every_combination(base, mesh, model, o);
  if (plain.found || !o.split_state || !o.memory_budget || base.shard != shard_state::none ||
      mesh.sizes[base.batch_axis] == 1)
    return plain;
  distribution_value split = base;
  split.shard = shard_state::gradients;
  best_of_all b = every_combination(split, mesh, model, o);
  b.plans += plain.plans;
  return b;
}

template <class Mesh>
distribution_value model_over(std::string_view batch) {
  distribution_value d{distribution_value::model, Mesh::value, 0, {}, 0};
  d.batch_axis = static_cast<std::size_t>(Mesh::value.index_of(batch));
  return d;
}

void check_against_oracle(const distribution_value& base, const model_desc& m,
                          const auto_layout_options& o) {
  const layout_search s = search_layouts(base, base.mesh, m, o);
  const best_of_all all = exhaustive(base, base.mesh, m, o);
  REQUIRE(all.found == s.ok);
  if (!s.ok) return;
  CHECK(s.cost == all.cost);
  if (o.bytes_per_flop == 0) CHECK(s.bytes == s.cost);
  if (!o.memory_budget && o.bytes_per_flop == 0) CHECK(s.bytes <= s.replicated_bytes);
  if (o.memory_budget) CHECK(s.memory.peak() <= o.memory_budget);
  // Past a few layers the search plans fewer candidates than there are combinations.
  if (all.plans >= 27) CHECK(s.plans < all.plans);
}

constexpr auto relu = activation_kind::relu;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
}  // namespace

TEST_CASE("auto_layout: a chain's layouts move the fewest bytes of all combinations",
          "[auto_layout]") {
  const model_desc chain = describe_model(
      shape_value{256},
      std::array{dense_op<{.units = 512, .activation = relu}>("a"),
                 dense_op<{.units = 64, .activation = relu}>("b"),
                 dense_op<{.units = 1024, .activation = relu}>("c"),
                 dense_op<{.units = 256, .activation = relu}>("d"), dense_op<{.units = 8}>("e")});
  for (std::size_t batch : {8, 64, 1024}) {
    INFO("global batch " << batch);
    check_against_oracle(model_over<mesh_2x4>("data"), chain, {.global_batch = batch});
  }
}

TEST_CASE("auto_layout: a residual graph, a 3-D mesh and a convolution", "[auto_layout]") {
  const model_desc residual = describe_model(
      shape_value{128}, std::array{dense_op<{.units = 256, .activation = relu}>("in"),
                                   dense_op<{.units = 1024, .activation = relu}>("up"),
                                   dense_op<{.units = 256}>("down"), reads(add_op("sum"), {1, 3}),
                                   dense_op<{.units = 16}>("head")});
  check_against_oracle(model_over<mesh_2x4>("data"), residual, {.global_batch = 32});
  using mesh_3d = device_mesh<axis<"data", 2>, axis<"m1", 2>, axis<"m2", 2>>;
  const model_desc three =
      describe_model(shape_value{64}, std::array{dense_op<{.units = 512, .activation = relu}>("a"),
                                                 dense_op<{.units = 512, .activation = relu}>("b"),
                                                 dense_op<{.units = 16}>("c")});
  check_against_oracle(model_over<mesh_3d>("data"), three, {.global_batch = 16});
  const model_desc conv = describe_model(
      shape_value{8, 8, 4},
      std::array{conv2d_op<{.filters = 16, .window = {3, 3}}>("conv"), flatten_op("flat"),
                 dense_op<{.units = 64, .activation = relu}>("d"), dense_op<{.units = 8}>("e")});
  check_against_oracle(model_over<mesh_2x4>("data"), conv, {.global_batch = 16});
}

TEST_CASE("auto_layout: a memory budget trades bytes for memory", "[auto_layout]") {
  const model_desc wide =
      describe_model(shape_value{64}, std::array{dense_op<{.units = 2048, .activation = relu}>("a"),
                                                 dense_op<{.units = 2048, .activation = relu}>("b"),
                                                 dense_op<{.units = 16}>("c")});
  const distribution_value base = model_over<mesh_2x4>("data");
  // A large batch makes splitting cost activations; a budget forces it.
  const auto_layout_options free_run{.global_batch = 4096};
  const layout_search unbounded = search_layouts(base, base.mesh, wide, free_run);
  REQUIRE(unbounded.ok);
  const std::size_t budget = unbounded.memory.peak() * 3 / 4;
  const auto_layout_options bounded{.global_batch = 4096, .memory_budget = budget};
  const layout_search fitted = search_layouts(base, base.mesh, wide, bounded);
  REQUIRE(fitted.ok);
  CHECK(fitted.memory.peak() <= budget);
  CHECK(fitted.bytes >= unbounded.bytes);
  check_against_oracle(base, wide, bounded);
  // A budget nothing fits: the error, and the smallest peak found.
  const layout_search none =
      search_layouts(base, base.mesh, wide, {.global_batch = 4096, .memory_budget = 1000});
  CHECK_FALSE(none.ok);
  CHECK(none.over_budget);
  CHECK(none.smallest_peak ==
        exhaustive(base, base.mesh, wide, {.global_batch = 4096, .memory_budget = 1000})
            .least_memory);
  CHECK(std::string(none.error) == "no choice of layouts fits the memory budget");
}

TEST_CASE("auto_layout: past the budget, the state split over the batch axis", "[auto_layout]") {
  const model_desc pair = describe_model(
      shape_value{1024}, std::array{dense_op<{.units = 4096, .activation = relu}>("col"),
                                    dense_op<{.units = 1024}>("row")});
  const distribution_value base = model_over<mesh_2x4>("data");
  const layout_search free_run = search_layouts(base, base.mesh, pair, {.global_batch = 64});
  REQUIRE(free_run.ok);
  CHECK(free_run.chosen.shard == shard_state::none);
  // 30 MB: no layout fits (the Megatron pair's, the least, needs 34.4 MB); with its state split
  // the same layouts need 26.0 MB and move the same bytes.
  const auto_layout_options tight{.global_batch = 64, .memory_budget = 30'000'000};
  const layout_search split = search_layouts(base, base.mesh, pair, tight);
  REQUIRE(split.ok);
  CHECK(split.chosen.shard == shard_state::gradients);
  CHECK(split.bytes == free_run.bytes);
  CHECK(split.choices == free_run.choices);
  CHECK(free_run.memory.peak() == 34'373'632);
  CHECK(split.memory.peak() == 25'976'832);
  check_against_oracle(base, pair, tight);
  // Not allowed to split: nothing fits, and the least any layout needs is the pair's.
  auto_layout_options unsplit = tight;
  unsplit.split_state = false;
  const layout_search refused = search_layouts(base, base.mesh, pair, unsplit);
  CHECK_FALSE(refused.ok);
  CHECK(refused.smallest_peak == free_run.memory.peak());
  check_against_oracle(base, pair, unsplit);
  // 20 MB: nothing fits even split; the least is the split pair's.
  const layout_search none =
      search_layouts(base, base.mesh, pair, {.global_batch = 64, .memory_budget = 20'000'000});
  CHECK_FALSE(none.ok);
  CHECK(none.smallest_peak == split.memory.peak());
  // A distribution that names its own shard_state is searched under it alone.
  distribution_value own = base;
  own.shard = shard_state::optimizer;
  const layout_search kept = search_layouts(own, own.mesh, pair, tight);
  REQUIRE(kept.ok);
  CHECK(kept.chosen.shard == shard_state::optimizer);
}

TEST_CASE("auto_layout: compute weighed in splits kernels on a mesh without data parallelism",
          "[auto_layout]") {
  // On 1x2 replicated kernels move nothing: by bytes alone they win. With compute weighed in
  // (bytes_per_flop), the pair is split, columns then rows, halving each device's flops.
  using mesh_1x2 = device_mesh<axis<"data", 1>, axis<"model", 2>>;
  const distribution_value base = model_over<mesh_1x2>("data");
  const model_desc pair = describe_model(
      shape_value{1024}, std::array{dense_op<{.units = 4096, .activation = relu}>("col"),
                                    dense_op<{.units = 1024}>("row")});
  const layout_search bytes_only = search_layouts(base, base.mesh, pair, {.global_batch = 64});
  REQUIRE(bytes_only.ok);
  CHECK(bytes_only.bytes == 0);
  CHECK(bytes_only.choices[0].kind == layer_choice::replicated);
  CHECK(bytes_only.flops == 6ull * 64 * (1024 * 4096 + 4096 * 1024));
  const layout_search weighed =
      search_layouts(base, base.mesh, pair, {.global_batch = 64, .bytes_per_flop = 0.01});
  REQUIRE(weighed.ok);
  CHECK(weighed.choices[0].kind == layer_choice::columns);
  CHECK(weighed.choices[1].kind == layer_choice::rows);
  CHECK(weighed.flops * 2 == bytes_only.flops);
  check_against_oracle(base, pair, {.global_batch = 64, .bytes_per_flop = 0.01});
  const model_desc chain = describe_model(
      shape_value{256},
      std::array{dense_op<{.units = 512, .activation = relu}>("a"),
                 dense_op<{.units = 64, .activation = relu}>("b"),
                 dense_op<{.units = 1024, .activation = relu}>("c"), dense_op<{.units = 8}>("d")});
  for (double w : {1e-4, 1e-3, 0.1}) {
    INFO("bytes per flop " << w);
    check_against_oracle(model_over<mesh_2x4>("data"), chain,
                         {.global_batch = 64, .bytes_per_flop = w});
  }
  // A convolution's flops count its output positions: 6 x rows x 6 x 6 x its 3 x 3 x 4 x 16
  // kernel (replicated here), and the dense after it.
  const model_desc conv = describe_model(
      shape_value{8, 8, 4}, std::array{conv2d_op<{.filters = 16, .window = {3, 3}}>("conv"),
                                       flatten_op("flat"), dense_op<{.units = 8}>("d")});
  const layout_search c = search_layouts(base, base.mesh, conv, {.global_batch = 4});
  REQUIRE(c.ok);
  CHECK(c.flops == 6ull * 4 * (6 * 6 * 3 * 3 * 4 * 16 + 6 * 6 * 16 * 8));
}

TEST_CASE("auto_layout: the chosen layout map as Keras code", "[auto_layout]") {
  const model_desc pair = describe_model(
      shape_value{1024}, std::array{dense_op<{.units = 4096, .activation = relu}>("col"),
                                    dense_op<{.units = 1024}>("row")});
  const layout_search s =
      search_layouts(model_over<mesh_2x4>("data"), mesh_2x4::value, pair, {.global_batch = 64});
  REQUIRE(s.ok);
  CHECK(layout_map_code(s.chosen) ==
        "device_mesh = keras.distribution.DeviceMesh(shape=(2, 4), axis_names=[\"data\", "
        "\"model\"])\n"
        "layout_map = keras.distribution.LayoutMap(device_mesh)\n"
        "layout_map[\"col/kernel\"] = (None, \"model\")\n"
        "layout_map[\"col/bias\"] = (\"model\",)\n"
        "layout_map[\"row/kernel\"] = (\"model\", None)\n"
        "distribution = keras.distribution.ModelParallel(layout_map=layout_map, "
        "batch_dim_name=\"data\")\n");
  // A split state, which Keras cannot express, said in a comment after the code.
  distribution_value split = s.chosen;
  split.shard = shard_state::gradients;
  const std::string code = layout_map_code(split);
  CHECK(code.substr(code.find("distribution =")) ==
        "distribution = keras.distribution.ModelParallel(layout_map=layout_map, "
        "batch_dim_name=\"data\")\n"
        "# tessel also splits each process's optimizer state and gradients over \"data\" "
        "(shard_state); Keras has no such option\n");
}
