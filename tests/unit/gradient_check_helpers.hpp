// The helpers of the gradient checks (gradient_check_test.cpp, gradient_check_models_test.cpp):
// the fixed random source, the finite differences and the comparison.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tessel/tessel.hpp>
#include <utility>
#include <vector>

namespace {

using B = tessel::default_backend;
using matrix = B::matrix;

constexpr double rel_tolerance = 1e-2;

// A fixed pseudo-random source (the raw mt19937 output is specified by the standard, the
// <random> distributions are not).
class rng {
 public:
  explicit rng(std::uint32_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(gen_() >> 8) / 16777216.0);
  }
  std::vector<float> values(std::size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float& e : v) e = uniform(lo, hi);
    return v;
  }
  std::uint32_t below(std::uint32_t n) { return gen_() % n; }

 private:
  std::mt19937 gen_;
};

inline matrix device(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  REQUIRE(v.size() == rows * cols);
  matrix m = B::make_matrix("gradient_check", rows, cols);
  B::upload(v, m);
  return m;
}
inline std::vector<float> host(const matrix& m) {
  std::vector<float> out(B::rows(m) * B::cols(m));
  B::download(m, out);
  return out;
}
inline double weighted_sum(const std::vector<float>& y, const std::vector<float>& r) {
  REQUIRE(y.size() == r.size());
  double s = 0;
  for (std::size_t k = 0; k < y.size(); ++k) s += static_cast<double>(y[k]) * r[k];
  return s;
}
inline std::vector<bool> positive_pattern(const std::vector<float>& y) {
  std::vector<bool> p(y.size());
  for (std::size_t k = 0; k < y.size(); ++k) p[k] = y[k] > 0.0f;
  return p;
}

// Tally of one comparison run, so that a case can require that it checked enough elements.
struct tally {
  std::size_t checked = 0, skipped = 0;
  double worst = 0;  // largest |a - n| / max(|a|, |n|, floor)
};

// The central difference of f around values[k], for every k; f reads `values`. `kinked(k)` says
// whether the element straddles a relu kink (skipped). Compares with `analytic`.
inline void check_elements(const std::string& what, std::vector<float>& values,
                    const std::vector<float>& analytic, const std::function<double()>& f,
                    const std::function<bool()>& crossed_kink, float h, double floor, tally& t) {
  REQUIRE(values.size() == analytic.size());
  for (std::size_t k = 0; k < values.size(); ++k) {
    const float v0 = values[k];
    values[k] = v0 + h;
    const float up = values[k];
    const double f_up = f();
    const bool kink_up = crossed_kink();
    values[k] = v0 - h;
    const float down = values[k];
    const double f_down = f();
    const bool kink_down = crossed_kink();
    values[k] = v0;
    if (kink_up || kink_down) {
      ++t.skipped;
      continue;
    }
    const double numeric = (f_up - f_down) / (static_cast<double>(up) - static_cast<double>(down));
    const double a = analytic[k];
    const double scale = std::max({std::fabs(a), std::fabs(numeric), floor});
    const double err = std::fabs(a - numeric) / scale;
    t.worst = std::max(t.worst, err);
    ++t.checked;
    INFO(what << "[" << k << "]: analytic " << a << ", finite difference " << numeric
              << " (relative error " << err << ")");
    REQUIRE(err <= rel_tolerance);
  }
}

// One layer alone, as the model builds it: its variables and its runtime.
template <class L>
struct lone_layer {
  tessel::variable_store<B> vars;
  typename L::template runtime<B> rt;
  lone_layer(tessel::shape_value in, tessel::shape_value out)
      : rt(tessel::layer_info{"probe", in, out}, vars, 11) {}
};

struct layer_case {
  tessel::shape_value in{}, out{};  // check_spatial sets them from the layer
  std::size_t rows = 4;
  tessel::pass_context ctx{.training = true, .step = 0, .seed = 0};
  bool relu = false;  // skip elements whose perturbation flips a relu output
  float h = 1e-2f;
  std::uint32_t seed = 1;
  float x_range = 1.0f;  // x uniform in [-x_range, x_range]
  // x instead a shuffle of distinct values 4h apart: no two come within h of each other, so a
  // step never changes which element of a max pooling window is the largest.
  bool distinct = false;
};

