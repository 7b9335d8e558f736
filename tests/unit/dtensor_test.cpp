// basic_dtensor, the sharded rank-N tensor: a device's block of an NHWC tensor, its views, and
// its values drawn alone equal to the whole tensor's slice; variables and activations on it.
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <tessel/tessel.hpp>

namespace {
using namespace tessel;
using Catch::Matchers::Contains;
using tessel::testing::message_of;
using B = default_backend;
using mesh = device_mesh<axis<"data", 2>, axis<"model", 2>>;
constexpr std::size_t N = 4, H = 3, W = 5, C = 6;

template <class L>
basic_dtensor<B> at(const shape_value& global, std::size_t data, std::size_t model) {
  std::array<std::size_t, max_mesh_rank> coords{};
  coords[0] = data, coords[1] = model;
  return basic_dtensor<B>(global, L::value, mesh::value, coords);
}
std::span<const std::size_t> dims(const shape_value& s) { return {s.extents.data(), s.rank}; }
// Fills a dtensor's block with the values the whole tensor has there (random normal, by index).
void draw(basic_dtensor<B>& t, std::uint64_t stream) {
  std::vector<float> v(t.size());
  initializers::fill_block("random_normal", random::stream(3, stream), dims(t.global_shape()),
                           dims(t.shard().offset), dims(t.shard().extent), v);
  B::upload(v, t.local());
}
std::vector<float> values(const basic_dtensor<B>& t) {
  std::vector<float> v(t.size());
  B::download(t.local(), v);
  return v;
}
// The whole tensor's values, row-major, from one device's dtensor on the replicated layout.
std::vector<float> whole(const shape_value& s, std::uint64_t stream) {
  std::size_t n = 1;
  for (std::size_t d = 0; d < s.rank; ++d) n *= s[d];
  std::vector<float> v(n);
  initializers::fill("random_normal", random::stream(3, stream), 1, n, 1, v);
  return v;
}
}  // namespace

TEST_CASE("dtensor: a device's block, its local shape and its views", "[dtensor]") {
  using L = tensor_layout<mesh, "data", none, none, "model">;
  const auto t = at<L>({N, H, W, C}, 1, 0);
  CHECK(t.global_shape() == shape_value{N, H, W, C});
  CHECK(t.local_shape() == shape_value{N / 2, H, W, C / 2});
  CHECK(t.shard().offset == shape_value{2, 0, 0, 0});
  CHECK(t.size() == (N / 2) * H * W * (C / 2));
  CHECK(B::rows(t.local()) == N / 2);
  CHECK(B::cols(t.view((N / 2) * H * W, C / 2)) == C / 2);
  CHECK_THAT(message_of([&] { (void)t.view(7, 7); }),
             Contains("a view of 7 x 7 of a block of 90 elements"));
  CHECK_THAT(message_of([&] {
               at<L>({N, H, W, 5}, 0, 0);
             }),
             Contains("dimension 3 of size 5 is sharded over mesh axis 'model' of size 2"));
  CHECK_THAT(message_of([&] { at<L>({N, H, W}, 0, 0); }), Contains("rank 4"));
  // The same elements whatever the sharding: a block drawn alone is the slice of the whole.
  auto s = at<L>({N, H, W, C}, 1, 1);
  draw(s, 5);
  const auto all = whole({N, H, W, C}, 5);
  const auto mine = values(s);
  std::size_t k = 0;
  bool same = true;
  for (std::size_t n = 2; n < 4; ++n)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t w = 0; w < W; ++w)
        for (std::size_t c = 3; c < 6; ++c)
          same = same && mine[k++] == all[((n * H + h) * W + w) * C + c];
  CHECK(same);
}

// Variables are sharded tensors: a variable placed by a layout holds its device's block, drawn
// exactly as that slice of the unsharded variable, and the optimizer's state lives on the same
// block. Activations are too: dropout keys its mask by the block's global (row, column).
namespace {
variable_store<B> store_at(const layout_value& l, std::size_t data, std::size_t model) {
  variable_store<B> s;
  s.place = [l, data, model](std::string_view, std::size_t) {
    variable_placement p{l, mesh::value, {}};
    p.coords[0] = data, p.coords[1] = model;
    return p;
  };
  return s;
}
}  // namespace

