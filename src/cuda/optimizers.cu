// The library's optimizers' element-wise bodies on the GPU (optimizers/bodies.hpp: the ones the
// host runs) through the generic launcher: Adagrad, Adamax, Nadam, Lion, Adam with amsgrad, and the
// gradient clipping, weight-decay, gradient-accumulation and moving-average steps every
// optimizer may take. SGD, Adam and RMSprop
// without amsgrad have fused updates of their own (kernels.cu).
#include <tessel/backend/cuda_launch.cuh>
#include <tessel/optimizers/bodies.hpp>

namespace ob = tessel::optimizers::bodies;

TESSEL_CUDA_FOR_EACH(ob::weight_decay);
TESSEL_CUDA_FOR_EACH(ob::clip_value);
TESSEL_CUDA_FOR_EACH(ob::scale_gradient);
TESSEL_CUDA_FOR_EACH(ob::accumulate);
TESSEL_CUDA_FOR_EACH(ob::accumulated_mean);
TESSEL_CUDA_FOR_EACH(ob::moving_average);
TESSEL_CUDA_FOR_EACH(ob::adagrad);
TESSEL_CUDA_FOR_EACH(ob::adamax);
TESSEL_CUDA_FOR_EACH(ob::nadam);
TESSEL_CUDA_FOR_EACH(ob::lion);
TESSEL_CUDA_FOR_EACH(ob::adam_amsgrad);
