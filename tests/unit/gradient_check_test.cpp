// Gradient checks: every layer's backward pass, every loss's gradient and a whole model's
// gradients agree with central finite differences of the forward pass.
//
// Everything runs in float32, so a central difference is worth about 1e-2 relative at best: the
// check is |analytic - numeric| <= 1e-2 * max(|analytic|, |numeric|, floor). The scalar probed is
// L = sum(y * r) for a fixed random r (so that backward gets dy = r), accumulated in double from
// the float outputs; the step actually taken is float(x + h) - float(x - h), not 2h. Around a
// relu kink a difference means nothing: an element whose perturbation flips any relu output
// between zero and positive is skipped (and the cases keep such elements few). Max pooling is
// probed on inputs whose windows have no near-ties, so a step never changes a window's maximum.
#include <catch2/catch.hpp>

#include "gradient_check_helpers.hpp"

TEST_CASE("gradient check: dense with each activation, with and without bias", "[gradient]") {
  using namespace tessel::layers;
  check_dense<dense<4>>("dense linear", false, 2);
  check_dense<dense<4, {.use_bias = false}>>("dense linear no bias", false, 1);
  check_dense<dense<4, {.activation = "relu"}>>("dense relu", true, 2);
  // (seeds 1, 2 put pre-activations within h of the kink: 9 and 7 of the 40 elements skipped)
  check_dense<dense<4, {.activation = "relu", .use_bias = false}>>("dense relu no bias", true, 1,
                                                                   3);
  check_dense<dense<4, {.activation = "sigmoid"}>>("dense sigmoid", false, 2);
  check_dense<dense<4, {.activation = "sigmoid", .use_bias = false}>>("dense sigmoid no bias",
                                                                      false, 1);
  check_dense<dense<4, {.activation = "tanh"}>>("dense tanh", false, 2);
  check_dense<dense<4, {.activation = "tanh", .use_bias = false}>>("dense tanh no bias", false, 1);
  check_dense<dense<4, {.activation = "softmax"}>>("dense softmax", false, 2);
  check_dense<dense<4, {.activation = "softmax", .use_bias = false}>>("dense softmax no bias",
                                                                      false, 1);
}

TEST_CASE("gradient check: dense gradients do not depend on need_dx", "[gradient]") {
  // The first layer of a model is asked for no input gradient; its variable gradients must be
  // the same as when it is.
  using L = tessel::layers::dense<3, {.activation = "tanh"}>;
  lone_layer<L> layer(tessel::shape_value{4}, tessel::shape_value{3});
  rng gen(5);
  const std::vector<float> x = gen.values(12, -1, 1), r = gen.values(9, -1, 1);
  const matrix xm = device(x, 3, 4);
  const tessel::pass_context ctx{.training = true};
  std::vector<std::vector<float>> with_dx, without_dx;
  tessel::call_forward(layer.rt, tessel::batch_block<B>(xm), ctx);
  tessel::call_backward(layer.rt, tessel::batch_block<B>(xm), device(r, 3, 3), true, ctx);
  for (const auto& v : layer.vars) with_dx.push_back(host(v.gradient));
  tessel::call_forward(layer.rt, tessel::batch_block<B>(xm), ctx);
  tessel::call_backward(layer.rt, tessel::batch_block<B>(xm), device(r, 3, 3), false, ctx);
  for (const auto& v : layer.vars) without_dx.push_back(host(v.gradient));
  CHECK(with_dx == without_dx);
}

TEST_CASE("gradient check: relu, softmax and activation layers", "[gradient]") {
  using namespace tessel::layers;
  const tessel::shape_value s{6};
  // relu<>: elements within h of zero straddle the kink and are skipped.
  check_layer<relu<>>("ReLU", {.in = s, .out = s, .relu = true});
  check_layer<softmax<>>("Softmax", {.in = s, .out = s});
  check_layer<activation<"sigmoid">>("Activation(sigmoid)", {.in = s, .out = s});
  check_layer<activation<"tanh">>("Activation(tanh)", {.in = s, .out = s});
  check_layer<activation<"relu">>("Activation(relu)", {.in = s, .out = s, .relu = true});
  check_layer<activation<"softmax">>("Activation(softmax)", {.in = s, .out = s});
  check_layer<activation<"linear">>("Activation(linear)", {.in = s, .out = s});
  // Softmax over wide rows with inputs up to 8 in size (exp of the shifted values).
  check_layer<softmax<>>("Softmax wide", {.in = tessel::shape_value{17},
                                          .out = tessel::shape_value{17},
                                          .rows = 3,
                                          .seed = 9,
                                          .x_range = 8.0f});
}