TEST_CASE("variables: a variable holds its block of the global tensor, drawn as one device's",
          "[dtensor][variables]") {
  variable_store<B> whole;
  const std::vector<float> all =
      add_variable(whole, "d/kernel", {8, 6}, "glorot_uniform", 7).numpy();
  CHECK(whole[0].value.layout() == layout_value::replicated(2));
  layout_value by_columns = layout_value::replicated(2);
  by_columns.dims[1].push(1);  // (None, "model")
  for (std::size_t model = 0; model < 2; ++model) {
    auto store = store_at(by_columns, 1, model);
    variable<B>& v = add_variable(store, "d/kernel", {8, 6}, "glorot_uniform", 7);
    CHECK(v.size() == 48);
    CHECK(v.value.global_shape() == shape_value{8, 6});
    CHECK(v.value.local_shape() == shape_value{8, 3});
    CHECK(v.value.shard().offset == shape_value{0, 3 * model});
    CHECK(B::rows(v.gradient) == 8);
    CHECK(B::cols(v.gradient) == 3);
    const std::vector<float> mine = v.numpy();
    for (std::size_t r = 0; r < 8; ++r)
      for (std::size_t c = 0; c < 3; ++c) {
        INFO("row " << r << ", column " << c << ", device model=" << model);
        CHECK(mine[r * 3 + c] == all[r * 6 + 3 * model + c]);
      }
    // Adam's moments are built on the variable's block.
    optimizer<B> adam("adam");
    adam.build({&v});
    for (variable<B>* slot : adam.variables()) {
      CHECK(slot->value.shard().offset == v.value.shard().offset);
      CHECK(slot->value.local_shape() == shape_value{8, 3});
    }
  }
  // A bias split over "data" (size 2): rows of one.
  layout_value split = layout_value::replicated(1);
  split.dims[0].push(0);
  auto store = store_at(split, 1, 0);
  variable<B>& b = add_variable(store, "d/bias", {6}, "random_normal", 7);
  variable_store<B> whole_bias;
  const std::vector<float> bias =
      add_variable(whole_bias, "d/bias", {6}, "random_normal", 7).numpy();
  CHECK(b.numpy() == std::vector<float>(bias.begin() + 3, bias.end()));
}

TEST_CASE("activations: dropout draws a block's part of the whole batch's mask", "[dtensor]") {
  using drop = layers::dropout<0.5>;
  variable_store<B> none;
  const layer_info info{"dropout", shape_value{6}, shape_value{6}};
  drop::runtime<B> whole(info, none, 3), part(info, none, 3);
  const pass_context ctx{.training = true, .step = 2, .seed = 0};
  std::vector<float> ones(8 * 6, 1.0f);
  B::matrix x = B::make_matrix("x", 8, 6);
  B::upload(ones, x);
  std::vector<float> all(48);
  B::download(tessel::call_forward(whole, batch_block<B>(x), ctx).local(), all);
  // Rows [4, 8) and columns [3, 6) of the batch: a block of a tensor split over both axes.
  const block b{shape_value{4, 3}, shape_value{4, 3}};
  layout_value l = layout_value::replicated(2);
  l.dims[0].push(0);
  l.dims[1].push(1);
  B::matrix xb = B::make_matrix("xb", 4, 3);
  B::upload(std::span<const float>(ones).first(12), xb);
  std::vector<float> mine(12);
  B::download(
      tessel::call_forward(part, basic_dtensor<B>(shape_value{8, 6}, l, b, xb), ctx).local(), mine);
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 3; ++c) {
      INFO("row " << r << ", column " << c);
      CHECK(mine[r * 3 + c] == all[(4 + r) * 6 + 3 + c]);
    }
  // A rank-3 block split past its first feature dimension has no single range of features.
  layout_value deep = layout_value::replicated(3);
  deep.dims[2].push(1);
  B::matrix xd = B::make_matrix("xd", 2, 6);
  const block bd{shape_value{0, 0, 2}, shape_value{2, 3, 2}};
  CHECK_THAT(
      message_of([&] {
        tessel::call_forward(part, basic_dtensor<B>(shape_value{2, 3, 4}, deep, bd, xd), ctx);
      }),
      Contains("dropout: a block split along dimension 2"));
}

TEST_CASE("losses: an output block without its whole class dimension is refused", "[dtensor]") {
  layout_value by_classes = layout_value::replicated(2);
  by_classes.dims[1].push(1);
  const basic_dtensor<B> half(shape_value{4, 6}, by_classes, mesh::value, {});
  const B::matrix grad = B::make_matrix("grad", 4, 3);
  const B::sums sums = B::make_sums("sums", 1);
  CHECK_THAT(message_of([&] {
               loss_and_gradient<B>(losses::mean_squared_error{}, half, B::index_vector(),
                                    B::make_matrix("t", 4, 3), grad, 1.0f, sums, 0);
             }),
             Contains("mean_squared_error: the output's class dimension is split across devices "
                      "(its block holds 3 of 6 classes)"));
}
