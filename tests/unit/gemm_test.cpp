// The host backend's GEMM against a plain triple loop on every path it takes: one part on the
// caller (small), the rows split over the thread pool (libxsmm's kernels, or the BLAS on one
// thread for a shape libxsmm has no kernel for), and the BLAS on the pool's threads (big); with
// transposes, alpha, beta = 0 and 1, and views whose rows are wider than their columns. The pool
// runs every part of a job once, and TESSEL_NUM_THREADS names itself when it is not a number. The
// element-wise kernels split over the pool give the bits they give on one thread.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tessel/tessel.hpp>
#include <thread>
#include <vector>

namespace {
using B = tessel::default_backend;

// Row-major c = alpha op(a) op(b) + beta c, in double.
std::vector<float> reference(bool ta, bool tb, float alpha, const std::vector<float>& a,
                             const std::vector<float>& b, float beta, std::vector<float> c,
                             std::size_t m, std::size_t n, std::size_t k) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::size_t p = 0; p < k; ++p)
        s += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
             static_cast<double>(tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = static_cast<float>(alpha * s + beta * c[i * n + j]);
    }
  return c;
}

std::vector<float> values(std::size_t n, std::uint64_t key) {
  std::vector<float> v(n);
  tessel::random::stream s(key, 3);
  for (std::size_t i = 0; i < n; ++i) v[i] = s.uniform(i) - 0.5f;
  return v;
}

B::matrix upload(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  const auto m = B::make_matrix("m", rows, cols);
  B::upload(std::span<const float>(v), m);
  return m;
}

double worst(const B::matrix& c, const std::vector<float>& want) {
  std::vector<float> got(want.size());
  B::download(c, std::span<float>(got));
  double w = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    w = std::max(w, std::abs(static_cast<double>(got[i]) - want[i]) / (1.0 + std::abs(want[i])));
  return w;
}
}  // namespace

TEST_CASE("gemm equals a plain loop on every path: small, split over the pool, big",
          "[gemm]") {
  struct shape {
    std::size_t m, n, k;
  };
  // 8 x 16 x 8: one part. 32 x 256 x 784 and 784 x 256 x 32: split (kernels). With b
  // transposed, split by columns: 784 x 256 x 32 transposing b's rows, 32 x 256 x 256 and
  // 13 x 272 x 200 (rows and columns not multiples of the vector width) transposing a.
  // 520 x 1032 x 520: big.
  const std::vector<shape> shapes = {{8, 16, 8},     {32, 256, 784},  {784, 256, 32},
                                     {37, 70, 45},   {32, 256, 256},  {13, 272, 200},
                                     {520, 1032, 520}};
  std::uint64_t key = 1;
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, {1.0f, 1.0f}, {0.5f, 0.25f}}) {
        const auto a = values(s.m * s.k, key++), b = values(s.k * s.n, key++),
                   c0 = values(s.m * s.n, key++);
        const auto am = upload(a, ta ? s.k : s.m, ta ? s.m : s.k);
        const auto bm = upload(b, tb ? s.n : s.k, tb ? s.k : s.n);
        const auto cm = upload(c0, s.m, s.n);
        B::gemm(ta, tb, alpha, am, bm, beta, cm);
        const double w = worst(cm, reference(ta, tb, alpha, a, b, beta, c0, s.m, s.n, s.k));
        INFO(s.m << " x " << s.n << " x " << s.k << " ta " << ta << " tb " << tb << " alpha "
                 << alpha << " beta " << beta);
        CHECK(w < 1e-5);
      }
    }
}

TEST_CASE("gemm on row ranges of wider matrices (a leading dimension above the columns)",
          "[gemm]") {
  const std::size_t m = 64, n = 48, k = 40;
  const auto a = values(2 * m * k, 91), b = values(k * n, 92), c0 = values(2 * m * n, 93);
  const auto am = upload(a, 2 * m, k), bm = upload(b, k, n), cm = upload(c0, 2 * m, n);
  // The second half of the rows of a and c.
  B::gemm(false, false, 1.0f, B::row_range(am, m, 2 * m), bm, 0.0f, B::row_range(cm, m, 2 * m));
  const std::vector<float> a2(a.begin() + m * k, a.end());
  std::vector<float> want = c0;
  const auto half = reference(false, false, 1.0f, a2, b, 0.0f,
                              std::vector<float>(c0.begin() + m * n, c0.end()), m, n, k);
  std::copy(half.begin(), half.end(), want.begin() + m * n);
  CHECK(worst(cm, want) < 1e-5);  // the first half untouched
}

