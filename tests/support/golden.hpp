// Reading the golden files Keras wrote (tests/golden/, see its README) and comparing tessel's
// values with them, for the Catch2 tests that check Keras parity (unit/golden_test.cpp, built
// for the host and, in tests/gpu/, the CUDA backend; unit/custom_loss_test.cpp). Tolerance:
// relative 1e-5 per element, measured against |expected| + 0.1 * (the largest |expected| in the
// same array), plus an absolute floor: an element that is a sum of cancelling terms cannot agree
// to 1e-5 of itself in float32, whatever order the sums run in.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

namespace tessel::testing::golden {

using json = nlohmann::json;

// The golden files: TESSEL_GOLDEN_DIR from the environment (a build carried to another machine,
// scripts/gpu-bundle.sh), else the source tree's tests/golden (the macro the build defines).
inline std::string golden_dir() {
  const char* env = std::getenv("TESSEL_GOLDEN_DIR");
  return env != nullptr && *env != '\0' ? env : TESSEL_GOLDEN_DIR;
}
inline json load(const std::string& name) {
  const std::string path = golden_dir() + "/" + name;
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}
inline std::vector<float> values(const json& a) { return a.at("data").get<std::vector<float>>(); }
inline std::vector<std::size_t> shape_of(const json& a) {
  return a.at("shape").get<std::vector<std::size_t>>();
}
inline array<float> to_array(const json& a) { return {shape_of(a), values(a)}; }
// A list of {path, value} (make_golden.py's weights_list) as arrays, in its order.
inline std::vector<array<float>> weight_arrays(const json& list) {
  std::vector<array<float>> out;
  for (const json& v : list) out.push_back(to_array(v.at("value")));
  return out;
}

// Fails with the first element that differs, naming it.
inline void check_close(const std::vector<float>& actual, const std::vector<float>& expected,
                        const std::string& what, double rel = 1e-5, double abs_floor = 1e-7) {
  REQUIRE(actual.size() == expected.size());
  double scale = 0;
  for (float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    INFO(what << "[" << i << "]: tessel " << a << ", Keras " << e);
    REQUIRE(std::fabs(a - e) <= rel * (std::fabs(e) + 0.1 * scale) + abs_floor);
  }
}
template <class B>
void check_close(const typename B::matrix& m, const json& expected, const std::string& what) {
  std::vector<float> host(m.size());
  B::download(m, host);
  check_close(host, values(expected), what);
}

// An array of the file in the backend's memory, as a matrix of rows x (the other dimensions).
template <class B>
typename B::matrix device(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  typename B::matrix m = B::make_matrix("golden", rows, cols);
  B::upload(v, m);
  return m;
}
template <class B>
typename B::matrix device(const json& a) {
  const auto s = shape_of(a);
  std::size_t cols = 1;
  for (std::size_t i = 1; i < s.size(); ++i) cols *= s[i];
  return device<B>(values(a), s.empty() ? 1 : s[0], cols);
}

// A metric's running value over the file's batches ({y_true, y_pred} each) against Keras's
// result() after each: the metric's per-sample sums into a mean weighted by the batch's rows.
template <class B>
void check_running_metric(const metrics::metric_function<B>& m, const json& g,
                          const std::string& what) {
  metrics::mean mean(m.name());
  const typename B::sums sums = B::make_sums("metric", 1);
  for (std::size_t k = 0; k < g["batches"].size(); ++k) {
    const json& b = g["batches"][k];
    const typename B::matrix pred = device<B>(b["y_pred"]);
    m.local_sum(pred, typename B::index_vector(), device<B>(b["y_true"]), sums, 0);
    double sum = 0.0;
    B::download(sums, std::span<double>(&sum, 1));
    const auto rows = static_cast<double>(B::rows(pred));
    mean.update_state(sum / rows, rows);
    check_close({static_cast<float>(mean.result())}, {g["results"][k].get<float>()},
                what + " after batch " + std::to_string(k + 1));
  }
}

}  // namespace tessel::testing::golden