TEST_CASE("gradient check: rescaling and flatten", "[gradient]") {
  using namespace tessel::layers;
  const tessel::shape_value s{5};
  check_layer<rescaling<0.5, {.offset = 0.25}>>("Rescaling(0.5, 0.25)", {.in = s, .out = s});
  check_layer<rescaling<-3.0>>("Rescaling(-3)", {.in = s, .out = s});
  check_layer<flatten<>>("Flatten",
                         {.in = tessel::shape_value{3, 4}, .out = tessel::shape_value{12}});
  // The forward values of rescaling: y = 0.5 x + 0.25.
  lone_layer<rescaling<0.5, {.offset = 0.25}>> layer(s, s);
  const matrix x = device({-1, 0, 1, 2, 4}, 1, 5);
  CHECK(host(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), {}).local()) ==
        std::vector<float>{-0.25f, 0.25f, 0.75f, 1.25f, 2.25f});
}

TEST_CASE("gradient check: dropout in training (the mask is fixed by stream and step)",
          "[gradient]") {
  using namespace tessel::layers;
  using L = dropout<0.3>;
  const tessel::shape_value s{10};
  const tessel::pass_context ctx{.training = true, .step = 3, .seed = 0};
  // Forward twice with one context gives one mask, so finite differences of the forward are
  // those of a fixed linear map: backward must be exactly that map's transpose.
  const tally t = check_layer<L>("Dropout(0.3)", {.in = s, .out = s, .rows = 6, .ctx = ctx});
  CHECK(t.checked == 60);

  lone_layer<L> layer(s, s);
  const std::size_t rows = 64, cols = 10;
  rng gen(3);
  std::vector<float> xv = gen.values(rows * cols, 0.5f, 1.5f);  // never zero
  const matrix x = device(xv, rows, cols);
  const std::vector<float> y1 =
      host(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), ctx).local());
  const std::vector<float> y2 =
      host(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), ctx).local());
  CHECK(y1 == y2);
  std::size_t dropped = 0;
  for (std::size_t k = 0; k < y1.size(); ++k) {
    if (y1[k] == 0.0f) {
      ++dropped;
    } else {
      INFO("element " << k);
      CHECK(y1[k] == Approx(xv[k] / 0.7f).epsilon(1e-6));
    }
  }
  // 640 draws with p = 0.3: 192 expected, standard deviation 11.6.
  CHECK(dropped > 140);
  CHECK(dropped < 245);

  // Backward applies the same mask to dy: zero exactly where the forward dropped.
  const matrix dy = device(std::vector<float>(rows * cols, 1.0f), rows, cols);
  const std::vector<float> dx =
      host(tessel::call_backward(layer.rt, tessel::batch_block<B>(x), dy, true, ctx));
  for (std::size_t k = 0; k < dx.size(); ++k) {
    INFO("element " << k);
    CHECK((dx[k] == 0.0f) == (y1[k] == 0.0f));
  }

  // Another step draws another mask; inference is the identity.
  tessel::pass_context next = ctx;
  next.step = 4;
  CHECK(host(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), next).local()) != y1);
  CHECK(host(tessel::call_forward(layer.rt, tessel::batch_block<B>(x), {.training = false})
                 .local()) == xv);

  // A block of rows [16, 32) of the batch of 64 draws those rows of the whole batch's mask.
  const matrix part =
      device(std::vector<float>(xv.begin() + 16 * cols, xv.begin() + 32 * cols), 16, cols);
  CHECK(host(tessel::call_forward(layer.rt, tessel::batch_block<B>(part, 16, rows), ctx).local()) ==
        std::vector<float>(y1.begin() + 16 * cols, y1.begin() + 32 * cols));
}

namespace {

// A layer on (height, width, channels) samples: d/dx and d/d(each trainable variable), every
// element probed (none skipped unless `relu`).
template <class L>
tally check_spatial(const std::string& what, const tessel::shape_value& in, layer_case c = {}) {
  c.in = in;
  c.out = L::output_shape(in);
  const tally t = check_layer<L>(what, c);
  const lone_layer<L> layer(c.in, c.out);
  std::size_t trainable = 0;
  for (const auto& v : layer.vars) trainable += v.trainable ? v.size() : 0;
  CHECK(t.checked + t.skipped == c.rows * in.elements() + trainable);
  if (!c.relu) CHECK(t.skipped == 0);
  return t;
}

}  // namespace