TEST_CASE("the thread pool runs every part of a job once, on its threads", "[gemm][pool]") {
  tessel::backend::thread_pool pool(3);
  REQUIRE(pool.size() == 3);
  for (int job = 0; job < 200; ++job) {
    std::vector<std::atomic<int>> ran(3);
    pool.run([&](std::size_t part, std::size_t parts) {
      REQUIRE(parts == 3);
      ran[part].fetch_add(1);
    });
    for (auto& r : ran) CHECK(r.load() == 1);
  }
  // More threads than cores: workers that do not get a core in time have their parts taken by
  // the threads that do, still each part once.
  tessel::backend::thread_pool crowded(4 * std::max(1u, std::thread::hardware_concurrency()));
  for (int job = 0; job < 2000; ++job) {
    std::vector<std::atomic<int>> ran(crowded.size());
    std::atomic<bool> parts_ok{true};
    crowded.run([&](std::size_t part, std::size_t parts) {
      if (parts != crowded.size()) parts_ok = false;
      ran[part].fetch_add(1);
    });
    CHECK(parts_ok);
    for (auto& r : ran) CHECK(r.load() == 1);
  }
  // A job's parts see the caller's floating-point mode (denormals flushed or not).
  std::vector<int> flushed(3, -1);
  tessel::set_flush_denormal(false);
  pool.run([&](std::size_t part, std::size_t) { flushed[part] = B::flushes_denormals(); });
  CHECK(flushed == std::vector<int>{0, 0, 0});
  tessel::set_flush_denormal(true);
  pool.run([&](std::size_t part, std::size_t) { flushed[part] = B::flushes_denormals(); });
  CHECK(flushed == std::vector<int>{1, 1, 1});
}

namespace {
std::vector<double> observed;  // microseconds, one per job seen by the observer
void observe_job(tessel::backend::thread_pool::clock::time_point begin,
                 tessel::backend::thread_pool::clock::time_point end) {
  observed.push_back(std::chrono::duration<double, std::micro>(end - begin).count());
}
}  // namespace

TEST_CASE("the thread pool's observer sees each job once, after all its parts",
          "[gemm][pool]") {
  using clock = tessel::backend::thread_pool::clock;
  for (const std::size_t threads : {1, 3}) {
    tessel::backend::thread_pool pool(threads);
    observed.clear();
    tessel::backend::thread_pool::observer() = observe_job;
    // Each part waits 2 ms: the job the observer is told of lasts at least that long.
    for (int job = 0; job < 3; ++job)
      pool.run([](std::size_t, std::size_t) {
        const auto until = clock::now() + std::chrono::milliseconds(2);
        while (clock::now() < until) std::this_thread::yield();
      });
    tessel::backend::thread_pool::observer() = nullptr;
    pool.run([](std::size_t, std::size_t) {});  // not observed
    REQUIRE(observed.size() == 3);
    for (const double us : observed) CHECK(us >= 2000.0);
  }
}

TEST_CASE("TESSEL_NUM_THREADS takes a positive number and names itself otherwise", "[pool]") {
  const char* old = std::getenv("TESSEL_NUM_THREADS");
  const std::string saved = old ? old : "";
  ::setenv("TESSEL_NUM_THREADS", "3", 1);
  CHECK(tessel::backend::host_detail::pool_threads() == 3);
  ::setenv("TESSEL_NUM_THREADS", "two", 1);
  CHECK_THROWS_WITH(tessel::backend::host_detail::pool_threads(),
                    Catch::Contains("TESSEL_NUM_THREADS='two' is not a number of threads"));
  if (old) ::setenv("TESSEL_NUM_THREADS", saved.c_str(), 1);
  else ::unsetenv("TESSEL_NUM_THREADS");
}

