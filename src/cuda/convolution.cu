// The convolutional layers' kernels on the GPU (layers/convolution.hpp and
// layers/batch_normalization.hpp): their bodies (backend/convolution_bodies.hpp,
// backend/batch_normalization_bodies.hpp: the ones the host runs) through the generic launcher.
#include <tessel/backend/batch_normalization_bodies.hpp>
#include <tessel/backend/convolution_bodies.hpp>
#include <tessel/backend/cuda_launch.cuh>

namespace cv = tessel::backend::convolution;

TESSEL_CUDA_FOR_EACH(cv::im2col_rows);
TESSEL_CUDA_FOR_EACH(cv::col2im_elements);
TESSEL_CUDA_FOR_EACH(cv::max_pool_elements);
TESSEL_CUDA_FOR_EACH(cv::average_pool_elements);
TESSEL_CUDA_FOR_EACH(cv::max_pool_gradient_elements);
TESSEL_CUDA_FOR_EACH(cv::average_pool_gradient_elements);

// Batch normalization (layers/batch_normalization.hpp).
namespace bn = tessel::backend::batch_normalization;
TESSEL_CUDA_FOR_EACH(bn::channel_sums);
TESSEL_CUDA_FOR_EACH(bn::channel_deviations);
TESSEL_CUDA_FOR_EACH(bn::channel_maps);
TESSEL_CUDA_FOR_EACH(bn::normalize_elements);
TESSEL_CUDA_FOR_EACH(bn::channel_gradient_sums);
TESSEL_CUDA_FOR_EACH(bn::input_gradient_elements);
