// The templates over a backend B and its communicator C that do not depend on a model's type
// (core/compilation.hpp), instantiated once: for the host backend in src/tessel_templates.cpp
// (tessel::tessel), for the CUDA backend in src/tessel_cuda.cpp (tessel::cuda_compiled). Each
// header lists its own in a TESSEL_..._TEMPLATES macro, declared `extern` for the programs.
#pragma once

#define TESSEL_BACKEND_TEMPLATES(B, C)   \
  TESSEL_CHECKPOINT_TEMPLATES(, B)       \
  TESSEL_MODEL_WEIGHTS_TEMPLATES(, B)    \
  template class optimizer<B>;           \
  TESSEL_STATE_TEMPLATES(, B)            \
  TESSEL_LAYER_TEMPLATES(, B)            \
  TESSEL_EXECUTOR_TEMPLATES(, B)         \
  TESSEL_MODEL_TEMPLATES(, B, C)         \
  TESSEL_TRAINER_TEMPLATES(, B, C)       \
  namespace metrics {                    \
  TESSEL_METRICS_TEMPLATES(, B)          \
  }