TEST_CASE("the fused dense epilogues equal the separate kernels", "[gemm]") {
  using tessel::activation_kind;
  struct shape {
    std::size_t m, n, k;
  };
  // One part, split over the pool, and big (the BLAS on the pool's threads, then the epilogue).
  for (const shape s : {shape{8, 16, 8}, shape{64, 256, 784}, shape{520, 1032, 520}})
    for (const auto a : {activation_kind::linear, activation_kind::relu, activation_kind::sigmoid,
                         activation_kind::tanh, activation_kind::softmax})
      for (const bool with_bias : {false, true}) {
        INFO(s.m << " x " << s.n << " x " << s.k << " activation "
                 << static_cast<int>(a) << " bias " << with_bias);
        const auto x = upload(values(s.m * s.k, 11), s.m, s.k);
        const auto w = upload(values(s.k * s.n, 12), s.k, s.n);
        const auto bias = upload(values(s.n, 13), 1, s.n);
        const auto fused = B::make_zeros("fused", s.m, s.n), apart = B::make_zeros("apart", s.m, s.n);
        B::gemm_bias_activation(x, w, with_bias ? bias : B::matrix(), a, fused);
        if (with_bias) B::broadcast_rows(bias, apart);
        B::gemm(false, false, 1.0f, x, w, with_bias ? 1.0f : 0.0f, apart);
        B::activation_forward(a, apart);
        std::vector<float> want(s.m * s.n);
        B::download(apart, std::span<float>(want));
        CHECK(worst(fused, want) < 1e-5);
        // Backward: dz = dy * f'(z) and the column sums of dz, in one pass.
        const auto dy = upload(values(s.m * s.n, 14), s.m, s.n);
        const auto dz = B::make_zeros("dz", s.m, s.n), dz_apart = B::make_zeros("dz2", s.m, s.n);
        const auto db = B::make_zeros("db", 1, s.n), db_apart = B::make_zeros("db2", 1, s.n);
        B::activation_backward_bias(a, apart, dy, dz, with_bias ? db : B::matrix());
        B::activation_backward(a, apart, dy, dz_apart);
        std::vector<float> want_dz(s.m * s.n), want_db(s.n);
        B::download(dz_apart, std::span<float>(want_dz));
        CHECK(worst(dz, want_dz) == 0.0);
        if (with_bias) {
          B::column_sums(dz_apart, db_apart);
          B::download(db_apart, std::span<float>(want_db));
          CHECK(worst(db, want_db) == 0.0);
        }
      }
}

TEST_CASE("element-wise kernels give the same bits on the pool as on one thread", "[pool]") {
  using tessel::activation_kind;
  // 520 x 1032: above the size at which the kernels split their rows or columns over the pool.
  const std::size_t m = 520, n = 1032;
  const auto y = values(m * n, 21), dy = values(m * n, 22), bias = values(n, 23);
  auto run = [&] {
    std::vector<std::vector<float>> out;
    auto keep = [&](const B::matrix& r) {
      out.emplace_back(r.size());
      B::download(r, std::span<float>(out.back()));
    };
    const auto ym = upload(y, m, n), dym = upload(dy, m, n);
    for (const auto a : {activation_kind::linear, activation_kind::relu, activation_kind::sigmoid,
                         activation_kind::tanh, activation_kind::softmax})
      for (const bool with_bias : {false, true}) {
        const auto dz = B::make_zeros("dz", m, n), db = B::make_zeros("db", 1, n);
        B::activation_backward_bias(a, ym, dym, dz, with_bias ? db : B::matrix());
        keep(dz);
        keep(db);
        const auto f = upload(y, m, n);
        B::activation_forward(a, f);
        keep(f);
      }
    const auto sums = B::make_zeros("sums", 1, n), rows = B::make_zeros("rows", m, n),
               scaled = B::make_zeros("scaled", m, n), dropped = B::make_zeros("dropped", m, n);
    B::column_sums(dym, sums);
    keep(sums);
    B::broadcast_rows(upload(bias, 1, n), rows);
    keep(rows);
    B::scale_shift(ym, scaled, 0.5f, -0.25f);
    keep(scaled);
    B::dropout(ym, dropped, tessel::random::stream(3, 4), 0.3f, 7, 5, n + 9);
    keep(dropped);
    return out;
  };
  const auto pooled = run();
  tessel::backend::host_detail::pool_slot() = std::make_unique<tessel::backend::thread_pool>(1);
  const auto single = run();
  tessel::backend::host_detail::pool_slot().reset();  // the next use makes the usual pool
  REQUIRE(pooled.size() == single.size());
  for (std::size_t i = 0; i < pooled.size(); ++i) {
    INFO("result " << i);
    CHECK(pooled[i] == single[i]);
  }
  // And one of them against the formula: relu's bias gradient (result 10: relu, with a bias, db).
  std::vector<double> want_db(n, 0.0);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) want_db[j] += y[i * n + j] > 0 ? dy[i * n + j] : 0.0;
  double w = 0;
  for (std::size_t j = 0; j < n; ++j)
    w = std::max(w, std::abs(pooled[10][j] - want_db[j]) / (1.0 + std::abs(want_db[j])));
  CHECK(w < 1e-5);
}
