// The convolutional layers (layers/convolution.hpp) called alone on the default backend, against
// Keras 3 (tests/golden/convolution.json): conv2d's forward and the gradients of its input,
// kernel and bias for every case (padding valid and same, strides 1 and 2 and (1, 2), kernels 2,
// 3, 6 and 2x3, with and without bias, relu), max and average pooling with their gradients, and
// global average pooling. Tolerance as golden.hpp's, with an absolute floor of 1e-5 of the
// array's largest value (values that cancel differ by their sums' order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <tessel/layers/batch_normalization.hpp>
#include <tessel/layers/convolution.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "../support/golden.hpp"

namespace {

using B = tessel::default_backend;
using matrix = B::matrix;
using tessel::testing::golden::json;
using tessel::testing::golden::shape_of;
using tessel::testing::golden::values;
using namespace tessel::layers;

std::vector<float> host(const matrix& m) {
  std::vector<float> v(B::rows(m) * B::cols(m));
  B::download(m, v);
  return v;
}
void check_close(const matrix& m, const json& expected, const std::string& what) {
  const std::vector<float> e = values(expected);
  double scale = 0;
  for (float v : e) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  tessel::testing::golden::check_close(host(m), e, what, 1e-5, 1e-5 * scale);
}
matrix device(const json& a) { return tessel::testing::golden::device<B>(a); }
tessel::shape_value sample_of(const json& a) {
  const auto s = shape_of(a);
  tessel::shape_value v{};
  v.rank = s.size() - 1;
  for (std::size_t d = 1; d < s.size(); ++d) v.extents[d - 1] = s[d];
  return v;
}

template <class L>
struct lone_layer {
  tessel::variable_store<B> vars;
  typename L::template runtime<B> rt;
  lone_layer(const tessel::shape_value& in)
      : rt(tessel::layer_info{"layer", in, L::output_shape(in)}, vars, 0) {}
};

// One conv2d case through the layer type L, whose arguments must be the case's.
template <class L>
void check_conv(const json& c) {
  const std::string name = c.at("name");
  INFO(name);
  const auto k = c.at("kernel_size").get<std::vector<std::size_t>>();
  const auto s = c.at("strides").get<std::vector<std::size_t>>();
  REQUIRE(L::window.kh == k[0]);
  REQUIRE(L::window.kw == k[1]);
  REQUIRE(L::window.sh == s[0]);
  REQUIRE(L::window.sw == s[1]);
  REQUIRE(L::window.same == (c.at("padding") == "same"));
  const bool bias = c.at("use_bias");
  REQUIRE(L::param_count(sample_of(c.at("x"))) ==
          k[0] * k[1] * 3 * 4 + (bias ? 4 : 0));
  REQUIRE(L::activation == tessel::activation_from_name(c.at("activation").get<std::string>()));
  lone_layer<L> layer(sample_of(c.at("x")));
  REQUIRE(layer.vars.size() == (bias ? 2u : 1u));
  layer.vars[0].assign(values(c.at("kernel")));
  if (bias) layer.vars[1].assign(values(c.at("bias")));
  const matrix x = device(c.at("x"));
  const tessel::pass_context ctx{.training = true};
  check_close(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), ctx).local(), c.at("y"),
              name + " y");
  const matrix dy = device(c.at("dy"));
  const matrix dx = tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, ctx);
  check_close(dx, c.at("dx"), name + " dx");
  check_close(layer.vars[0].gradient, c.at("dkernel"), name + " dkernel");
  if (bias) check_close(layer.vars[1].gradient, c.at("dbias"), name + " dbias");
}

template <class L>
void check_pool(const json& x, const json& c, const json& e, const std::string& what) {
  INFO(what);
  lone_layer<L> layer(sample_of(x));
  const matrix xm = device(x);
  const tessel::pass_context ctx{.training = true};
  check_close(tessel::call_forward(layer.rt, tessel::batch_block<B>(xm), ctx).local(), e.at("y"),
              what + " y");
  const matrix dy = device(c.at("dy"));
  check_close(tessel::call_backward(layer.rt, tessel::batch_block<B>(xm), dy, true, ctx),
              e.at("dx"), what + " dx");
}

