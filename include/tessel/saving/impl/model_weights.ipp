// The definitions of saving/model_weights.hpp's non-template functions, included by it under
// TESSEL_DEFINITIONS alone (core/compilation.hpp): in every translation unit with headers only, in
// src/tessel.cpp alone with tessel::tessel, so that a change here rebuilds the library and not
// the programs that include model_weights.hpp.
namespace tessel::saving::detail {

TESSEL_INLINE void check_weights_path(const std::string& filepath, const char* where) {
  if (!filepath.ends_with(".weights.h5"))
    throw value_error(std::string(where) +
                      ": the filename must end in `.weights.h5` (Keras's "
                      "weights file). Received: filepath=" +
                      filepath);
}

TESSEL_INLINE void taken_count::wait_for(std::size_t n) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return taken_ >= n || abandoned_; });
  if (taken_ < n)
    throw runtime_error(
        "save_weights: the variables' values were not gathered; "
        "see the error of the gather");
}

}  // namespace tessel::saving::detail
