// tessel on the GPU (backend::cuda), the side of benchmarks/gpu_frameworks.py (PyTorch eager,
// torch.compile and JAX jit on the same GPU; scripts/test-gpu.sh --bench runs both):
// - seeds/001's MLP on Fashion-MNIST, fit as examples/mlp_fashion_mnist trains it (batch 32,
//   Adam, validation on the last 10,000 training images inside the epoch): seconds per epoch
//   after the first, test accuracy, and the median time of one training step (train_on_batch:
//   the batch's upload, forward, loss, backward, Adam and the one read-back of the sums);
// - the 4096-wide step (3 x dense(4096), batch 512, Adam, mean squared error): its median time
//   and TFLOP/s, against the same 8 GEMMs alone through cuBLAS (the backend's gemm), in one run,
//   and the time of its two uploads alone (x and y from the host: 16 MB);
// - seeds/002's CNN (three conv2d with batch normalization and ReLU, global average pooling,
//   dense(256), dropout, dense(10); batch 64, Adam): the median time of one training step
//   (train_on_batch), beside gpu_frameworks.py's PyTorch (cuDNN) and JAX;
// - the peak of the GPU memory pool over each.
//   gpu_bench [--epochs N] [--steps N] [--only mlp,wide,cnn] [--profile mlp|wide|cnn]
// --only runs the parts named; --profile marks 3 steps of one part, after its timed steps, with
// cudaProfilerStart/Stop, for `ncu --profile-from-start off` (scripts/test-gpu.sh --bench prints
// the time of each kernel of one step that way).
// Prints RESULT lines: tessel_gpu_mlp ..., tessel_gpu_wide ..., tessel_gpu_cnn ...
#include <cuda_profiler_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <tessel/backend/cuda.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {

using D = tessel::backend::cuda;
using namespace tessel::layers;
using mlp_t = tessel::basic_sequential<D, tessel::one_device, input<784>,
                                       dense<256, {.activation = "relu"}>,
                                       dense<256, {.activation = "relu"}>, dense<10>>;
constexpr std::size_t width = 4096, wide_batch = 512;
using wide_t = tessel::basic_sequential<D, tessel::one_device, input<width>,
                                        dense<width, {.activation = "relu"}>,
                                        dense<width, {.activation = "relu"}>, dense<width>>;

using bn = batch_normalization<{.center = true, .scale = false}>;
using cnn_t = tessel::basic_sequential<
    D, tessel::one_device, input<28, 28, 1>, rescaling<1.0 / 255.0>,
    conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
    conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
    conv2d<32, 6, {.strides = 2, .padding = "same", .name = "large_k"}>, bn, relu<>,
    global_average_pooling2d<>, dense<256, {.activation = "relu"}>, dropout<0.5>, dense<10>>;
constexpr std::size_t cnn_batch = 64;

using bench::median;
using bench::now;

// The part named by --profile: 3 of its steps, after the timed ones, between
// cudaProfilerStart and cudaProfilerStop (what `ncu --profile-from-start off` measures).
std::string profiled;
template <class Step>
void profile_steps(const char* part, Step&& step) {
  if (profiled != part) return;
  D::synchronize();
  cudaProfilerStart();
  for (int i = 0; i < 3; ++i) step();
  D::synchronize();
  cudaProfilerStop();
}
// The most memory the pool has held since the last call, in MiB (and resets the mark).
double pool_peak_mib() {
  cudaMemPool_t pool = nullptr;
  tessel::backend::cuda_detail::check(cudaDeviceGetDefaultMemPool(&pool, D::device()),
                                      "cudaDeviceGetDefaultMemPool");
  std::uint64_t high = 0, zero = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high);
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
  return static_cast<double>(high) / (1024.0 * 1024.0);
}

void mlp(std::size_t epochs, int steps) {
  const bench::seed001_data d = bench::load_seed001();
  const std::size_t n_train = d.x_train.rows();
  auto train_ds = tessel::from_tensor_slices(d.x_train, d.y_train)
                      .shuffle(static_cast<std::int64_t>(n_train), 1)
                      .batch(32)
                      .prefetch(2);
  auto val_ds = tessel::from_tensor_slices(d.x_val, d.y_val).batch(32);
  mlp_t model;
  model.compile(tessel::optimizers::adam{},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true},
                {tessel::metrics::sparse_categorical_accuracy{}});
  pool_peak_mib();
  bench::epoch_timer timer;
  auto timing = timer.callback();
  model.fit(train_ds, {.epochs = epochs, .verbose = 2, .callbacks = {timing},
                       .validation_data = val_ds});
  const auto result = model.evaluate(tessel::from_tensor_slices(d.x_test, d.y_test).batch(32), 0);
  // One step alone (train_on_batch: the upload, the step, the read-back of the sums).
  std::vector<double> step;
  for (int i = 0; i < steps; ++i) {
    const std::size_t first = (static_cast<std::size_t>(i) * 32) % (n_train - 32);
    const auto xb = tessel::data::slice_rows(d.x_train, first, first + 32);
    const auto yb = tessel::data::slice_rows(d.y_train, first, first + 32);
    const double t0 = now();
    model.train_on_batch(xb, yb);
    step.push_back(now() - t0);
  }
  profile_steps("mlp", [&] {
    model.train_on_batch(tessel::data::slice_rows(d.x_train, 0, 32),
                         tessel::data::slice_rows(d.y_train, 0, 32));
  });
  std::printf("RESULT tessel_gpu_mlp seconds_per_epoch=%.3f first_epoch=%.3f test_accuracy=%.4f "
              "step_us=%.1f peak_mib=%.1f\n",
              timer.after_first(), timer.seconds[0],
              *tessel::find_log(result, "sparse_categorical_accuracy"), median(step) * 1e6,
              pool_peak_mib());
}

