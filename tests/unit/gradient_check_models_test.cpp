// Gradient checks of whole models against central finite differences, as gradient_check_test.cpp
// checks each layer (its tolerance and probing).
#include <catch2/catch.hpp>

#include "gradient_check_helpers.hpp"

namespace {

// Every trainable variable's gradient from compute_loss_and_gradients against finite differences
// of the loss it returns, with the weights perturbed through variable::assign. `crossed_kink`
// (called after each perturbed evaluation) says whether the step moved across a relu kink or a
// max pooling tie: that element is skipped.
template <class Model, class Y>
void check_model_gradients(
    Model& model, const tessel::array<float>& x, const tessel::array<Y>& y, float h,
    const std::function<bool()>& crossed_kink = [] { return false; }) {
  const std::uint64_t step = model.training_step();  // replay one step's dropout masks
  model.compute_loss_and_gradients(x, y);
  std::vector<std::vector<float>> analytic;
  for (auto* v : model.trainable_variables()) analytic.push_back(host(v->gradient));
  auto loss = [&]() {
    model.set_training_step(step);
    return model.compute_loss_and_gradients(x, y);
  };
  std::size_t i = 0, trainable = 0;
  tally t;
  for (auto* v : model.trainable_variables()) {
    std::vector<float> w = v->numpy();
    auto with_weights = [&]() {
      v->assign(w);
      return loss();
    };
    check_elements("d(loss)/d(" + v->path + ")", w, analytic[i], with_weights, crossed_kink, h,
                   1e-2, t);
    v->assign(w);
    trainable += v->size();
    ++i;
  }
  CHECK(t.checked + t.skipped == trainable);
  CHECK(t.skipped * 10 <= t.checked);
}

}  // namespace

TEST_CASE("gradient check: whole model, dense relu -> tanh -> logits, sparse crossentropy",
          "[gradient]") {
  using namespace tessel::layers;
  tessel::sequential<input<6>, dense<5, {.activation = "relu"}>, dense<4, {.activation = "tanh"}>,
                     dense<3>>
      model;
  model.compile(tessel::optimizers::sgd{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  constexpr std::size_t rows = 8;
  constexpr float h = 1e-2f;
  // Inputs whose first-layer pre-activations are all at least 3h from the relu kink: a step of
  // h in a kernel entry moves them by at most h |x| <= h, in a bias entry by h.
  const std::vector<float> kernel = model.get_variable("dense/kernel").numpy();
  const std::vector<float> bias = model.get_variable("dense/bias").numpy();
  rng gen(23);
  std::vector<float> xv;
  for (int attempt = 0;; ++attempt) {
    REQUIRE(attempt < 10000);
    xv = gen.values(rows * 6, -1.0f, 1.0f);
    double closest = 1e9;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        double z = bias[j];
        for (std::size_t k = 0; k < 6; ++k)
          z += static_cast<double>(xv[i * 6 + k]) * kernel[k * 5 + j];
        closest = std::min(closest, std::fabs(z));
      }
    if (closest > 3 * h) break;
  }
  std::vector<std::int32_t> labels(rows);
  for (auto& l : labels) l = static_cast<std::int32_t>(gen.below(3));
  check_model_gradients(model, tessel::array<float>({rows, 6}, xv),
                        tessel::array<std::int32_t>({rows}, labels), h);
}

TEST_CASE("gradient check: whole model through flatten, sigmoid, dropout and softmax",
          "[gradient]") {
  // Probabilities out of a softmax layer, categorical crossentropy on them, and a dropout layer
  // in between: every evaluation replays the same training step, so the mask is the same.
  using namespace tessel::layers;
  tessel::sequential<input<2, 3>, flatten<>, dense<4, {.activation = "sigmoid"}>, dropout<0.25>,
                     dense<3, {.activation = "softmax"}>>
      model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::categorical_crossentropy{.from_logits = false});
  rng gen(29);
  constexpr std::size_t rows = 5;
  std::vector<float> targets(rows * 3, 0.0f);
  for (std::size_t i = 0; i < rows; ++i) targets[i * 3 + gen.below(3)] = 1.0f;
  check_model_gradients(model, tessel::array<float>({rows, 2, 3}, gen.values(rows * 6, -2, 2)),
                        tessel::array<float>({rows, 3}, targets), 1e-2f);
}

TEST_CASE("gradient check: whole model with stateless layers before the first dense layer",
          "[gradient]") {
  // No gradient flows into the layers before the first dense layer; the model must not run
  // their backward on the input gradient the dense layer does not compute. A softmax layer
  // after the logits, and sparse crossentropy on its probabilities.
  using namespace tessel::layers;
  tessel::sequential<input<2, 2>, flatten<>, activation<"tanh">, rescaling<2.0>,
                     dense<4, {.activation = "sigmoid"}>, dense<3>, softmax<>>
      model;
  model.compile(tessel::optimizers::sgd{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = false});
  rng gen(31);
  constexpr std::size_t rows = 6;
  std::vector<std::int32_t> labels(rows);
  for (auto& l : labels) l = static_cast<std::int32_t>(gen.below(3));
  check_model_gradients(model, tessel::array<float>({rows, 2, 2}, gen.values(rows * 4, -2, 2)),
                        tessel::array<std::int32_t>({rows}, labels), 1e-2f);
}