// One batch normalization case: training on x (y, dx, dgamma, dbeta, the moving statistics
// after it and after two more batches), then inference with the file's moving statistics.
template <class L>
void check_bn(const json& c) {
  const std::string name = c.at("name");
  INFO(name);
  const bool center = c.at("center"), scale = c.at("scale");
  const tessel::shape_value in = sample_of(c.at("x"));
  const tessel::pass_context train{.training = true}, infer{.training = false};
  {
    lone_layer<L> layer(in);
    REQUIRE(layer.vars.size() == 2u + (center ? 1 : 0) + (scale ? 1 : 0));
    std::size_t v = 0;
    if (scale) layer.vars[v++].assign(values(c.at("gamma")));
    if (center) layer.vars[v++].assign(values(c.at("beta")));
    layer.vars[v].assign(values(c.at("moving_mean")));
    layer.vars[v + 1].assign(values(c.at("moving_variance")));
    CHECK_FALSE(layer.vars[v].trainable);
    const json& e = c.at("training");
    const matrix x = device(c.at("x"));
    check_close(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), train).local(),
                e.at("y"), name + " training y");
    check_close(layer.vars[v].value.local(), e.at("moving_mean_after_1"), name + " moving mean");
    check_close(layer.vars[v + 1].value.local(), e.at("moving_variance_after_1"),
                name + " moving variance");
    const matrix dy = device(c.at("dy"));
    check_close(tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, train),
                e.at("dx"), name + " training dx");
    if (scale) check_close(layer.vars[0].gradient, e.at("dgamma"), name + " training dgamma");
    if (center)
      check_close(layer.vars[scale ? 1 : 0].gradient, e.at("dbeta"), name + " training dbeta");
    for (const json& b : c.at("x_batches_2_3")) {
      const matrix xb = device(b);
      tessel::call_forward(layer.rt, tessel::batch_block<B>(xb), train);
    }
    check_close(layer.vars[v].value.local(), e.at("moving_mean_after_3"), name + " mean after 3");
    check_close(layer.vars[v + 1].value.local(), e.at("moving_variance_after_3"),
                name + " variance after 3");
  }
  lone_layer<L> layer(in);
  std::size_t v = 0;
  if (scale) layer.vars[v++].assign(values(c.at("gamma")));
  if (center) layer.vars[v++].assign(values(c.at("beta")));
  layer.vars[v].assign(values(c.at("moving_mean")));
  layer.vars[v + 1].assign(values(c.at("moving_variance")));
  const json& e = c.at("inference");
  const matrix x = device(c.at("x"));
  check_close(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), infer).local(), e.at("y"),
              name + " inference y");
  const matrix dy = device(c.at("dy"));
  check_close(tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, infer),
              e.at("dx"), name + " inference dx");
  // inference keeps the moving statistics
  check_close(layer.vars[v].value.local(), c.at("moving_mean"), name + " moving mean kept");
}

}  // namespace

TEST_CASE("conv2d layer: every Keras case, forward and gradients", "[convolution][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  std::size_t checked = 0;
  for (const json& c : g.at("conv2d").at("cases")) {
    const std::string n = c.at("name");
    if (n == "k3_s1_valid") check_conv<conv2d<4, 3>>(c);
    else if (n == "k3_s1_same_nobias")
      check_conv<conv2d<4, 3, {.padding = "same", .use_bias = false}>>(c);
    else if (n == "k3_s2_valid") check_conv<conv2d<4, 3, {.strides = 2}>>(c);
    else if (n == "k3_s2_same_h7" || n == "k3_s2_same_h8")
      check_conv<conv2d<4, 3, {.strides = 2, .padding = "same"}>>(c);
    else if (n == "k3_s1_same_relu")
      check_conv<conv2d<4, 3, {.padding = "same", .activation = "relu"}>>(c);
    else if (n == "k2_s1_valid") check_conv<conv2d<4, 2>>(c);
    else if (n == "k2_s1_same") check_conv<conv2d<4, 2, {.padding = "same"}>>(c);
    else if (n == "k2_s2_valid") check_conv<conv2d<4, 2, {.strides = 2, .use_bias = false}>>(c);
    else if (n == "k2_s2_same") check_conv<conv2d<4, 2, {.strides = 2, .padding = "same"}>>(c);
    else if (n == "k6_s2_valid_nobias")
      check_conv<conv2d<4, 6, {.strides = 2, .use_bias = false}>>(c);
    else if (n == "k6_s2_same_h8" || n == "k6_s2_same_h7")
      check_conv<conv2d<4, 6, {.strides = 2, .padding = "same"}>>(c);
    else if (n == "k6_s1_same")
      check_conv<conv2d<4, 6, {.padding = "same", .use_bias = false}>>(c);
    else if (n == "k2x3_s1x2_same_7x8")
      check_conv<conv2d<4, {2, 3}, {.strides = {1, 2}, .padding = "same"}>>(c);
    else
      FAIL("unexpected golden case " << n);
    ++checked;
  }
  CHECK(checked == 15);
}