// n distinct values `spacing` apart around zero, in a pseudo-random order (Fisher-Yates).
inline std::vector<float> shuffled_distinct(rng& gen, std::size_t n, float spacing) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k)
    v[k] = spacing * (static_cast<float>(k) - static_cast<float>(n) / 2.0f);
  for (std::size_t k = n; k > 1; --k)
    std::swap(v[k - 1], v[gen.below(static_cast<std::uint32_t>(k))]);
  return v;
}

// Checks d/dx and d/d(variable) of L = sum(forward(x) * r) for layer L. Returns the tally.
template <class L>
tally check_layer(const std::string& what, const layer_case& c) {
  lone_layer<L> layer(c.in, c.out);
  const std::size_t n_in = c.in.elements(), n_out = c.out.elements();
  rng gen(c.seed);
  std::vector<float> x = c.distinct ? shuffled_distinct(gen, c.rows * n_in, 4 * c.h)
                                    : gen.values(c.rows * n_in, -c.x_range, c.x_range);
  // Trainable variables get values of order one (a zero bias would hide a wrong bias gradient
  // less well). The others (batch normalization's moving statistics) keep theirs: they have no
  // gradient, and in training the output does not depend on them.
  std::vector<std::vector<float>> weights;
  for (auto& v : layer.vars) {
    if (!v.trainable) continue;
    weights.push_back(gen.values(v.size(), -1.0f, 1.0f));
    v.assign(weights.back());
  }
  const std::vector<float> r = gen.values(c.rows * n_out, -1.0f, 1.0f);

  // Forward on the current x and weights; keeps the outputs for the kink test.
  std::vector<float> last_y;
  auto objective = [&]() {
    const matrix xm = device(x, c.rows, n_in);
    last_y = host(tessel::call_forward(layer.rt, tessel::batch_block<B>(xm), c.ctx).local());
    return weighted_sum(last_y, r);
  };

  // Analytic: forward, then backward with dy = r (backward may overwrite dy: a fresh copy).
  objective();
  const std::vector<bool> base_pattern = positive_pattern(last_y);
  REQUIRE(last_y.size() == c.rows * n_out);
  const matrix xm = device(x, c.rows, n_in);
  const matrix y = tessel::call_forward(layer.rt, tessel::batch_block<B>(xm), c.ctx).local();
  REQUIRE(B::rows(y) == c.rows);
  REQUIRE(B::cols(y) == n_out);
  const matrix dy = device(r, c.rows, n_out);
  const matrix dxm = tessel::call_backward(layer.rt, tessel::batch_block<B>(xm), dy, true, c.ctx);
  REQUIRE(B::rows(dxm) == c.rows);
  REQUIRE(B::cols(dxm) == n_in);
  const std::vector<float> dx = host(dxm);
  std::vector<std::vector<float>> dvars;
  for (const auto& v : layer.vars)
    if (v.trainable) dvars.push_back(host(v.gradient));

  auto crossed_kink = [&]() { return c.relu && positive_pattern(last_y) != base_pattern; };
  if (c.relu) {  // both sides of the kink are exercised
    CHECK(std::count(base_pattern.begin(), base_pattern.end(), true) > 0);
    CHECK(std::count(base_pattern.begin(), base_pattern.end(), false) > 0);
  }
  tally t;
  check_elements(what + " dx", x, dx, objective, crossed_kink, c.h, 1e-2, t);
  std::size_t i = 0;
  for (auto& v : layer.vars) {
    if (!v.trainable) continue;
    std::vector<float>& w = weights[i];
    auto with_weights = [&]() {
      v.assign(w);
      return objective();
    };
    check_elements(what + " d(" + v.path + ")", w, dvars[i], with_weights, crossed_kink, c.h, 1e-2,
                   t);
    v.assign(w);
    ++i;
  }
  // A relu case must still check most elements.
  CHECK(t.skipped * 4 <= t.checked);
  return t;
}

template <class L>
void check_dense(const std::string& what, bool relu, std::size_t expected_variables,
                 std::uint32_t seed = 1) {
  layer_case c{
      .in = tessel::shape_value{5}, .out = tessel::shape_value{4}, .relu = relu, .seed = seed};
  const tally t = check_layer<L>(what, c);
  // x (4 x 5), kernel (5 x 4) and, with a bias, 4 more.
  CHECK(t.checked + t.skipped == 20 + 20 + (expected_variables == 2 ? 4 : 0));
  lone_layer<L> layer(c.in, c.out);
  CHECK(layer.vars.size() == expected_variables);
}

}  // namespace
