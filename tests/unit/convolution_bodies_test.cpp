// The convolution and pooling bodies (backend/convolution_bodies.hpp) against the definitions:
// Keras's output sizes and "same" padding, im2col + GEMM against a direct convolution, col2im
// against the scatter of the convolution's transpose, and pooling and its gradients against
// loops over an explicitly padded input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <tessel/backend/convolution_bodies.hpp>
#include <vector>

namespace cv = tessel::backend::convolution;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Input element (b, y, x, c) with y, x in the padded frame; 0 (or `pad`) outside the input.
float at(const cv::geometry& g, const std::vector<float>& x, std::size_t b, long y, long xx,
         std::size_t c, float pad = 0.0f) {
  const long iy = y - static_cast<long>(g.h.before), ix = xx - static_cast<long>(g.w.before);
  if (iy < 0 || ix < 0 || iy >= static_cast<long>(g.h.in) || ix >= static_cast<long>(g.w.in))
    return pad;
  return x[((b * g.h.in + static_cast<std::size_t>(iy)) * g.w.in + static_cast<std::size_t>(ix)) *
               g.channels + c];
}

struct conv_case {
  std::size_t n, h, w, c, kh, kw, sh, sw, filters;
  bool same;
};

void check_convolution(const conv_case& k) {
  const cv::geometry g = cv::make_geometry(k.n, k.h, k.w, k.c, k.kh, k.kw, k.sh, k.sw, k.same);
  const auto x = random_values(g.in_size(), 1);
  const auto kernel = random_values(g.patch() * k.filters, 2);
  const std::size_t rows = g.out_rows(), patch = g.patch();
  // im2col (by rows and by elements, which must agree), then the GEMM in double
  std::vector<float> cols(rows * patch), by_value(rows * patch);
  for (std::size_t r = 0; r < rows; ++r) cv::im2col_row(g, x.data(), r, cols.data() + r * patch);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t q = 0; q < patch; ++q) by_value[r * patch + q] = cv::im2col_value(g, x.data(), r, q);
  REQUIRE(cols == by_value);
  for (std::size_t b = 0; b < k.n; ++b)
    for (std::size_t oy = 0; oy < g.h.out; ++oy)
      for (std::size_t ox = 0; ox < g.w.out; ++ox)
        for (std::size_t f = 0; f < k.filters; ++f) {
          double direct = 0, gemm = 0;
          const std::size_t r = (b * g.h.out + oy) * g.w.out + ox;
          for (std::size_t ky = 0; ky < k.kh; ++ky)
            for (std::size_t kx = 0; kx < k.kw; ++kx)
              for (std::size_t c = 0; c < k.c; ++c) {
                const std::size_t q = (ky * k.kw + kx) * k.c + c;
                direct += double(at(g, x, b, long(oy * k.sh + ky), long(ox * k.sw + kx), c)) *
                          kernel[q * k.filters + f];
                gemm += double(cols[r * patch + q]) * kernel[q * k.filters + f];
              }
          REQUIRE(gemm == Approx(direct).margin(1e-6));
        }
  // col2im: the gather of dcols against the scatter that the transpose of im2col does
  const auto dcols = random_values(rows * patch, 3);
  std::vector<double> scattered(g.in_size(), 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t ox = r % g.w.out, oy = (r / g.w.out) % g.h.out, b = r / (g.w.out * g.h.out);
    for (std::size_t ky = 0; ky < k.kh; ++ky)
      for (std::size_t kx = 0; kx < k.kw; ++kx)
        for (std::size_t c = 0; c < k.c; ++c) {
          const long iy = long(oy * k.sh + ky) - long(g.h.before);
          const long ix = long(ox * k.sw + kx) - long(g.w.before);
          if (iy < 0 || ix < 0 || iy >= long(k.h) || ix >= long(k.w)) continue;
          scattered[((b * k.h + std::size_t(iy)) * k.w + std::size_t(ix)) * k.c + c] +=
              dcols[r * patch + (ky * k.kw + kx) * k.c + c];
        }
  }
  for (std::size_t i = 0; i < g.in_size(); ++i)
    REQUIRE(cv::col2im_value(g, dcols.data(), patch, i) == Approx(scattered[i]).margin(1e-5));
}

}  // namespace

TEST_CASE("convolution: output sizes and padding as Keras computes them", "[convolution]") {
  // valid: (in - k) / s + 1
  auto v = cv::make_window(28, 6, 2, false);
  CHECK(v.out == 12);
  CHECK(v.before == 0);
  CHECK(cv::make_window(5, 6, 1, false).out == 0);
  // same: ceil(in / s), padding (out - 1) s + k - in, the odd one after
  auto s = cv::make_window(28, 6, 2, true);  // seeds/002's third convolution's shape
  CHECK(s.out == 14);
  CHECK(s.before == 2);
  s = cv::make_window(12, 6, 2, true);
  CHECK(s.out == 6);
  CHECK(s.before == 2);
  s = cv::make_window(7, 2, 1, true);  // total 1: none before, one after
  CHECK(s.out == 7);
  CHECK(s.before == 0);
  s = cv::make_window(8, 3, 2, true);  // total 1
  CHECK(s.out == 4);
  CHECK(s.before == 0);
  s = cv::make_window(28, 3, 1, true);
  CHECK(s.out == 28);
  CHECK(s.before == 1);
  s = cv::make_window(5, 1, 3, true);  // no padding needed
  CHECK(s.out == 2);
  CHECK(s.before == 0);
}

