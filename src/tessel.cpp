// tessel::tessel: the library's non-template functions, compiled once (core/compilation.hpp).
// Each header below defines its share in its `#if TESSEL_DEFINITIONS` block; a program linked
// with this library compiles with TESSEL_SEPARATE_COMPILATION and sees only their declarations.
// (tests/layering checks that every header with such a block is listed here.)
#if !defined(TESSEL_SEPARATE_COMPILATION) || !defined(TESSEL_SOURCE)
#error \
    "compile src/tessel.cpp with -DTESSEL_SEPARATE_COMPILATION -DTESSEL_SOURCE (CMake's tessel::tessel does)"
#endif

#include <tessel/backend/host.hpp>
#include <tessel/backend/thread_pool.hpp>
#include <tessel/comm/communicator.hpp>
#include <tessel/comm/dimension.hpp>
#include <tessel/comm/ring.hpp>
#include <tessel/comm/stall.hpp>
#include <tessel/comm/watchdog.hpp>
#include <tessel/core/auto_layout.hpp>
#include <tessel/core/device_mesh.hpp>
#include <tessel/core/environment.hpp>
#include <tessel/core/explain.hpp>
#include <tessel/core/layer_planner.hpp>
#include <tessel/core/planner.hpp>
#include <tessel/core/regex.hpp>
#include <tessel/core/shape.hpp>
#include <tessel/core/shard.hpp>
#include <tessel/core/tensor_layout.hpp>
#include <tessel/core/visualize_sharding.hpp>
#include <tessel/data/array.hpp>
#include <tessel/data/array_ops.hpp>
#include <tessel/data/dataset.hpp>
#include <tessel/data/fashion_mnist.hpp>
#include <tessel/data/file_access.hpp>
#include <tessel/data/idx.hpp>
#include <tessel/layers/keras_config.hpp>
#include <tessel/layers/layer.hpp>
#include <tessel/layers/plan/batch_normalization.hpp>
#include <tessel/layers/plan/convolution.hpp>
#include <tessel/layers/plan/dense.hpp>
#include <tessel/layers/plan/elementwise.hpp>
#include <tessel/metrics.hpp>
#include <tessel/model/executor.hpp>
#include <tessel/model/sequential.hpp>
#include <tessel/model/summary.hpp>
#include <tessel/random/initializers.hpp>
#include <tessel/runtime/agreement.hpp>
#include <tessel/runtime/initialize.hpp>
#include <tessel/runtime/world.hpp>
#include <tessel/saving/atomic_file.hpp>
#include <tessel/saving/checkpoint.hpp>
#include <tessel/saving/file_checksum.hpp>
#include <tessel/saving/file_writer.hpp>
#include <tessel/saving/h5.hpp>
#include <tessel/saving/keras_archive.hpp>
#include <tessel/saving/model_config.hpp>
#include <tessel/saving/model_weights.hpp>
#include <tessel/saving/sharded_weights.hpp>
#include <tessel/saving/weights_file.hpp>
#include <tessel/saving/zip.hpp>
#include <tessel/state.hpp>
#include <tessel/strategy/strategy.hpp>
#include <tessel/tessel.hpp>
#include <tessel/trainer/callbacks.hpp>
#include <tessel/trainer/checkpoint_callbacks.hpp>
#include <tessel/trainer/learning_rate_callbacks.hpp>
#include <tessel/trainer/logs.hpp>
#include <tessel/trainer/progbar.hpp>
#include <tessel/trainer/progbar_logger.hpp>
#include <tessel/trainer/replica_check.hpp>
#include <tessel/trainer/trainer_core.hpp>

