// The unit tests' main: Catch2's session inside tessel's runtime guard (the backend is up for
// every test case).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <tessel/runtime/initialize.hpp>

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  return Catch::Session().run(argc, argv);
}