TEST_CASE("gradient check: conv2d, padding valid and same, strides 1 and 2, even kernels",
          "[gradient][convolution]") {
  using namespace tessel::layers;
  const layer_case two{.rows = 2};
  check_spatial<conv2d<3, 3>>("conv2d k3 s1 valid", {6, 6, 2}, two);
  check_spatial<conv2d<3, 3, {.padding = "same", .use_bias = false}>>("conv2d k3 s1 same no bias",
                                                                      {5, 5, 2}, two);
  check_spatial<conv2d<3, 3, {.strides = 2}>>("conv2d k3 s2 valid", {7, 7, 2}, two);
  // Stride 2 over an even size: "same" pads one row and column after, none before.
  check_spatial<conv2d<3, 3, {.strides = 2, .padding = "same"}>>("conv2d k3 s2 same 8x8", {8, 8, 2},
                                                                 two);
  check_spatial<conv2d<3, 3, {.strides = 2, .padding = "same"}>>("conv2d k3 s2 same 7x7", {7, 7, 2},
                                                                 two);
  // Even kernels (seeds/002's kernel 6 stride 2): "same" pads one more after than before where
  // the total is odd (kernel 2 on 5, kernel 6 stride 2 on 9: 2 before, 3 after; on 10: 2 and 2).
  check_spatial<conv2d<3, 2, {.padding = "same"}>>("conv2d k2 s1 same", {5, 5, 2}, two);
  check_spatial<conv2d<3, 6, {.strides = 2, .padding = "same"}>>("conv2d k6 s2 same 10x10",
                                                                 {10, 10, 2}, two);
  check_spatial<conv2d<3, 6, {.strides = 2, .padding = "same"}>>("conv2d k6 s2 same 9x9", {9, 9, 2},
                                                                 two);
  check_spatial<conv2d<3, 6, {.strides = 2, .use_bias = false}>>("conv2d k6 s2 valid no bias",
                                                                 {10, 10, 2}, two);
}

TEST_CASE("gradient check: conv2d with a rectangular kernel and strides, and with relu",
          "[gradient][convolution]") {
  using namespace tessel::layers;
  check_spatial<conv2d<3, {2, 3}, {.strides = {1, 2}, .padding = "same"}>>("conv2d k2x3 s1x2 same",
                                                                           {7, 8, 2}, {.rows = 2});
  check_spatial<conv2d<3, {3, 2}, {.strides = {2, 1}, .use_bias = false}>>(
      "conv2d k3x2 s2x1 valid no bias", {7, 6, 2}, {.rows = 2});
  // Elements whose step flips an output between zero and positive are skipped (seed 1 puts 29
  // of the 157 within h of the kink, seed 2 puts 8).
  check_spatial<conv2d<3, 3, {.padding = "same", .activation = "relu"}>>(
      "conv2d k3 s1 same relu", {5, 5, 2}, {.rows = 2, .relu = true, .seed = 2});
  check_spatial<conv2d<3, 3, {.strides = 2, .activation = "relu", .use_bias = false}>>(
      "conv2d k3 s2 valid relu no bias", {7, 7, 2}, {.rows = 2, .relu = true});
}

TEST_CASE("gradient check: max, average and global average pooling", "[gradient][convolution]") {
  using namespace tessel::layers;
  // Max pooling is differentiable where a window's maximum is unique: distinct inputs.
  const layer_case distinct{.rows = 2, .distinct = true};
  check_spatial<max_pooling2d<2>>("max_pooling2d 2 valid", {6, 6, 2}, distinct);
  check_spatial<max_pooling2d<2, {.strides = 1}>>("max_pooling2d 2 s1 (overlapping)", {5, 5, 2},
                                                  distinct);
  check_spatial<max_pooling2d<3, {.strides = 2, .padding = "same"}>>("max_pooling2d 3 s2 same",
                                                                     {7, 7, 2}, distinct);
  check_spatial<max_pooling2d<2, {.padding = "same"}>>("max_pooling2d 2 same 5x5", {5, 5, 2},
                                                       distinct);
  const layer_case two{.rows = 2};
  check_spatial<average_pooling2d<2>>("average_pooling2d 2 valid", {6, 6, 2}, two);
  check_spatial<average_pooling2d<2, {.strides = 1}>>("average_pooling2d 2 s1", {5, 5, 2}, two);
  // "same": windows at the border cover fewer values and divide by that count.
  check_spatial<average_pooling2d<3, {.strides = 2, .padding = "same"}>>(
      "average_pooling2d 3 s2 same 8x8", {8, 8, 2}, two);
  check_spatial<average_pooling2d<2, {.padding = "same"}>>("average_pooling2d 2 same 5x5",
                                                           {5, 5, 2}, two);
  check_spatial<global_average_pooling2d<>>("global_average_pooling2d", {4, 5, 3}, two);
}

