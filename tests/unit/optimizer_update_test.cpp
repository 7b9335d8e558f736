// The backend's optimizer updates over a list of variables (one job of the thread pool for all of
// them) against Keras 3's formulas written out element by element in double: tensors large enough
// to be shared out among the threads, small ones (biases) given whole to one thread, one too small
// for any split, and an empty one; every slot combination of SGD, Adam and RMSprop. The same
// update on one thread gives the same bits.
#include <catch2/catch.hpp>
#include <cmath>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using B = tessel::default_backend;
using tensors = tessel::backend::update_tensors<B::matrix>;

std::vector<float> values(std::size_t n, std::uint64_t key, float lo, float hi) {
  std::vector<float> v(n);
  tessel::random::stream s(key, 5);
  for (std::size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * s.uniform(i);
  return v;
}
B::matrix upload(const std::vector<float>& v) {
  const auto m = B::make_matrix("m", 1, v.size());
  B::upload(std::span<const float>(v), m);
  return m;
}
std::vector<float> download(const B::matrix& m) {
  std::vector<float> v(m.size());
  B::download(m, std::span<float>(v));
  return v;
}

// One variable on the host: value, gradient and three slots: a (a momentum, or RMSprop's
// velocity) and b (Adam's second moment) positive, c (RMSprop's average gradient) small enough
// that velocity - average^2 stays positive.
struct host_variable {
  std::vector<float> w, g, a, b, c;
  explicit host_variable(std::size_t n, std::uint64_t key)
      : w(values(n, key, -1, 1)), g(values(n, key + 1, -1, 1)), a(values(n, key + 2, 0.01f, 0.1f)),
        b(values(n, key + 3, 0.0f, 0.1f)), c(values(n, key + 4, -0.05f, 0.05f)) {}
};
// Sizes: shared out among the threads (and not a multiple of 16), a bias, tiny, empty.
const std::vector<std::size_t> sizes = {200704 + 5, 70000, 256, 10, 0, 65536};

// NaN-safe: a NaN makes the worst difference NaN, which fails the check.
void track(double& worst, float got, double want) {
  const double d = std::abs(static_cast<double>(got) - want) / (1e-2 + std::abs(want));
  if (!(d <= worst)) worst = d;
}

template <class Update, class Reference>
void check(const char* what, std::size_t slots, Update update, Reference reference) {
  std::vector<host_variable> vars;
  for (std::size_t i = 0; i < sizes.size(); ++i) vars.emplace_back(sizes[i], 10 * i + 1);
  std::vector<tensors> t;
  for (const auto& v : vars)
    t.push_back({upload(v.w), upload(v.g), slots > 0 ? upload(v.a) : B::matrix(),
                 slots > 1 ? upload(v.b) : B::matrix(), slots > 2 ? upload(v.c) : B::matrix()});
  update(std::span<const tensors>(t));
  double worst = 0;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const auto w = download(t[i].value);
    const auto a = slots > 0 ? download(t[i].slot_a) : std::vector<float>();
    const auto b = slots > 1 ? download(t[i].slot_b) : std::vector<float>();
    for (std::size_t k = 0; k < sizes[i]; ++k) {
      double w0 = vars[i].w[k], a0 = vars[i].a[k], b0 = vars[i].b[k], c0 = vars[i].c[k];
      reference(w0, vars[i].g[k], a0, b0, c0);
      track(worst, w[k], w0);
      if (slots > 0) track(worst, a[k], a0);
      if (slots > 1) track(worst, b[k], b0);
    }
  }
  INFO(what << ": worst relative difference " << worst);
  CHECK(worst < 1e-5);
}
}  // namespace

TEST_CASE("optimizer updates over a list of variables follow Keras's formulas", "[optimizer]") {
  const float lr = 0.01f, mom = 0.9f;
  check("sgd", 0, [&](auto u) { B::sgd_update(u, lr, 0.0f, false); },
        [&](double& w, double g, double&, double&, double&) { w -= lr * g; });
  check("sgd momentum", 1, [&](auto u) { B::sgd_update(u, lr, mom, false); },
        [&](double& w, double g, double& m, double&, double&) {
          m = mom * m - lr * g;
          w += m;
        });
  check("sgd nesterov", 1, [&](auto u) { B::sgd_update(u, lr, mom, true); },
        [&](double& w, double g, double& m, double&, double&) {
          m = mom * m - lr * g;
          w += mom * m - lr * g;
        });
  const float alpha = 0.003f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  check("adam", 2, [&](auto u) { B::adam_update(u, alpha, b1, b2, eps); },
        [&](double& w, double g, double& m, double& v, double&) {
          m += (g - m) * (1 - static_cast<double>(b1));
          v += (g * g - v) * (1 - static_cast<double>(b2));
          w -= alpha * m / (std::sqrt(v) + eps);
        });
  const float rho = 0.9f;
  for (const bool centered : {false, true})
    for (const float momentum : {0.0f, 0.5f}) {
      // slot_a: velocity, slot_b: momentum, slot_c: average gradient.
      const std::size_t slots = centered ? 3 : momentum > 0 ? 2 : 1;
      check(centered ? "rmsprop centered" : "rmsprop", slots,
            [&](auto u) { B::rmsprop_update(u, lr, rho, momentum, eps, centered); },
            [&](double& w, double g, double& vel, double& m, double& avg) {
              vel = rho * vel + (1 - static_cast<double>(rho)) * g * g;
              double denominator = vel + eps;
              if (centered) {
                avg = rho * avg + (1 - static_cast<double>(rho)) * g;
                denominator = vel - avg * avg + eps;
              }
              const double increment = lr * g / std::sqrt(denominator);
              if (momentum > 0) {
                m = momentum * m + increment;
                w -= m;
              } else {
                w -= increment;
              }
            });
    }
}

TEST_CASE("an optimizer update gives the same bits on one thread as on the pool",
          "[optimizer][pool]") {
  const std::size_t n = 300001;
  const host_variable v(n, 99);
  auto run = [&] {
    std::vector<tensors> t{{upload(v.w), upload(v.g), upload(v.a), upload(v.b), {}},
                           {upload(v.b), upload(v.a), upload(v.g), upload(v.b), {}}};
    B::adam_update(std::span<const tensors>(t), 0.001f, 0.9f, 0.999f, 1e-7f);
    return std::pair{download(t[0].value), download(t[1].slot_b)};
  };
  const auto pooled = run();
  REQUIRE(B::threads() >= 1);
  tessel::backend::host_detail::pool_slot() = std::make_unique<tessel::backend::thread_pool>(1);
  const auto single = run();
  tessel::backend::host_detail::pool_slot().reset();  // the next use makes the usual pool
  CHECK(pooled == single);
}