void wide(int steps) {
  wide_t model;
  model.compile(tessel::optimizers::adam{}, tessel::losses::mean_squared_error{});
  tessel::array<float> x({wide_batch, width}), y({wide_batch, width});
  tessel::random::stream s(7, 7);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x.values[i] = s.normal(i);
    y.values[i] = s.normal(i + x.size());
  }
  pool_peak_mib();
  model.train_on_batch(x, y);  // the optimizer's slots, cuBLAS's workspace
  std::vector<double> step;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now();
    model.train_on_batch(x, y);
    step.push_back(now() - t0);
  }
  const double peak = pool_peak_mib();
  profile_steps("wide", [&] { model.train_on_batch(x, y); });
  // The step's 8 GEMMs alone: per layer x W, x^T dy and (layers 2 and 3) dy W^T.
  const D::matrix a = D::make_zeros("a", wide_batch, width), w = D::make_zeros("w", width, width),
                  c = D::make_zeros("c", wide_batch, width), g = D::make_zeros("g", width, width);
  auto gemms = [&] {
    for (int layer = 0; layer < 3; ++layer) {
      D::gemm(false, false, 1.0f, a, w, 0.0f, c);
      D::gemm(true, false, 1.0f, a, c, 0.0f, g);
      if (layer > 0) D::gemm(false, true, 1.0f, c, w, 0.0f, a);
    }
    D::synchronize();
  };
  gemms();
  std::vector<double> alone;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now();
    gemms();
    alone.push_back(now() - t0);
  }
  // The step's uploads alone: x and y (8 MB each) from the host's memory, as train_on_batch
  // takes them (the frameworks' steps find theirs on the GPU already).
  const D::matrix ux = D::make_matrix("ux", wide_batch, width),
                  uy = D::make_matrix("uy", wide_batch, width);
  std::vector<double> uploads;
  for (int i = 0; i < steps; ++i) {
    const double t0 = now();
    D::upload(std::span<const float>(x.values), ux);
    D::upload(std::span<const float>(y.values), uy);
    D::synchronize();
    uploads.push_back(now() - t0);
  }
  const double flop = 8 * 2.0 * wide_batch * width * width;
  const double t = median(step), t_gemm = median(alone), t_up = median(uploads);
  std::printf("RESULT tessel_gpu_wide ms_per_step=%.3f tflops=%.1f gemm_ms=%.3f gemm_tflops=%.1f "
              "of_gemm=%.3f upload_ms=%.3f of_gemm_without_upload=%.3f peak_mib=%.1f\n",
              t * 1e3, flop / t / 1e12, t_gemm * 1e3, flop / t_gemm / 1e12, t_gemm / t,
              t_up * 1e3, t_gemm / (t - t_up), peak);
}

void cnn(int steps) {
  const bench::seed001_data d = bench::load_seed001();
  const std::size_t n = d.x_train.rows();
  const auto images = tessel::data::reshape(d.x_train, {n, 28, 28, 1});
  cnn_t model;
  model.compile(tessel::optimizers::adam{.learning_rate = 1e-3},
                tessel::losses::sparse_categorical_crossentropy{.from_logits = true});
  pool_peak_mib();
  auto batch = [&](int i) {
    const std::size_t first = (static_cast<std::size_t>(i) * cnn_batch) % (n - cnn_batch);
    return std::pair{tessel::data::slice_rows(images, first, first + cnn_batch),
                     tessel::data::slice_rows(d.y_train, first, first + cnn_batch)};
  };
  for (int i = 0; i < 5; ++i) {  // the optimizer's slots, cuBLAS's workspace and plans
    const auto [xb, yb] = batch(i);
    model.train_on_batch(xb, yb);
  }
  std::vector<double> step;
  for (int i = 0; i < steps; ++i) {
    const auto [xb, yb] = batch(i);
    const double t0 = now();
    model.train_on_batch(xb, yb);
    step.push_back(now() - t0);
  }
  const double peak = pool_peak_mib();
  profile_steps("cnn", [&] {
    const auto [xb, yb] = batch(0);
    model.train_on_batch(xb, yb);
  });
  const double t = median(step);
  std::printf("RESULT tessel_gpu_cnn step_us=%.1f steps_per_s=%.0f peak_mib=%.1f\n", t * 1e6,
              1.0 / t, peak);
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::size_t epochs = 3;
  int steps = 200;
  std::string only = "mlp,wide,cnn";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--epochs") == 0) epochs = std::strtoul(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--only") == 0) only = argv[++i];
    else if (std::strcmp(argv[i], "--profile") == 0) profiled = argv[++i];
  }
  const auto wanted = [&](const char* part) {
    return ("," + only + ",").find("," + std::string(part) + ",") != std::string::npos;
  };
  std::printf("tessel on GPU %d of %d (TF32 %s)\n", D::device(), D::device_count(),
              D::allow_tf32() ? "on" : "off");
  // Each part on its own: one that fails (no Fashion-MNIST files, say) does not hide the other.
  int failures = 0;
  for (auto [name, part] : {std::pair<const char*, std::function<void()>>{
                                "mlp", [&] { mlp(epochs, steps); }},
                            {"wide", [&] { wide(std::max(steps / 10, 5)); }},
                            {"cnn", [&] { cnn(std::max(steps / 2, 20)); }}}) {
    if (!wanted(name)) continue;
    try {
      part();
    } catch (const std::exception& e) {
      std::printf("FAILED gpu_bench %s: %s\n", name, e.what());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}