TEST_CASE("convolution: im2col + GEMM equals a direct convolution, col2im its transpose",
          "[convolution]") {
  const conv_case cases[] = {
      {2, 7, 7, 3, 3, 3, 1, 1, 4, false}, {2, 7, 7, 3, 3, 3, 1, 1, 4, true},
      {2, 8, 8, 3, 3, 3, 2, 2, 4, true},  {2, 8, 8, 3, 2, 2, 2, 2, 4, false},
      {2, 7, 7, 2, 2, 2, 1, 1, 3, true},  {1, 14, 14, 2, 6, 6, 2, 2, 3, false},
      {1, 14, 14, 2, 6, 6, 2, 2, 3, true}, {2, 7, 9, 3, 2, 3, 1, 2, 4, true},
      {2, 7, 9, 3, 2, 3, 1, 2, 4, false}, {1, 5, 5, 1, 5, 5, 1, 1, 2, false},
  };
  for (const auto& k : cases) {
    INFO("input " << k.h << "x" << k.w << "x" << k.c << ", kernel " << k.kh << "x" << k.kw
                  << ", strides " << k.sh << "x" << k.sw << (k.same ? ", same" : ", valid"));
    check_convolution(k);
  }
}

TEST_CASE("convolution: max and average pooling and their gradients", "[convolution]") {
  struct pool_case {
    std::size_t h, w, size, stride;
    bool same;
  };
  const pool_case cases[] = {{6, 6, 2, 2, false}, {7, 7, 3, 2, true}, {5, 6, 2, 1, false},
                             {7, 5, 2, 2, true}};
  for (const auto& k : cases) {
    INFO("pool " << k.size << " stride " << k.stride << " on " << k.h << "x" << k.w
                 << (k.same ? ", same" : ", valid"));
    const cv::geometry g = cv::make_geometry(2, k.h, k.w, 3, k.size, k.size, k.stride, k.stride,
                                             k.same);
    const auto x = random_values(g.in_size(), 4);  // no ties
    const std::size_t outs = g.out_rows() * g.channels;
    const auto dy = random_values(outs, 5);
    std::vector<std::size_t> from(outs);
    std::vector<double> dmax(g.in_size(), 0.0), davg(g.in_size(), 0.0);
    const float lowest = -std::numeric_limits<float>::infinity();
    for (std::size_t o = 0; o < outs; ++o) {
      const std::size_t c = o % 3, ox = (o / 3) % g.w.out, oy = (o / (3 * g.w.out)) % g.h.out;
      const std::size_t b = o / (3 * g.w.out * g.h.out);
      float best = lowest;
      double sum = 0;
      long arg = -1;
      std::size_t count = 0;
      for (std::size_t ky = 0; ky < k.size; ++ky)
        for (std::size_t kx = 0; kx < k.size; ++kx) {
          const long y = long(oy * k.stride + ky), xx = long(ox * k.stride + kx);
          const float v = at(g, x, b, y, xx, c, lowest);
          if (v == lowest) continue;  // padding
          ++count;
          sum += v;
          if (v > best) {
            best = v;
            arg = long(((b * k.h + std::size_t(y - long(g.h.before))) * k.w +
                        std::size_t(xx - long(g.w.before))) * 3 + c);
          }
        }
      CHECK(cv::max_pool_value(g, x.data(), o, from[o]) == best);
      CHECK(from[o] == std::size_t(arg));
      CHECK(cv::average_pool_value(g, x.data(), o) == Approx(sum / double(count)).margin(1e-6));
      dmax[std::size_t(arg)] += dy[o];
      for (std::size_t ky = 0; ky < k.size; ++ky)
        for (std::size_t kx = 0; kx < k.size; ++kx) {
          const long y = long(oy * k.stride + ky) - long(g.h.before);
          const long xx = long(ox * k.stride + kx) - long(g.w.before);
          if (y < 0 || xx < 0 || y >= long(k.h) || xx >= long(k.w)) continue;
          davg[((b * k.h + std::size_t(y)) * k.w + std::size_t(xx)) * 3 + c] +=
              double(dy[o]) / double(count);
        }
    }
    for (std::size_t i = 0; i < g.in_size(); ++i) {
      CHECK(cv::max_pool_gradient(g, x.data(), dy.data(), i) == Approx(dmax[i]).margin(1e-6));
      CHECK(cv::average_pool_gradient(g, dy.data(), i) == Approx(davg[i]).margin(1e-6));
    }
  }
}

TEST_CASE("convolution: max pooling passes NaN, as jax's max does", "[convolution]") {
  const cv::geometry g = cv::make_geometry(1, 2, 2, 1, 2, 2, 2, 2, false);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {1.0f, nan, 3.0f, 2.0f};
  std::size_t from = 9;
  CHECK(std::isnan(cv::max_pool_value(g, x.data(), 0, from)));
  CHECK(from == 1);
}
