// Denormal floats are flushed to zero by default (as XLA does), in the main thread, in tessel's
// thread pool and in the BLAS's own threads, which were started before main: a GEMM whose
// products are denormal (1e-20 x 1e-20 = 1e-40, below float's smallest normal 1.2e-38) gives
// exactly zero with flushing on, in every block of the result whichever thread computed it, and
// a non-zero sum with it off.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <span>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using B = tessel::default_backend;

// The product of two n x n matrices of `value`, on the host.
std::vector<float> product_of(float value, std::size_t n) {
  const auto a = B::make_matrix("a", n, n);
  const auto c = B::make_zeros("c", n, n);
  B::fill(a, value);
  B::gemm(false, false, 1.0f, a, a, 0.0f, c);
  std::vector<float> out(n * n);
  B::download(c, std::span<float>(out));
  return out;
}

std::size_t nonzero(const std::vector<float>& v) {
  std::size_t n = 0;
  for (float f : v) n += f != 0.0f;
  return n;
}

// Sets an environment variable for one scope.
struct scoped_env {
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};
}  // namespace

TEST_CASE("denormals are flushed to zero by default, in the BLAS's threads too", "[denormals]") {
  // 512^3 multiply-adds: split over tessel's thread pool; 1024^3: OpenBLAS on its threads.
  for (const std::size_t n : {512, 1024}) {
    INFO(n << " x " << n << " x " << n);
    REQUIRE(B::flushes_denormals());
    CHECK(nonzero(product_of(1e-20f, n)) == 0);
    // Off: the denormal products add up to about 5e-38 in every element.
    REQUIRE(tessel::set_flush_denormal(false));
    CHECK_FALSE(B::flushes_denormals());
    CHECK(nonzero(product_of(1e-20f, n)) == n * n);
    // On again, for the rest of the tests.
    REQUIRE(tessel::set_flush_denormal(true));
    CHECK(nonzero(product_of(1e-20f, n)) == 0);
  }
  // Normal values are untouched.
  CHECK(product_of(0.5f, 4)[0] == 1.0f);
}

TEST_CASE("TESSEL_FLUSH_DENORMALS takes 0 or 1 and names itself otherwise", "[denormals]") {
  {
    scoped_env e("TESSEL_FLUSH_DENORMALS", "0");
    CHECK_FALSE(tessel::runtime::flush_denormals_from_environment());
  }
  {
    scoped_env e("TESSEL_FLUSH_DENORMALS", "1");
    CHECK(tessel::runtime::flush_denormals_from_environment());
  }
  scoped_env e("TESSEL_FLUSH_DENORMALS", "yes");
  CHECK_THROWS_WITH(tessel::runtime::flush_denormals_from_environment(),
                    Catch::Contains("TESSEL_FLUSH_DENORMALS='yes' is neither 0 nor 1"));
}
