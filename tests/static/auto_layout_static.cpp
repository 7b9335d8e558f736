// auto_layout when the program compiles: for the Megatron pair the compiler chooses the
// column-then-row layouts (the same rules as the hand-written map, and its bytes); for a
// 12-layer MLP it alternates columns and rows, moving 3.4 times fewer bytes than replicated
// weights; a memory budget makes it split a model it would otherwise leave replicated, and past
// what any layout fits, split the state over the batch axis as well.
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>

namespace {
using namespace tessel;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
constexpr auto relu = activation_kind::relu;

constexpr bool same_rules(const distribution_value& a, const distribution_value& b) {
  if (a.rule_count != b.rule_count) return false;
  for (std::size_t i = 0; i < a.rule_count; ++i)
    if (!(a.rules[i].key.view() == b.rules[i].key.view()) ||
        !(a.rules[i].layout == b.rules[i].layout))
      return false;
  return true;
}

// The Megatron pair: columns, then rows.
using automatic = model_parallel<auto_layout<mesh_2x4, {.global_batch = 64}>, "data">;
using megatron =
    model_parallel<layout_map<mesh_2x4, rule<"col/kernel", none, "model">,
                              rule<"col/bias", "model">, rule<"row/kernel", "model", none>>,
                   "data">;
constexpr model_desc pair = describe_model(
    shape_value{1024}, std::array{dense_op<{.units = 4096, .activation = relu}>("col"),
                                  dense_op<{.units = 1024}>("row")});
using chosen = resolved_distribution_t<automatic, pair>;
static_assert(same_rules(chosen::value, megatron::value));
static_assert(std::is_same_v<chosen::mesh, mesh_2x4> && chosen::batch_dim_name.view() == "data");
constexpr const layout_search& s = layout_search_v<automatic, pair>;
static_assert(s.bytes == detail::step_bytes(model_plan_v<megatron, pair, 64>));
static_assert(s.bytes * 3 < s.replicated_bytes);
// A distribution other than auto_layout is left as it is.
static_assert(std::is_same_v<resolved_distribution_t<megatron, pair>, megatron>);
// With the state split over "data", the same layouts, the split kept in the distribution chosen.
using automatic_split =
    model_parallel<auto_layout<mesh_2x4, {.global_batch = 64}>, "data", shard_state::gradients>;
using chosen_split = resolved_distribution_t<automatic_split, pair>;
static_assert(same_rules(chosen_split::value, megatron::value) &&
              chosen_split::value.shard == shard_state::gradients);
// Within 30 MB no layout fits (the pair's needs 34.4 MB): the compiler splits the state over
// "data" too (26.0 MB, the same bytes); told not to (.split_state = false), it refuses the model
// (compile_fail/no_layout_fits_device_memory.cpp).
using within_30mb =
    model_parallel<auto_layout<mesh_2x4, {.global_batch = 64, .memory_budget = 30'000'000}>,
                   "data">;
using chosen_30mb = resolved_distribution_t<within_30mb, pair>;
static_assert(same_rules(chosen_30mb::value, megatron::value) &&
              chosen_30mb::value.shard == shard_state::gradients);
constexpr const layout_search& s30 = layout_search_v<within_30mb, pair>;
static_assert(s30.ok && s30.bytes == s.bytes && s30.memory.peak() == 25'976'832 &&
              s.memory.peak() == 34'373'632);

// Twelve layers: columns and rows alternate.
constexpr op_desc wide(const char* name) {
  return dense_op<{.units = 1024, .activation = relu}>(name);
}
constexpr model_desc deep = describe_model(
    shape_value{1024},
    std::array{wide("l0"), wide("l1"), wide("l2"), wide("l3"), wide("l4"), wide("l5"), wide("l6"),
               wide("l7"), wide("l8"), wide("l9"), wide("l10"), dense_op<{.units = 16}>("head")});
constexpr const layout_search& d = layout_search_v<automatic, deep>;
constexpr bool alternates = [] {
  for (std::size_t i = 0; i < deep.count; ++i)
    if (d.choices[i].kind != (i % 2 ? layer_choice::rows : layer_choice::columns)) return false;
  return true;
}();
static_assert(d.ok && alternates);
static_assert(d.bytes * 34 < d.replicated_bytes * 10);

// At a batch of 4096 two 2048-wide layers after a 64-wide input move the fewest bytes replicated
// (their gradients' all-reduce is smaller than the split activations'), but need 137.7 MB per
// device; under a budget of 120 MB the compiler splits them, columns then rows (77.4 MB).
constexpr model_desc wide2 =
    describe_model(shape_value{64}, std::array{dense_op<{.units = 2048, .activation = relu}>("a"),
                                               dense_op<{.units = 2048, .activation = relu}>("b"),
                                               dense_op<{.units = 16}>("c")});
using unbounded = model_parallel<auto_layout<mesh_2x4, {.global_batch = 4096}>, "data">;
using bounded =
    model_parallel<auto_layout<mesh_2x4, {.global_batch = 4096, .memory_budget = 120'000'000}>,
                   "data">;
constexpr const layout_search& u = layout_search_v<unbounded, wide2>;
constexpr const layout_search& b = layout_search_v<bounded, wide2>;
static_assert(u.choices[0].kind == layer_choice::replicated &&
              u.choices[1].kind == layer_choice::replicated && u.bytes == u.replicated_bytes);
static_assert(u.memory.peak() > 120'000'000);
static_assert(b.choices[0].kind == layer_choice::columns &&
              b.choices[1].kind == layer_choice::rows);
static_assert(b.memory.peak() <= 120'000'000 && b.bytes > u.bytes);
}  // namespace
