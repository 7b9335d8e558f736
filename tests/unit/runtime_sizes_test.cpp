// Run-time sizes: meshes and layouts whose sizes are known only when the program runs.
#include <catch2/catch.hpp>

#include <string>
#include <tessel/core.hpp>
#include <tessel/layers/plans.hpp>
#include <tessel/losses/plan.hpp>
#include "test_helpers.hpp"

using namespace tessel;
using Catch::Matchers::Contains;

namespace {

using tessel::testing::message_of;
using mesh_1d = device_mesh<axis<"batch">>;
using mesh_2d = device_mesh<axis<"data">, axis<"model", 4>>;

}  // namespace

TEST_CASE("a dynamic axis takes its size at run time", "[mesh]") {
  mesh_1d m{8};
  CHECK(m.size() == 8);
  CHECK(m.extent<"batch">() == 8);
  CHECK(m.shape().sizes[0] == 8);
  CHECK(to_string(m.shape()) == "batch=8");
  mesh_2d m2{3};
  CHECK(m2.size() == 12);
  CHECK(m2.coordinates(7) == std::array<std::size_t, 2>{1, 3});
  CHECK(m2.device_at({2, 1}) == 9);
}

TEST_CASE("a mesh axis of size 0 names the axis", "[mesh][error]") {
  const auto msg = message_of([] { mesh_2d m{0}; });
  CHECK_THAT(msg, Contains("axis 'data'") && Contains("size 0") && Contains(">= 1"));
}

TEST_CASE("a mesh that does not match the device count names both numbers", "[mesh][error]") {
  const device_mesh<axis<"data", 2>, axis<"model", 4>> m;
  CHECK_NOTHROW(m.check_device_count(8));
  const auto msg = message_of([&] { m.check_device_count(6); });
  CHECK_THAT(msg, Contains("data=2 x model=4") && Contains("8 devices") &&
                      Contains("6 processes") && Contains("mpiexec -n 8"));
}

TEST_CASE("for_devices sizes the dynamic axis like DataParallel(devices=...)", "[mesh]") {
  CHECK(mesh_1d::for_devices(6).size() == 6);
  CHECK(mesh_2d::for_devices(8).extent(0) == 2);
  const auto msg = message_of([] { (void)mesh_2d::for_devices(6); });
  CHECK_THAT(msg,
             Contains("6 devices") && Contains("data=? x model=4") && Contains("multiple of 4"));
  const auto msg_static = message_of([] { (void)device_mesh<axis<"data", 2>>::for_devices(3); });
  CHECK_THAT(msg_static, Contains("2 devices") && Contains("3 processes"));
}

TEST_CASE("local shapes at run time, and a clear error naming the axis and sizes", "[layout]") {
  const mesh_1d m{4};
  const auto l = tensor_layout<mesh_1d, "batch", none>::value;
  CHECK(local_shape(l, m.shape(), {32, 784}) == shape_value{8, 784});
  const auto msg = message_of([&] { (void)local_shape(l, m.shape(), {30, 784}); });
  CHECK_THAT(msg, Contains("dimension 0 of size 30") && Contains("mesh axis 'batch' of size 4") &&
                      Contains("divisible by 4"));
  const auto rank_msg = message_of([&] { check_layout(l, m.shape(), {30, 28, 28}); });
  CHECK_THAT(rank_msg, Contains("rank 2") && Contains("rank 3") && Contains("(30, 28, 28)"));
}

TEST_CASE("two axes on one dimension divide by their product", "[layout]") {
  const mesh_2d m{2};
  const auto l = tensor_layout<mesh_2d, axes<"data", "model">, none>::value;
  CHECK(local_shape(l, m.shape(), {64, 10}) == shape_value{8, 10});
  const auto msg = message_of([&] { (void)local_shape(l, m.shape(), {12, 10}); });
  CHECK_THAT(msg, Contains("mesh axis 'data,model' of size 8"));
}

