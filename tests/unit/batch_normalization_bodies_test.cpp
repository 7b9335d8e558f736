// Batch normalization's bodies (backend/batch_normalization_bodies.hpp): the statistics in two
// passes, the normalization, and the input's gradient in training, against the definition in
// double precision and against central differences of L = sum(y * dy); the same statistics from
// partial sums over row blocks (the synchronized form data parallelism uses) as from all rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <random>
#include <tessel/backend/batch_normalization_bodies.hpp>
#include <vector>

namespace bn = tessel::backend::batch_normalization;

namespace {

constexpr std::size_t rows = 12, channels = 5;
constexpr float epsilon = 1e-3f;

std::vector<float> random_values(std::size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// L = sum(y * dy) in double for input x (training: the batch's statistics).
double loss(const std::vector<double>& x, const std::vector<float>& gamma,
            const std::vector<float>& beta, const std::vector<float>& dy) {
  double l = 0;
  for (std::size_t c = 0; c < channels; ++c) {
    double mean = 0, var = 0;
    for (std::size_t i = 0; i < rows; ++i) mean += x[i * channels + c];
    mean /= rows;
    for (std::size_t i = 0; i < rows; ++i) var += std::pow(x[i * channels + c] - mean, 2);
    var /= rows;
    for (std::size_t i = 0; i < rows; ++i)
      l += ((x[i * channels + c] - mean) / std::sqrt(var + epsilon) * gamma[c] + beta[c]) *
           dy[i * channels + c];
  }
  return l;
}

}  // namespace

TEST_CASE("batch_normalization: training forward and input gradient against the definition",
          "[batch_normalization]") {
  const auto x = random_values(rows * channels, 1, -2.0f, 3.0f);
  const auto dy = random_values(rows * channels, 2, -1.0f, 1.0f);
  const auto gamma = random_values(channels, 3, 0.5f, 1.5f);
  const auto beta = random_values(channels, 4, -0.5f, 0.5f);
  std::vector<float> y(x.size()), xhat(x.size()), dx(x.size());
  for (std::size_t c = 0; c < channels; ++c) {
    const auto mean = static_cast<float>(bn::column_sum(x.data(), rows, channels, c) / rows);
    const auto var = static_cast<float>(
        bn::column_squared_deviation(x.data(), rows, channels, c, mean) / rows);
    const bn::channel_map m = bn::make_map(mean, var, epsilon, gamma.data(), beta.data(), c);
    for (std::size_t i = 0; i < rows; ++i)
      y[i * channels + c] = bn::normalize(m, x[i * channels + c], xhat[i * channels + c]);
    double sum_dy = 0, sum_dy_xhat = 0;
    bn::gradient_sums(dy.data(), xhat.data(), rows, channels, c, sum_dy, sum_dy_xhat);
    for (std::size_t i = 0; i < rows; ++i)
      dx[i * channels + c] =
          bn::input_gradient(m, dy[i * channels + c], xhat[i * channels + c],
                             static_cast<float>(sum_dy / rows),
                             static_cast<float>(sum_dy_xhat / rows));
    // the forward: mean 0, variance var / (var + epsilon) after the map, in double
    double ym = 0;
    for (std::size_t i = 0; i < rows; ++i) ym += (y[i * channels + c] - beta[c]) / gamma[c];
    CHECK(ym / rows == Approx(0).margin(1e-5));
  }
  std::vector<double> xd(x.begin(), x.end());
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double h = 1e-4;
    auto up = xd, down = xd;
    up[k] += h;
    down[k] -= h;
    const double numeric = (loss(up, gamma, beta, dy) - loss(down, gamma, beta, dy)) / (2 * h);
    INFO("element " << k);
    CHECK(dx[k] == Approx(numeric).epsilon(1e-3).margin(1e-4));
  }
}

TEST_CASE("batch_normalization: the statistics from partial sums over row blocks are the batch's",
          "[batch_normalization]") {
  const auto x = random_values(rows * channels, 5, -2.0f, 3.0f);
  for (std::size_t c = 0; c < channels; ++c) {
    const double whole = bn::column_sum(x.data(), rows, channels, c);
    // 3 processes of 5, 5 and 2 rows: the sums add up (the all-reduce), then the second pass
    const double parts = bn::column_sum(x.data(), 5, channels, c) +
                         bn::column_sum(x.data() + 5 * channels, 5, channels, c) +
                         bn::column_sum(x.data() + 10 * channels, 2, channels, c);
    CHECK(parts == Approx(whole).epsilon(1e-12));
    const auto mean = static_cast<float>(whole / rows);
    const double dev = bn::column_squared_deviation(x.data(), rows, channels, c, mean);
    const double dev_parts =
        bn::column_squared_deviation(x.data(), 7, channels, c, mean) +
        bn::column_squared_deviation(x.data() + 7 * channels, 5, channels, c, mean);
    CHECK(dev_parts == Approx(dev).epsilon(1e-12));
  }
}

TEST_CASE("batch_normalization: the map, inference and the moving statistics as Keras forms them",
          "[batch_normalization]") {
  const float gamma[] = {2.0f}, beta[] = {0.5f};
  const bn::channel_map m = bn::make_map(1.0f, 3.0f, 1.0f, gamma, beta, 0);  // inv 1/2
  CHECK(m.inv == 0.5f);
  CHECK(m.a == 1.0f);
  CHECK(m.b == -0.5f);
  float xhat = 0;
  CHECK(bn::normalize(m, 3.0f, xhat) == 2.5f);
  CHECK(xhat == 1.0f);
  // no gamma or beta (scale=False, center=False)
  const bn::channel_map bare = bn::make_map(1.0f, 3.0f, 1.0f, nullptr, nullptr, 0);
  CHECK(bare.a == 0.5f);
  CHECK(bare.b == -0.5f);
  CHECK(bn::moving_update(0.0f, 1.0f, 0.99f, static_cast<float>(1.0 - 0.99)) == 0.01f);
  CHECK(bn::moving_update(1.0f, 1.0f, 0.99f, static_cast<float>(1.0 - 0.99)) == Approx(1.0f));
}
