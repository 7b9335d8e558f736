// The planner's limits are compile-time parameters: built with TESSEL_MAX_OPS=48 and
// TESSEL_MAX_OP_INPUTS=6 (tests/CMakeLists.txt), a model of 40 layers and a concatenate of 6
// inputs plan, train and give the same losses under data_parallel as on one device (run on 1
// and 2 processes).
#if TESSEL_MAX_OPS != 48 || TESSEL_MAX_OP_INPUTS != 6
#error "build this test with TESSEL_MAX_OPS=48 and TESSEL_MAX_OP_INPUTS=6"
#endif
#include <cmath>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

namespace {
using namespace tessel;
using namespace tessel::layers;

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED on process %d: %s\n", process_id(), what.c_str());
  }
}

// 40 layers: dense, then 19 pairs of (dense, relu) and a last dense.
template <class Dist, class... L>
using deep = sequential<Dist, input<6>, dense<8>, L..., dense<3>>;
template <class Dist>
using deep_t = deep<Dist, dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>,
                    dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>,
                    dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>,
                    dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>,
                    dense<8>, relu<>, dense<8>, relu<>, dense<8>, relu<>>;

// Six branches read the input and are joined by one concatenate.
using x = input<6>;
using b0 = dense<2, {.name = "b0"}>::on<x>;
using b1 = dense<2, {.name = "b1"}>::on<x>;
using b2 = dense<2, {.name = "b2"}>::on<x>;
using b3 = dense<2, {.name = "b3"}>::on<x>;
using b4 = dense<2, {.name = "b4"}>::on<x>;
using b5 = dense<2, {.name = "b5"}>::on<x>;
using joined = dense<3, {.name = "head"}>::on<concatenate<"join">::on<b0, b1, b2, b3, b4, b5>>;
template <class Dist>
using six_t = functional<Dist, x, joined>;

array<float> features(std::size_t n) {
  array<float> a({n, 6});
  for (std::size_t i = 0; i < a.size(); ++i) a.values[i] = static_cast<float>((i * 7) % 11) / 5.0f - 1.0f;
  return a;
}
array<std::int32_t> labels(std::size_t n) {
  array<std::int32_t> y({n});
  for (std::size_t i = 0; i < n; ++i) y.values[i] = static_cast<std::int32_t>(i % 3);
  return y;
}

template <class One, class Dp>
void compare(const std::string& name, std::size_t layers) {
  One one;
  Dp dp;
  check(One::layer_count == layers, name + ": " + std::to_string(One::layer_count) + " layers");
  one.compile("adam", losses::sparse_categorical_crossentropy{.from_logits = true});
  dp.compile("adam", losses::sparse_categorical_crossentropy{.from_logits = true});
  double worst = 0, first = 0, last = 0;
  for (std::size_t step = 0; step < 5; ++step) {
    const double a = *find_log(one.train_on_batch(features(8), labels(8)), "loss");
    const double b = *find_log(dp.train_on_batch(features(8), labels(8)), "loss");
    worst = std::max(worst, std::abs(a - b) / std::max(std::abs(a), 1e-30));
    if (step == 0) first = a;
    last = a;
  }
  check(std::isfinite(last) && last < first, name + ": the loss falls (" + std::to_string(first) +
                                                 " to " + std::to_string(last) + ")");
  check(worst < 1e-5, name + ": data_parallel's losses equal one device's (worst " +
                          std::to_string(worst) + ")");
  if (process_id() == 0)
    std::printf("%s: %zu layers, loss %.6f -> %.6f, worst difference %.2e\n", name.c_str(),
                One::layer_count, first, last, worst);
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    compare<deep_t<one_device>, deep_t<data_parallel<>>>("40 layers", 40);
    compare<six_t<one_device>, six_t<data_parallel<>>>("concatenate of 6", 8);
  } catch (const std::exception& e) {
    check(false, std::string("threw: ") + e.what());
  }
  if (process_id() == 0) std::printf("many_layers_test: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
