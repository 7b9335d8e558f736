// Keras parity of the convolution, pooling and batch normalization bodies
// (backend/convolution_bodies.hpp, backend/batch_normalization_bodies.hpp), run here as plain
// loops with float sums as a GEMM runs them: every case of tests/golden/convolution.json (Keras
// 3, JAX backend) — conv2d forward and the gradients of its input, kernel and bias; batch
// normalization in training and inference, and its moving statistics after 1 and 3 calls; max
// and average pooling and their gradients; global average pooling.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <tessel/backend/batch_normalization_bodies.hpp>
#include <tessel/backend/convolution_bodies.hpp>
#include <vector>

#include "../support/golden.hpp"

namespace {

namespace cv = tessel::backend::convolution;
namespace bn = tessel::backend::batch_normalization;
namespace kb = tessel::backend::kernel_bodies;
using tessel::testing::golden::json;
using tessel::testing::golden::shape_of;
using tessel::testing::golden::values;

// Tolerance: relative 1e-5 of |expected| + 0.1 max|expected| (golden.hpp's), and an absolute
// floor of 1e-5 of the array's largest value: a value that nearly cancels differs by its sums'
// order alone.
void check_close(const std::vector<float>& actual, const json& expected, const std::string& what) {
  const std::vector<float> e = values(expected);
  double scale = 0;
  for (float v : e) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  tessel::testing::golden::check_close(actual, e, what, 1e-5, 1e-5 * scale);
}

// c (m x n) = a (m x k, or k x m if ta) @ b (k x n, or n x k if tb), float sums in k order.
std::vector<float> matmul(const std::vector<float>& a, const std::vector<float>& b,
                          std::size_t m, std::size_t k, std::size_t n, bool ta, bool tb) {
  std::vector<float> c(m * n);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float s = 0;
      for (std::size_t q = 0; q < k; ++q)
        s += (ta ? a[q * m + i] : a[i * k + q]) * (tb ? b[j * k + q] : b[q * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

cv::geometry geometry_of(const json& c, const std::vector<std::size_t>& xs, const char* window) {
  const auto k = c.at(window).get<std::vector<std::size_t>>();
  const auto s = c.at("strides").get<std::vector<std::size_t>>();
  return cv::make_geometry(xs[0], xs[1], xs[2], xs[3], k[0], k[1], s[0], s[1],
                           c.at("padding") == "same");
}

}  // namespace

TEST_CASE("convolution golden: conv2d forward and gradients as Keras computes them",
          "[convolution][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  const std::size_t filters = g.at("conv2d").at("filters");
  for (const json& c : g.at("conv2d").at("cases")) {
    const std::string name = c.at("name");
    INFO(name);
    const auto x = values(c.at("x")), kernel = values(c.at("kernel")), dy = values(c.at("dy"));
    const cv::geometry geo = geometry_of(c, shape_of(c.at("x")), "kernel_size");
    const auto pads = c.at("pads_hw").get<std::vector<std::vector<std::size_t>>>();
    if (c.at("padding") == "same") {
      CHECK(geo.h.before == pads[0][0]);
      CHECK(geo.w.before == pads[1][0]);
    }
    REQUIRE(geo.out_rows() * filters == dy.size());
    const std::size_t rows = geo.out_rows(), patch = geo.patch();
    std::vector<float> cols(rows * patch);
    for (std::size_t r = 0; r < rows; ++r) cv::im2col_row(geo, x.data(), r, cols.data() + r * patch);
    std::vector<float> y = matmul(cols, kernel, rows, patch, filters, false, false);
    const bool bias = c.at("use_bias");
    const bool relu = c.at("activation") == "relu";
    const std::vector<float> b = bias ? values(c.at("bias")) : std::vector<float>(filters, 0.0f);
    for (std::size_t i = 0; i < y.size(); ++i) {
      y[i] += b[i % filters];
      if (relu) y[i] = kb::relu(y[i]);
    }
    check_close(y, c.at("y"), name + " y");
    std::vector<float> dz(dy.size());
    for (std::size_t i = 0; i < dz.size(); ++i) dz[i] = relu ? kb::relu_gradient(y[i], dy[i]) : dy[i];
    check_close(matmul(cols, dz, patch, rows, filters, true, false), c.at("dkernel"),
                name + " dkernel");
    if (bias) {
      std::vector<float> db(filters, 0.0f);
      for (std::size_t i = 0; i < dz.size(); ++i) db[i % filters] += dz[i];
      check_close(db, c.at("dbias"), name + " dbias");
    }
    const std::vector<float> dcols = matmul(dz, kernel, rows, filters, patch, false, true);
    std::vector<float> dx(geo.in_size());
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = cv::col2im_value(geo, dcols.data(), patch, i);
    check_close(dx, c.at("dx"), name + " dx");
  }
}

TEST_CASE("convolution golden: max and average pooling, global average pooling",
          "[convolution][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  const auto x = values(g.at("pooling").at("x"));
  for (const json& c : g.at("pooling").at("cases")) {
    const std::string name = c.at("name");
    INFO(name);
    const cv::geometry geo = geometry_of(c, shape_of(g.at("pooling").at("x")), "pool_size");
    const auto dy = values(c.at("dy"));
    REQUIRE(geo.out_rows() * geo.channels == dy.size());
    std::vector<float> ymax(dy.size()), yavg(dy.size());
    std::vector<std::size_t> from(dy.size());
    for (std::size_t o = 0; o < dy.size(); ++o) {
      ymax[o] = cv::max_pool_value(geo, x.data(), o, from[o]);
      yavg[o] = cv::average_pool_value(geo, x.data(), o);
    }
    check_close(ymax, c.at("max").at("y"), name + " max y");
    check_close(yavg, c.at("average").at("y"), name + " average y");
    std::vector<float> dmax(x.size()), davg(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      dmax[i] = cv::max_pool_gradient(geo, x.data(), dy.data(), i);
      davg[i] = cv::average_pool_gradient(geo, dy.data(), i);
    }
    check_close(dmax, c.at("max").at("dx"), name + " max dx");
    check_close(davg, c.at("average").at("dx"), name + " average dx");
  }
  // Global average pooling: a pool over the whole image.
  const json& gap = g.at("global_average_pooling2d");
  const auto xs = shape_of(gap.at("x"));
  const cv::geometry geo = cv::make_geometry(xs[0], xs[1], xs[2], xs[3], xs[1], xs[2], 1, 1, false);
  const auto gx = values(gap.at("x")), gdy = values(gap.at("dy"));
  std::vector<float> y(xs[0] * xs[3]), dx(gx.size());
  for (std::size_t o = 0; o < y.size(); ++o) y[o] = cv::average_pool_value(geo, gx.data(), o);
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = cv::average_pool_gradient(geo, gdy.data(), i);
  check_close(y, gap.at("y"), "global_average_pooling2d y");
  check_close(dx, gap.at("dx"), "global_average_pooling2d dx");
}

namespace {
// One batch normalization call on an M x C view of x: y, x-hat, the statistics used.
struct bn_pass {
  std::vector<float> y, xhat, mean, var;
  std::vector<bn::channel_map> maps;
};
bn_pass normalize(const std::vector<float>& x, std::size_t channels, const float* gamma,
                  const float* beta, float epsilon, const float* moving_mean,
                  const float* moving_var) {
  const std::size_t rows = x.size() / channels;
  bn_pass p{std::vector<float>(x.size()), std::vector<float>(x.size()), {}, {}, {}};
  for (std::size_t c = 0; c < channels; ++c) {
    float mean = 0, var = 0;
    if (moving_mean != nullptr) {
      mean = moving_mean[c];
      var = moving_var[c];
    } else {
      mean = static_cast<float>(bn::column_sum(x.data(), rows, channels, c) / double(rows));
      var = static_cast<float>(bn::column_squared_deviation(x.data(), rows, channels, c, mean) /
                               double(rows));
    }
    p.mean.push_back(mean);
    p.var.push_back(var);
    p.maps.push_back(bn::make_map(mean, var, epsilon, gamma, beta, c));
    for (std::size_t i = 0; i < rows; ++i)
      p.y[i * channels + c] = bn::normalize(p.maps[c], x[i * channels + c], p.xhat[i * channels + c]);
  }
  return p;
}
}  // namespace

TEST_CASE("convolution golden: batch normalization in training and inference",
          "[batch_normalization][golden]") {
  const json g = tessel::testing::golden::load("convolution.json");
  for (const json& c : g.at("batch_normalization").at("cases")) {
    const std::string name = c.at("name");
    INFO(name);
    const auto x = values(c.at("x")), dy = values(c.at("dy"));
    const std::size_t channels = shape_of(c.at("x")).back(), rows = x.size() / channels;
    const bool center = c.at("center"), scale = c.at("scale");
    const auto gamma = scale ? values(c.at("gamma")) : std::vector<float>{};
    const auto beta = center ? values(c.at("beta")) : std::vector<float>{};
    const auto epsilon = c.at("epsilon").get<float>();
    const double momentum_d = c.at("momentum").get<double>();
    const auto momentum = static_cast<float>(momentum_d);
    const auto one_minus = static_cast<float>(1.0 - momentum_d);
    const float* gp = scale ? gamma.data() : nullptr;
    const float* bp = center ? beta.data() : nullptr;
    for (const bool training : {true, false}) {
      const json& e = c.at(training ? "training" : "inference");
      const std::string mode = name + (training ? " training" : " inference");
      const auto mm = values(c.at("moving_mean")), mv = values(c.at("moving_variance"));
      const bn_pass p = normalize(x, channels, gp, bp, epsilon, training ? nullptr : mm.data(),
                                  training ? nullptr : mv.data());
      check_close(p.y, e.at("y"), mode + " y");
      std::vector<float> dx(x.size()), dgamma(channels), dbeta(channels);
      for (std::size_t ch = 0; ch < channels; ++ch) {
        double sum_dy = 0, sum_dy_xhat = 0;
        bn::gradient_sums(dy.data(), p.xhat.data(), rows, channels, ch, sum_dy, sum_dy_xhat);
        dgamma[ch] = static_cast<float>(sum_dy_xhat);
        dbeta[ch] = static_cast<float>(sum_dy);
        for (std::size_t i = 0; i < rows; ++i) {
          const std::size_t k = i * channels + ch;
          dx[k] = training ? bn::input_gradient(p.maps[ch], dy[k], p.xhat[k],
                                                static_cast<float>(sum_dy / double(rows)),
                                                static_cast<float>(sum_dy_xhat / double(rows)))
                           : p.maps[ch].a * dy[k];
        }
      }
      check_close(dx, e.at("dx"), mode + " dx");
      if (scale) check_close(dgamma, e.at("dgamma"), mode + " dgamma");
      if (center) check_close(dbeta, e.at("dbeta"), mode + " dbeta");
      if (!training) continue;
      // The moving statistics after this call, and after two more on other batches.
      std::vector<float> mean = mm, var = mv;
      std::vector<std::vector<float>> batches{x};
      for (const json& b : c.at("x_batches_2_3")) batches.push_back(values(b));
      for (std::size_t call = 0; call < batches.size(); ++call) {
        const bn_pass q = normalize(batches[call], channels, gp, bp, epsilon, nullptr, nullptr);
        for (std::size_t ch = 0; ch < channels; ++ch) {
          mean[ch] = bn::moving_update(mean[ch], q.mean[ch], momentum, one_minus);
          var[ch] = bn::moving_update(var[ch], q.var[ch], momentum, one_minus);
        }
        if (call == 0) {
          check_close(mean, e.at("moving_mean_after_1"), mode + " moving_mean after 1");
          check_close(var, e.at("moving_variance_after_1"), mode + " moving_variance after 1");
        }
      }
      check_close(mean, e.at("moving_mean_after_3"), mode + " moving_mean after 3");
      check_close(var, e.at("moving_variance_after_3"), mode + " moving_variance after 3");
    }
  }
}