TEST_CASE("pooling layers: max, average and global average pooling as Keras computes them",
          "[convolution][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  const json& x = g.at("pooling").at("x");
  std::size_t checked = 0;
  for (const json& c : g.at("pooling").at("cases")) {
    const std::string n = c.at("name");
    if (n == "pool2_s2_valid") {
      check_pool<max_pooling2d<2>>(x, c, c.at("max"), n + " max");
      check_pool<average_pooling2d<2>>(x, c, c.at("average"), n + " average");
    } else if (n == "pool3_s2_same") {
      check_pool<max_pooling2d<3, {.strides = 2, .padding = "same"}>>(x, c, c.at("max"), n);
      check_pool<average_pooling2d<3, {.strides = 2, .padding = "same"}>>(x, c, c.at("average"),
                                                                         n + " average");
    } else if (n == "pool2_s1_valid") {
      check_pool<max_pooling2d<2, {.strides = 1}>>(x, c, c.at("max"), n + " max");
      check_pool<average_pooling2d<2, {.strides = 1}>>(x, c, c.at("average"), n + " average");
    } else if (n == "pool2_s2_same") {
      check_pool<max_pooling2d<2, {.padding = "same"}>>(x, c, c.at("max"), n + " max");
      check_pool<average_pooling2d<2, {.padding = "same"}>>(x, c, c.at("average"),
                                                            n + " average");
    } else {
      FAIL("unexpected golden case " << n);
    }
    ++checked;
  }
  CHECK(checked == 4);
  const json& gap = g.at("global_average_pooling2d");
  check_pool<global_average_pooling2d<>>(gap.at("x"), gap, gap, "global_average_pooling2d");
}

TEST_CASE("batch_normalization layer: training, inference and the moving statistics as Keras",
          "[batch_normalization][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  std::size_t checked = 0;
  for (const json& c : g.at("batch_normalization").at("cases")) {
    const std::string n = c.at("name");
    const bool center = c.at("center"), scale = c.at("scale");
    if (center && scale) check_bn<batch_normalization<>>(c);
    else if (center) check_bn<batch_normalization<{.center = true, .scale = false}>>(c);
    else if (scale) check_bn<batch_normalization<{.center = false, .scale = true}>>(c);
    else check_bn<batch_normalization<{.center = false, .scale = false}>>(c);
    ++checked;
  }
  CHECK(checked == 5);
}

