// The environment variables tessel reads, parsed in one place (core/environment.hpp): each
// parser's good and bad values, and problems(), which initialize reports before anything runs
// (what a bad value does to a program, alone and under mpiexec: tests/mpi, mpi.bad_environment_*).
#include <catch2/catch.hpp>

#include "test_helpers.hpp"

#include <cstdlib>
#include <optional>
#include <string>

#include <tessel/core/environment.hpp>

namespace {
using Catch::Matchers::Contains;
using tessel::testing::message_of;
namespace env = tessel::environment;

// Sets a variable for the scope, then restores what was there.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};
}  // namespace

TEST_CASE("environment: each variable's values, and messages naming the variable and the value",
          "[environment]") {
  CHECK(env::parse_num_threads("1") == 1);
  CHECK(env::parse_num_threads("1024") == 1024);
  for (const char* bad : {"0", "-1", "1025", "abc", "", " 2", "2 ", "3.5", "99999999999999999999"}) {
    INFO(bad);
    CHECK_THAT(message_of([&] { env::parse_num_threads(bad); }),
               Contains("TESSEL_NUM_THREADS='" + std::string(bad) +
                        "' is not a number of threads; set it to an integer from 1 to 1024"));
  }
  CHECK(env::parse_flush_denormals("0") == false);
  CHECK(env::parse_flush_denormals("1") == true);
  CHECK_THAT(message_of([] { env::parse_flush_denormals("maybe"); }),
             Contains("TESSEL_FLUSH_DENORMALS='maybe' is neither 0 nor 1"));
  CHECK(env::parse_nccl("0") == false);
  CHECK(env::parse_nccl("1") == true);
  CHECK_THAT(message_of([] { env::parse_nccl("yes"); }),
             Contains("TESSEL_NCCL='yes' is neither 0 nor 1; set it to 0 to run the collectives "
                      "between GPUs through MPI on host copies"));
  CHECK(env::parse_ring("0") == false);
  CHECK(env::parse_ring("1") == true);
  CHECK_THAT(message_of([] { env::parse_ring("off"); }),
             Contains("TESSEL_RING='off' is neither 0 nor 1; set it to 0 to reduce through MPI's "
                      "own reduce-scatter and all-reduce"));
  CHECK(env::parse_collective_timeout("2.5") == 2.5);
}

TEST_CASE("environment: unset is nothing; problems() lists every bad value at once",
          "[environment]") {
  const scoped_env a("TESSEL_NUM_THREADS", nullptr), b("TESSEL_FLUSH_DENORMALS", nullptr),
      c("TESSEL_COLLECTIVE_TIMEOUT", nullptr), d("TESSEL_NCCL", nullptr),
      e("TESSEL_RING", nullptr);
  CHECK_FALSE(env::num_threads().has_value());
  CHECK_FALSE(env::flush_denormals().has_value());
  CHECK_FALSE(env::collective_timeout().has_value());
  CHECK_FALSE(env::nccl().has_value());
  CHECK_FALSE(env::ring().has_value());
  CHECK(env::problems().empty());
  {
    const scoped_env x("TESSEL_NUM_THREADS", "abc"), y("TESSEL_NCCL", "on"),
        z("TESSEL_RING", "2");
    const auto p = env::problems();
    REQUIRE(p.size() == 3);
    CHECK_THAT(p[0], Contains("TESSEL_NUM_THREADS='abc'"));
    CHECK_THAT(p[1], Contains("TESSEL_NCCL='on'"));
    CHECK_THAT(p[2], Contains("TESSEL_RING='2'"));
  }
  const scoped_env x("TESSEL_NUM_THREADS", "4");
  CHECK(env::num_threads() == 4u);
  CHECK(env::problems().empty());
}

TEST_CASE("environment: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are taken when they are a number",
          "[environment]") {
  const scoped_env a("OMP_NUM_THREADS", "4,2"), b("OPENBLAS_NUM_THREADS", "3");
  CHECK(env::blas_threads() == 3u);  // OpenMP's nested syntax is OpenMP's, not a count here
  const scoped_env c("OMP_NUM_THREADS", "5");
  CHECK(env::blas_threads() == 5u);
  const scoped_env d("OMP_NUM_THREADS", nullptr), e("OPENBLAS_NUM_THREADS", "x");
  CHECK_FALSE(env::blas_threads().has_value());
}
