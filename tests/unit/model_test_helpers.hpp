// The helpers of the model API's tests (model_test.cpp, model_callbacks_test.cpp,
// model_errors_test.cpp): small synthetic data sets, a model to fit on them, output parsing.
#pragma once

#include <catch2/catch.hpp>


#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>


namespace {

using B = tessel::default_backend;
using namespace tessel::layers;
using Catch::Contains;

// A fixed pseudo-random source (mt19937's raw output is specified, <random>'s distributions
// are not).
class rng {
 public:
  explicit rng(std::uint32_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(static_cast<double>(gen_() >> 8) / 16777216.0);
  }
  std::uint32_t below(std::uint32_t n) { return gen_() % n; }

 private:
  std::mt19937 gen_;
};

// Three well separated classes in four dimensions.
struct blobs {
  tessel::array<float> x;
  tessel::array<std::int32_t> y;
};
inline blobs make_blobs(std::size_t n, std::uint32_t seed, float noise = 0.8f) {
  static constexpr float centers[3][4] = {
      {1.5f, 0.0f, 0.0f, -1.0f}, {-1.5f, 1.0f, 0.0f, 0.0f}, {0.0f, -1.5f, 1.5f, 1.0f}};
  rng gen(seed);
  blobs b{tessel::array<float>({n, 4}), tessel::array<std::int32_t>({n})};
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t c = gen.below(3);
    b.y.values[i] = static_cast<std::int32_t>(c);
    for (std::size_t k = 0; k < 4; ++k)
      b.x.values[i * 4 + k] = centers[c][k] + gen.uniform(-noise, noise);
  }
  return b;
}
inline auto blob_dataset(std::size_t n, std::uint32_t seed, std::int64_t batch = 16) {
  blobs b = make_blobs(n, seed);
  return tessel::from_tensor_slices(std::move(b.x), std::move(b.y)).batch(batch);
}

using blob_model = tessel::sequential<input<4>, dense<16, {.activation = "relu"}>, dense<3>>;

template <class Model>
void compile_blob(Model& m, tessel::optimizer_spec opt = tessel::optimizers::adam{}) {
  m.compile(std::move(opt), tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
            {"accuracy"});
}

// Sets the global seed for the scope and puts the previous one back.
class seed_scope {
 public:
  explicit seed_scope(std::uint64_t s) : old_(tessel::utils::random_seed()) {
    tessel::utils::set_random_seed(s);
  }
  ~seed_scope() { tessel::utils::set_random_seed(old_); }

 private:
  std::uint64_t old_;
};

// What a stream receives while this lives (std::cout by default).
class capture {
 public:
  explicit capture(std::ostream& s = std::cout) : stream_(s), old_(s.rdbuf(buffer_.rdbuf())) {}
  ~capture() { stream_.rdbuf(old_); }
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;
  std::string text() const { return buffer_.str(); }

 private:
  std::ostream& stream_;
  std::ostringstream buffer_;
  std::streambuf* old_;
};

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A file in the temporary directory, removed at the end of the scope.
class temp_path {
 public:
  explicit temp_path(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("tessel_model_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::filesystem::remove_all(path_);
  }
  ~temp_path() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline std::vector<float> host(const B::matrix& m) {
  std::vector<float> out(B::rows(m) * B::cols(m));
  B::download(m, out);
  return out;
}

inline double log_value(const tessel::logs& l, std::string_view name) {
  const auto v = tessel::find_log(l, name);
  INFO("log " << name);
  REQUIRE(v.has_value());
  return *v;
}

inline std::vector<std::string> names_of(const tessel::logs& l) {
  std::vector<std::string> out;
  for (const auto& [k, v] : l) out.push_back(k);
  return out;
}

}  // namespace