TEST_CASE("gradient check: batch_normalization in training, with center and scale on and off",
          "[gradient][batch_normalization]") {
  // In training each channel is normalized with the batch's statistics, so every output depends
  // on every row of its channel: L's finite differences see the mean's and the variance's
  // gradient terms. The moving statistics have none (not trainable) and are not probed.
  using namespace tessel::layers;
  const layer_case images{.rows = 3, .seed = 7};
  check_spatial<batch_normalization<>>("batch_normalization", {3, 4, 2}, images);
  check_spatial<batch_normalization<{.center = true, .scale = false}>>(
      "batch_normalization center only", {3, 4, 2}, images);
  check_spatial<batch_normalization<{.center = false, .scale = true}>>(
      "batch_normalization scale only", {3, 4, 2}, images);
  check_spatial<batch_normalization<{.center = false, .scale = false}>>(
      "batch_normalization neither", {3, 4, 2}, images);
  // After a dense layer: few rows per channel, where the statistics' terms weigh the most.
  check_layer<batch_normalization<>>(
      "batch_normalization on features",
      {.in = tessel::shape_value{5}, .out = tessel::shape_value{5}, .rows = 4, .seed = 8});
  check_layer<batch_normalization<{.epsilon = 1e-5}>>(
      "batch_normalization epsilon 1e-5",
      {.in = tessel::shape_value{3}, .out = tessel::shape_value{3}, .rows = 6, .seed = 9});
}

namespace {

// d(mean loss)/d(pred) from loss_and_gradient against finite differences of its value.
void check_loss(const std::string& what, const tessel::loss_spec& loss, std::vector<float> pred,
                std::size_t rows, std::size_t cols, const std::vector<std::int32_t>& labels,
                const std::vector<float>& targets, float h) {
  B::index_vector label_view;
  if (!labels.empty()) {
    label_view = B::make_indices("labels", labels.size());
    B::upload(std::span<const std::int32_t>(labels), label_view);
  }
  matrix target_view;
  if (!targets.empty()) target_view = device(targets, rows, cols);
  matrix grad = B::make_matrix("grad", rows, cols);
  const float scale = 1.0f / static_cast<float>(rows);
  auto value = [&]() {
    const matrix p = device(pred, rows, cols);
    return tessel::loss_and_gradient<B>(loss, p, label_view, target_view, grad, scale) /
           static_cast<double>(rows);
  };
  const double v0 = value();
  CHECK(std::isfinite(v0));
  const std::vector<float> analytic = host(grad);
  tally t;
  check_elements(
      what, pred, analytic, value, [] { return false; }, h, 1e-2, t);
  CHECK(t.checked == rows * cols);
}

}  // namespace

TEST_CASE("gradient check: losses", "[gradient]") {
  const std::size_t rows = 3, cols = 4;
  rng gen(17);
  const std::vector<std::int32_t> labels{2, 0, 3};
  std::vector<float> one_hot(rows * cols, 0.0f);
  for (std::size_t i = 0; i < rows; ++i)
    one_hot[i * cols + static_cast<std::size_t>(labels[i])] = 1;
  // Soft targets that do not sum to one: the from-logits gradient has a sum(targets) term.
  const std::vector<float> soft = gen.values(rows * cols, 0.0f, 0.6f);
  const std::vector<float> logits = gen.values(rows * cols, -2.0f, 2.0f);
  // Probabilities well inside (eps, 1 - eps), rows not normalised: Keras divides by the sum.
  const std::vector<float> probs = gen.values(rows * cols, 0.2f, 0.9f);

  check_loss("mean_squared_error", tessel::losses::mean_squared_error{},
             gen.values(rows * cols, -1.5f, 1.5f), rows, cols, {}, soft, 1e-2f);
  check_loss("sparse_categorical_crossentropy(from_logits)",
             tessel::losses::sparse_categorical_crossentropy{.from_logits = true}, logits, rows,
             cols, labels, {}, 1e-2f);
  check_loss("sparse_categorical_crossentropy(probabilities)",
             tessel::losses::sparse_categorical_crossentropy{.from_logits = false}, probs, rows,
             cols, labels, {}, 1e-3f);
  check_loss("categorical_crossentropy(from_logits, one-hot)",
             tessel::losses::categorical_crossentropy{.from_logits = true}, logits, rows, cols, {},
             one_hot, 1e-2f);
  check_loss("categorical_crossentropy(from_logits, soft)",
             tessel::losses::categorical_crossentropy{.from_logits = true}, logits, rows, cols, {},
             soft, 1e-2f);
  check_loss("categorical_crossentropy(probabilities, one-hot)",
             tessel::losses::categorical_crossentropy{.from_logits = false}, probs, rows, cols, {},
             one_hot, 1e-3f);
  check_loss("categorical_crossentropy(probabilities, soft)",
             tessel::losses::categorical_crossentropy{.from_logits = false}, probs, rows, cols, {},
             soft, 1e-3f);
}
