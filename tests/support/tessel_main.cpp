// The unit tests' main: Catch2's session (catch_session.cpp, compiled once) inside tessel's
// runtime guard (the backend is up for every test case).
#include <tessel/runtime/initialize.hpp>

namespace tessel::testing {
int run_catch_session(int argc, char** argv);
}  // namespace tessel::testing

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  return tessel::testing::run_catch_session(argc, argv);
}
