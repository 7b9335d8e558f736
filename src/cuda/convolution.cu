// The convolutional layers' kernels on the GPU (layers/convolution.hpp and
// layers/batch_normalization.hpp): their bodies (backend/convolution_bodies.hpp,
// backend/batch_normalization_bodies.hpp: the ones the host runs) through the generic launcher.
#include <tessel/backend/batch_normalization_bodies.hpp>
#include <tessel/backend/convolution_bodies.hpp>
#include <tessel/backend/cuda_launch.cuh>

namespace cv = tessel::backend::convolution;
// im2col_rows: specialized below, an element a thread.

TESSEL_CUDA_FOR_EACH(cv::col2im_elements);
TESSEL_CUDA_FOR_EACH(cv::max_pool_elements);
TESSEL_CUDA_FOR_EACH(cv::average_pool_elements);
TESSEL_CUDA_FOR_EACH(cv::max_pool_gradient_elements);
TESSEL_CUDA_FOR_EACH(cv::average_pool_gradient_elements);

// Batch normalization (layers/batch_normalization.hpp). Its per-channel sums (one item per
// channel: a dozen GPU threads, each over every row of the batch) run as column reductions over
// the rows instead (cuda_launch::reduce_columns): the same sums in double, added in another
// fixed order, then rounded to float as the bodies round them.
namespace bn = tessel::backend::batch_normalization;
TESSEL_CUDA_FOR_EACH(bn::channel_maps);
TESSEL_CUDA_FOR_EACH(bn::normalize_elements);
TESSEL_CUDA_FOR_EACH(bn::input_gradient_elements);

namespace {
// x[i, c]
struct channel_value {
  const float* x;
  std::size_t channels;
  __device__ double operator()(std::size_t i, std::size_t c) const {
    return x[i * channels + c];
  }
};
// (x[i, c] - mean_c)^2, the mean as bn::channel_deviations forms it.
struct channel_squared_deviation {
  bn::channel_deviations f;
  __device__ double operator()(std::size_t i, std::size_t c) const {
    const double d = static_cast<double>(f.x[i * f.channels + c]) - f.mean(c);
    return d * d;
  }
};
// conv2d's im2col one element a thread (im2col_rows is one row of kh kw C values a thread: a
// few thousand threads for a small image, each copying hundreds of values).
struct im2col_element {
  cv::im2col_rows f;
  std::size_t patch;
  __device__ void operator()(std::size_t k) const {
    f.cols[k] = cv::im2col_value(f.g, f.x, k / patch, k % patch);
  }
};
struct store_sum {
  float* out;
  __device__ void operator()(std::size_t c, double v) const { out[c] = static_cast<float>(v); }
};
// The two gradient sums of a channel: dy, and dy x-hat.
struct two_sums {  // an aggregate (no initializers): it lives in shared memory; V{} is zero
  double dy, dy_xhat;
  __device__ two_sums& operator+=(const two_sums& o) {
    dy += o.dy;
    dy_xhat += o.dy_xhat;
    return *this;
  }
};
struct channel_gradient_terms {
  const float* dy;
  const float* xhat;
  std::size_t channels;
  __device__ two_sums operator()(std::size_t i, std::size_t c) const {
    const float g = dy[i * channels + c];
    return {g, static_cast<double>(g) * xhat[i * channels + c]};
  }
};
struct store_gradient_sums {
  bn::channel_gradient_sums f;
  __device__ void operator()(std::size_t c, const two_sums& v) const {
    f.store(c, v.dy, v.dy_xhat);
  }
};
}  // namespace

namespace tessel::backend::cuda_launch {
template <>
void for_each<cv::im2col_rows>(std::size_t n, const cv::im2col_rows& f, cudaStream_t s) {
  detail::each(n * f.g.patch(), im2col_element{f, f.g.patch()}, s);
}
template <>
void for_each<bn::channel_sums>(std::size_t n, const bn::channel_sums& f, cudaStream_t s) {
  if (!reduce_columns<double>(f.rows, n, channel_value{f.x, f.channels}, store_sum{f.sums}, s))
    detail::each(n, f, s);
}
template <>
void for_each<bn::channel_deviations>(std::size_t n, const bn::channel_deviations& f,
                                      cudaStream_t s) {
  if (!reduce_columns<double>(f.rows, n,
                              channel_squared_deviation{f},
                              store_sum{f.sums + f.channels}, s))
    detail::each(n, f, s);
}
template <>
void for_each<bn::channel_gradient_sums>(std::size_t n, const bn::channel_gradient_sums& f,
                                         cudaStream_t s) {
  if (!reduce_columns<two_sums>(f.rows, n, channel_gradient_terms{f.dy, f.xhat, f.channels},
                                store_gradient_sums{f}, s))
    detail::each(n, f, s);
}
}  // namespace tessel::backend::cuda_launch
