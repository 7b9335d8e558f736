// visualize_sharding: the grid of blocks with the devices that hold each, as
// jax.debug.visualize_array_sharding draws it.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <tessel/tessel.hpp>

namespace {
using namespace tessel;
using Catch::Matchers::Contains;
using tessel::testing::message_of;
using mesh_2x4 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
layout_value lay(int d0, int d1) {
  layout_value l = layout_value::replicated(2);
  if (d0 >= 0) l.dims[0].push(static_cast<std::uint8_t>(d0));
  if (d1 >= 0) l.dims[1].push(static_cast<std::uint8_t>(d1));
  return l;
}
}  // namespace

TEST_CASE("visualize_sharding: seeds/000's d1 kernel on 2x4, each column block on two devices",
          "[visualize]") {
  CHECK(visualize_sharding(shape_value{784, 200}, lay(-1, 1), mesh_2x4::value) ==
        "┌─────────┬─────────┬─────────┬─────────┐\n"
        "│         │         │         │         │\n"
        "│ CPU 0,4 │ CPU 1,5 │ CPU 2,6 │ CPU 3,7 │\n"
        "│         │         │         │         │\n"
        "└─────────┴─────────┴─────────┴─────────┘\n");
}

TEST_CASE("visualize_sharding: rows over one axis, columns over the other; replicated; 1-D",
          "[visualize]") {
  CHECK(visualize_sharding(shape_value{8, 8}, lay(1, 0), mesh_2x4::value) ==
        "┌───────┬───────┐\n"
        "│       │       │\n"
        "│ CPU 0 │ CPU 4 │\n"
        "│       │       │\n"
        "├───────┼───────┤\n"
        "│       │       │\n"
        "│ CPU 1 │ CPU 5 │\n"
        "│       │       │\n"
        "├───────┼───────┤\n"
        "│       │       │\n"
        "│ CPU 2 │ CPU 6 │\n"
        "│       │       │\n"
        "├───────┼───────┤\n"
        "│       │       │\n"
        "│ CPU 3 │ CPU 7 │\n"
        "│       │       │\n"
        "└───────┴───────┘\n");
  CHECK(visualize_sharding(shape_value{10}, layout_value::replicated(1), mesh_2x4::value) ==
        "┌─────────────────────┐\n"
        "│                     │\n"
        "│ CPU 0,1,2,3,4,5,6,7 │\n"
        "│                     │\n"
        "└─────────────────────┘\n");
  layout_value bias = layout_value::replicated(1);
  bias.dims[0].push(1);
  CHECK_THAT(visualize_sharding(shape_value{200}, bias, mesh_2x4::value, "GPU"),
             Contains("│ GPU 0,4 │ GPU 1,5 │ GPU 2,6 │ GPU 3,7 │"));
}

TEST_CASE("visualize_sharding: a model's variable, and a tensor it cannot draw", "[visualize]") {
  using namespace tessel::layers;
  tessel::sequential<input<4>, dense<3>> model;
  CHECK_THAT(visualize_sharding(model.get_variable("dense/kernel"), model.mesh().shape()),
             Contains("│ CPU 0 │"));
  CHECK_THAT(message_of([] {
               visualize_sharding(shape_value{2, 3, 4}, layout_value::replicated(3),
                                  mesh_2x4::value);
             }),
             Contains("visualize_sharding draws 1-D and 2-D tensors; got shape (2, 3, 4)"));
}