TEST_CASE("each device holds its block of the global tensor", "[layout]") {
  const mesh_2d m{2};
  const auto l = tensor_layout<mesh_2d, "data", "model">::value;
  std::array<std::size_t, max_mesh_rank> c{};
  c[0] = 1;
  c[1] = 2;
  const block b = shard_block(l, m.shape(), {16, 200}, c);
  CHECK(b.offset == shape_value{8, 100});
  CHECK(b.extent == shape_value{8, 50});
  // The blocks of all devices tile the tensor exactly once.
  std::size_t covered = 0;
  for (std::size_t d = 0; d < m.size(); ++d) {
    const auto xy = m.coordinates(d);
    c[0] = xy[0];
    c[1] = xy[1];
    covered += shard_block(l, m.shape(), {16, 200}, c).extent.elements();
  }
  CHECK(covered == 16 * 200);
}

TEST_CASE("layouts print like Keras tuples", "[layout]") {
  using m24 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
  CHECK(to_string(tensor_layout<m24, none, "model">::value, m24::value) == "(None, 'model')");
  CHECK(to_string(tensor_layout<m24, "model">::value, m24::value) == "('model',)");
  CHECK(to_string(tensor_layout<m24, axes<"data", "model">, none>::value, m24::value) ==
        "(('data', 'model'), None)");
  auto p = layout_value::replicated(2);
  p.partial = 2;
  CHECK(to_string(p, m24::value) == "(None, None) partial over ('model')");
  CHECK(to_string(shape_value{dynamic_extent, 784}) == "(None, 784)");
}

TEST_CASE("the model plan on a run-time mesh, and its text", "[plan]") {
  using dist = data_parallel<>;
  const auto model = describe_model(
      shape_value{784},
      std::array{dense_op<{.units = 256, .activation = activation_kind::relu}>("dense"),
                 dense_op<{.units = 10}>("dense_1")},
      &loss_rules::softmax_cross_entropy);
  const mesh_1d m{4};
  const model_plan p = plan_model(dist::value, m.shape(), model, 32);
  REQUIRE(p.ok);
  // Data parallel: the four gradients and the loss are all_reduced over "batch", nothing else.
  CHECK(p.collectives(phase::forward) == 1);
  CHECK(p.collectives(phase::backward, collective::all_reduce) == 4);
  CHECK(p.collectives(phase::backward) == 4);
  // The first kernel's gradient: 784 x 256 floats, ring all_reduce over 4 devices.
  CHECK(p.wire_bytes(phase::backward) == 2 * 3 * (784 * 256 + 256 + 256 * 10 + 10) * 4 / 4);
  const std::string text = explain(p, model);
  CHECK_THAT(text, Contains("mesh batch=4 (4 devices), global batch 32"));
  CHECK_THAT(text, Contains("dense/kernel") && Contains("(784, 256)"));
  CHECK_THAT(text, Contains("kernel gradient") && Contains("all_reduce('batch')"));
  CHECK_THAT(text, Contains("per step: 1 forward + 4 backward collectives"));
}

TEST_CASE("a plan that cannot be made says which layer and why", "[plan][error]") {
  using m24 = device_mesh<axis<"data", 2>, axis<"model", 4>>;
  using map = layout_map<m24, rule<".*dense.*bias", "model">, rule<".*bias", "model">>;
  const auto model = describe_model(shape_value{8}, std::array{dense_op<{.units = 8}>("dense_2")});
  const model_plan p = plan_model(model_parallel<map>::value, m24::value, model, 16);
  REQUIRE_FALSE(p.ok);
  const std::string text = explain(p, model);
  CHECK_THAT(text, Contains("cannot plan layer 'dense_2'") && Contains("dense_2/bias") &&
                       Contains("'.*dense.*bias' and '.*bias'"));
  const model_plan odd = plan_model(
      model_parallel<map>::value, m24::value,
      describe_model(shape_value{8}, std::array{dense_op<{.units = 8, .use_bias = false}>("d")}),
      15);
  CHECK_FALSE(odd.ok);
  CHECK_THAT(explain(odd, model), Contains("global batch does not divide"));
}
