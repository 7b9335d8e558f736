// What the C++ benchmarks share: wall-clock seconds, the median of timings, a random labelled
// batch, and seeds/001's data
// (Fashion-MNIST as keras_mlp_fashion_mnist.py splits it: the first 50,000 training images train,
// the last 10,000 validate; pixels scaled to [0, 1], flattened to 784).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <tessel/tessel.hpp>
#include <vector>

namespace bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The median (0 for no timings).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Times each epoch of fit, validation included: add callback() to fit's callbacks (it must
// outlive fit). after_first(): the mean of the epochs after the first (which warms the caches
// and the allocator), or the first when there is one.
class epoch_timer {
 public:
  tessel::callbacks::lambda_callback callback() {
    return tessel::callbacks::lambda_callback({
        .on_epoch_begin = [this](std::size_t, const tessel::logs&) { start_ = now(); },
        .on_epoch_end = [this](std::size_t,
                               const tessel::logs&) { seconds.push_back(now() - start_); },
    });
  }
  [[nodiscard]] double after_first() const {
    if (seconds.size() < 2) return seconds.empty() ? 0.0 : seconds[0];
    double later = 0;
    for (std::size_t i = 1; i < seconds.size(); ++i) later += seconds[i];
    return later / static_cast<double>(seconds.size() - 1);
  }
  std::vector<double> seconds;

 private:
  double start_ = 0;
};

struct seed001_data {
  tessel::array<float> x_train, x_val, x_test;
  tessel::array<std::int32_t> y_train, y_val, y_test;
};
inline seed001_data load_seed001() {
  auto [train, test] = tessel::datasets::fashion_mnist::load_data();
  auto prepare = [](const tessel::array<std::uint8_t>& images) {
    return tessel::data::reshape(tessel::data::to_float(images, 1.0f / 255.0f),
                                 {images.shape[0], 784});
  };
  const auto x_all = prepare(train.first);
  const auto y_all = tessel::data::to_int32(train.second);
  const std::size_t n_train = x_all.rows() - 10000;
  return {tessel::data::slice_rows(x_all, 0, n_train),
          tessel::data::slice_rows(x_all, n_train, x_all.rows()),
          prepare(test.first),
          tessel::data::slice_rows(y_all, 0, n_train),
          tessel::data::slice_rows(y_all, n_train, y_all.rows()),
          tessel::data::to_int32(test.second)};
}

// A global batch of `batch` rows of `width` values uniform in [-1, 1) and labels below
// `classes`, from a fixed random stream: every process builds the same one.
struct labelled_batch {
  tessel::array<float> x;
  tessel::array<std::int32_t> y;
};
inline labelled_batch random_batch(std::size_t batch, std::size_t width, std::size_t classes) {
  labelled_batch b{tessel::array<float>({batch, width}), tessel::array<std::int32_t>({batch})};
  tessel::random::stream s(11, 3);
  for (std::size_t i = 0; i < b.x.size(); ++i) b.x.values[i] = 2.0f * s.uniform(i) - 1.0f;
  for (std::size_t i = 0; i < batch; ++i)
    b.y.values[i] = static_cast<std::int32_t>(s.uniform(b.x.size() + i) * classes) %
                    static_cast<std::int32_t>(classes);
  return b;
}

}  // namespace bench
