// initialize: the RAII guard every tessel program opens first (`tessel::initialize guard(argc,
// argv);`). It starts the backend (Kokkos on the host) and stops it when the guard goes away.
#pragma once

#include "../backend/default.hpp"

namespace tessel {

class initialize {
 public:
  initialize() {
    int argc = 0;
    start(argc, nullptr);
  }
  initialize(int& argc, char** argv) { start(argc, argv); }
  initialize(const initialize&) = delete;
  initialize& operator=(const initialize&) = delete;
  ~initialize() {
    if (owner_) default_backend::finalize();
  }

 private:
  void start(int& argc, char** argv) {
    owner_ = !default_backend::is_initialized();
    default_backend::initialize(argc, argv);
  }
  bool owner_ = false;
};

}  // namespace tessel
