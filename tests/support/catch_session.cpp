// Catch2's implementation and its session, compiled once for every Catch2 program of the tests
// (unit_tests, the sanitized bad_input_test, the GPU tests), at -O1 and without the sanitizers:
// Catch2's own code is the same in each, and it was the slowest file of the sanitized build.
// tessel_main.cpp runs the session inside tessel's runtime guard.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

namespace tessel::testing {
int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
}  // namespace tessel::testing