TEST_CASE("the seeds/002 CNN (without Dropout): three Adam steps and predictions as Keras",
          "[convolution][golden][model]") {
  const json m = tessel::testing::golden::load("cnn_step.json");
  using bn = batch_normalization<{.center = true, .scale = false}>;
  tessel::basic_sequential<B, tessel::one_device, input<28, 28, 1>, rescaling<1.0 / 255.0>,
                           conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
                           conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
                           conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>,
                           bn, relu<>, global_average_pooling2d<>,
                           dense<256, {.activation = "relu"}>, dense<10>>
      model;
  model.compile(tessel::optimizers::adam{.learning_rate = 1e-3},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<tessel::array<float>> w;
  for (const json& v : m.at("initial_weights")) w.push_back(tessel::testing::golden::to_array(v.at("value")));
  model.set_weights(w);
  // Keras's paths, in Keras's order
  std::vector<std::string> paths;
  for (const auto* v : model.variables()) paths.push_back(v->path);
  REQUIRE(paths.size() == m.at("initial_weights").size());
  for (std::size_t v = 0; v < paths.size(); ++v)
    CHECK(paths[v] == m.at("initial_weights")[v].at("path").get<std::string>());
  const tessel::array<float> x = tessel::testing::golden::to_array(m.at("x"));
  const auto labels = m.at("y").at("data").get<std::vector<std::int32_t>>();
  const tessel::array<std::int32_t> y({labels.size()}, labels);
  tessel::testing::golden::check_close(model.predict(x, 8, 0).values,
                                       values(m.at("initial_outputs_inference")),
                                       "initial outputs (inference)", 1e-5, 1e-6);
  for (const json& s : m.at("steps")) {
    const std::string step = "step " + std::to_string(s.at("step").get<int>());
    const tessel::logs l = model.train_on_batch(x, y);
    tessel::testing::golden::check_close({static_cast<float>(*tessel::find_log(l, "loss"))},
                                         {s.at("loss").get<float>()}, step + " loss");
    const auto now = model.get_weights();
    for (const json& ms : s.at("moving_statistics")) {
      const std::string path = ms.at("path");
      const auto at = std::find(paths.begin(), paths.end(), path) - paths.begin();
      REQUIRE(static_cast<std::size_t>(at) < paths.size());
      tessel::testing::golden::check_close(now[static_cast<std::size_t>(at)].values,
                                           values(ms.at("value")), step + " " + path, 1e-5, 1e-6);
    }
  }
  const auto now = model.get_weights();
  for (std::size_t v = 0; v < now.size(); ++v) {
    const json& f = m.at("final_weights")[v];
    const std::string path = f.at("path");
    if (path == "large_k/bias") {
      // Its gradient is about 1e-8 (a batch normalization follows and subtracts the batch
      // mean): Adam's steps make it noise of about 1e-5, in Keras and here alike.
      for (float b : now[v].values) CHECK(std::fabs(b) < 1e-4f);
      continue;
    }
    // Adam divides each gradient element by its own running size, so an element whose gradient
    // is a near-cancellation moves by up to the learning rate per step whatever its relative
    // error: the floor is 1e-3 of what 3 steps at 1e-3 can move a weight. tessel's own GEMM
    // kernels differ by over 1.2e-6 on large_k/kernel[6651] between AVX and AVX2+FMA code
    // (LIBXSMM_TARGET=snb and hsw): Keras's value lies under 0.65e-6 from the one, 1.8e-6 from
    // the other.
    tessel::testing::golden::check_close(now[v].values, values(f.at("value")), "final " + path,
                                         1e-5, 3e-6);
  }
  tessel::testing::golden::check_close(model.predict(x, 8, 0).values, values(m.at("predictions")),
                                       "predictions", 1e-4, 2e-6);
}

TEST_CASE("the seeds/002 loop as the seed runs it: value_and_grad in inference mode, as Keras",
          "[convolution][golden][model]") {
  // The seed's loss calls stateless_call without training=True: its three steps differentiate
  // the inference computation (batch normalization with moving statistics 0 and 1, never
  // updated; dropout off). value_and_grad(..., training = false) is that loop.
  const json m = tessel::testing::golden::load("cnn_step.json");
  const json& loop = m.at("seed_loop");
  using bn = batch_normalization<{.center = true, .scale = false}>;
  tessel::basic_sequential<B, tessel::one_device, input<28, 28, 1>, rescaling<1.0 / 255.0>,
                           conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
                           conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
                           conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>,
                           bn, relu<>, global_average_pooling2d<>,
                           dense<256, {.activation = "relu"}>, dropout<0.5>, dense<10>>
      model;
  model.compile(tessel::optimizers::adam{.learning_rate = 1e-3},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<tessel::array<float>> w;
  for (const json& v : m.at("initial_weights"))
    w.push_back(tessel::testing::golden::to_array(v.at("value")));
  model.set_weights(w);
  const tessel::array<float> x = tessel::testing::golden::to_array(m.at("x"));
  const auto labels = m.at("y").at("data").get<std::vector<std::int32_t>>();
  const tessel::array<std::int32_t> y({labels.size()}, labels);
  auto state = model.get_state_tree();
  const auto moving_before = state.non_trainable_variables;
  const auto expected_losses = loop.at("losses").get<std::vector<float>>();
  for (std::size_t s = 0; s < expected_losses.size(); ++s) {
    auto [loss, grads, non_trainable] = model.value_and_grad(
        state.trainable_variables, state.non_trainable_variables, x, y, /*training=*/false);
    tessel::testing::golden::check_close({static_cast<float>(loss)}, {expected_losses[s]},
                                         "seed loop step " + std::to_string(s) + " loss");
    auto [trainable, optimizer_variables] = model.get_optimizer().stateless_apply(
        state.optimizer_variables, grads, state.trainable_variables);
    state.trainable_variables = std::move(trainable);
    state.non_trainable_variables = std::move(non_trainable);
    state.optimizer_variables = std::move(optimizer_variables);
  }
  // The moving statistics and the random stream's counter are unchanged.
  REQUIRE(state.non_trainable_variables.size() == moving_before.size());
  for (std::size_t v = 0; v < moving_before.size(); ++v) {
    INFO(moving_before[v].path);
    CHECK(state.non_trainable_variables[v].numpy() == moving_before[v].numpy());
  }
  std::size_t compared = 0;
  for (const json& f : loop.at("final_trainable_weights")) {
    const std::string path = f.at("path");
    const auto it = std::find_if(state.trainable_variables.begin(), state.trainable_variables.end(),
                                 [&](const auto& v) { return v.path == path; });
    REQUIRE(it != state.trainable_variables.end());
    // An absolute floor of 1e-3 of the most three Adam steps move a weight (3 lr): a step is
    // lr m / (sqrt(v) + eps), so a weight whose gradient is near its rounding moves by an amount
    // the rounding decides (here the deepest kernel, by 1.8e-6 at most).
    tessel::testing::golden::check_close(it->numpy(), values(f.at("value")), "seed loop " + path,
                                         1e-5, 3e-6);
    ++compared;
  }
  CHECK(compared == 8);
  const auto out = model.stateless_call(state.trainable_variables, state.non_trainable_variables, x);
  tessel::testing::golden::check_close(host(out.y_pred.local()), values(loop.at("outputs_after_3")),
                                       "seed loop outputs after 3 steps", 1e-4, 2e-6);
}