TEST_CASE("gradient check: whole model, conv2d -> batch_normalization -> relu -> pooling -> dense",
          "[gradient][convolution]") {
  // seeds/002's chain in small: the relu follows batch normalization, whose batch statistics
  // move every pre-activation when any kernel entry moves. Those pre-activations are computed
  // again beside the model by lone copies of the first two layers (with the model's weights): a
  // step that flips one of their signs, or changes a max pooling window's largest element, is
  // skipped, and the inputs are drawn so that no pre-activation lies within the largest step's
  // reach of zero or of its window's runner-up.
  using namespace tessel::layers;
  using conv = conv2d<2, 3, {.padding = "same", .use_bias = false}>;
  using bn = batch_normalization<>;
  tessel::sequential<input<6, 6, 1>, conv, bn, relu<>, max_pooling2d<2>, global_average_pooling2d<>,
                     dense<3>>
      model;
  model.compile(tessel::optimizers::sgd{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  constexpr std::size_t rows = 4;
  constexpr float h = 5e-3f;
  rng gen(37);
  // gamma and beta away from their initial ones and zeros.
  model.get_variable("batch_normalization/gamma").assign(gen.values(2, 0.5f, 1.5f));
  model.get_variable("batch_normalization/beta").assign(gen.values(2, -0.5f, 0.5f));

  const tessel::shape_value image{6, 6, 1}, maps{6, 6, 2};
  lone_layer<conv> conv_copy(image, maps);
  lone_layer<bn> bn_copy(maps, maps);
  const tessel::pass_context train{.training = true};
  std::vector<float> xv;
  // The pre-activations for the model's current weights.
  auto pre_activations = [&]() {
    conv_copy.vars[0].assign(model.get_variable("conv2d/kernel").numpy());
    bn_copy.vars[0].assign(model.get_variable("batch_normalization/gamma").numpy());
    bn_copy.vars[1].assign(model.get_variable("batch_normalization/beta").numpy());
    const matrix x = device(xv, rows, image.elements());
    const auto& z = tessel::call_forward(conv_copy.rt, tessel::batch_block<B>(x), train);
    return host(tessel::call_forward(bn_copy.rt, z, train).local());
  };
  // Each pre-activation's sign, then each 2x2 window's largest relu output (the first of ties,
  // so a window of zeros is stable while its signs are); and the smallest margin to a change.
  auto pattern = [&](const std::vector<float>& z, double* margin) {
    std::vector<std::size_t> p;
    double m = 1e9;
    for (float v : z) {
      p.push_back(v > 0.0f ? 1 : 0);
      m = std::min(m, std::fabs(static_cast<double>(v)));
    }
    for (std::size_t b = 0; b < rows; ++b)
      for (std::size_t oy = 0; oy < 3; ++oy)
        for (std::size_t ox = 0; ox < 3; ++ox)
          for (std::size_t c = 0; c < 2; ++c) {
            std::vector<std::pair<float, std::size_t>> w;
            for (std::size_t ky = 0; ky < 2; ++ky)
              for (std::size_t kx = 0; kx < 2; ++kx) {
                const std::size_t at = ((b * 6 + 2 * oy + ky) * 6 + 2 * ox + kx) * 2 + c;
                w.emplace_back(std::max(z[at], 0.0f), at);
              }
            std::stable_sort(w.begin(), w.end(),
                             [](const auto& l, const auto& r) { return l.first > r.first; });
            p.push_back(w[0].second);
            if (w[1].first > 0.0f) m = std::min(m, static_cast<double>(w[0].first - w[1].first));
          }
    if (margin != nullptr) *margin = m;
    return p;
  };
  // A kernel step of h moves a conv output by at most h (|x| <= 1), a pre-activation by about
  // gamma h (1 + |z|) / sigma; beta's by h. Inputs with every margin above 4h, and the
  // detection below for what the estimate misses.
  double margin = 0;
  for (int attempt = 0;; ++attempt) {
    REQUIRE(attempt < 20000);
    xv = gen.values(rows * image.elements(), -1.0f, 1.0f);
    pattern(pre_activations(), &margin);
    if (margin > 4 * h) break;
  }
  const std::vector<std::size_t> base = pattern(pre_activations(), nullptr);
  std::vector<std::int32_t> labels(rows);
  for (auto& l : labels) l = static_cast<std::int32_t>(gen.below(3));
  check_model_gradients(model, tessel::array<float>({rows, 6, 6, 1}, xv),
                        tessel::array<std::int32_t>({rows}, labels), h,
                        [&] { return pattern(pre_activations(), nullptr) != base; });
}
