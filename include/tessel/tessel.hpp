// Everything tessel provides: the compile-time core, the host backend, layers, losses, metrics,
// optimizers, the model API, and the data pipeline.
#pragma once

#include "core.hpp"
#include "data/array.hpp"
#include "data/array_ops.hpp"
#include "data/dataset.hpp"
#include "data/fashion_mnist.hpp"
#include "data/idx.hpp"
#include "layers.hpp"
#include "losses.hpp"
#include "metrics.hpp"
#include "trainer/callbacks.hpp"
#include "trainer/checkpoint_callbacks.hpp"
#include "trainer/learning_rate_callbacks.hpp"
#include "model/sequential.hpp"
#include "trainer/functional.hpp"
#include "trainer/sequential.hpp"
#include "trainer/trainer.hpp"
#include "optimizers.hpp"
#include "runtime/initialize.hpp"
#include "strategy/strategy.hpp"
#include "strategy/multi_gpu_model.hpp"
