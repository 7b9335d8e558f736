// Convolutional networks under data_parallel are one device's: the seeds/002 CNN (Rescaling,
// three Conv2D -> BatchNormalization -> ReLU, GlobalAveragePooling2D, Dense, Dropout, Dense)
// trains 12 steps on Fashion-MNIST batches distributed over N processes, and process 0 trains
// the same model on one device on the same global batches. With SGD (momentum 0.9) the losses,
// weights (the moving statistics included), evaluate and predict agree within 1e-5 relative.
// With Adam the losses agree within 1e-5 and the weights' worst difference is printed: Adam's
// first steps are lr g / (|g| + epsilon), so a weight whose gradient is near epsilon (1e-7) moves
// by an amount that rounding in g decides, and the sums over a batch split across processes
// round differently than over the whole batch. The batches (30 rows, then 2 n + 1 and 1) do not
// divide evenly among the processes, and a fresh model's first step of 1 row leaves some none.
// Batch normalization's statistics are the global batch's (synchronized): the all-reduces that
// make them are the ones the plan lists, counted by communication_stats. Exit code 0 when all
// checks pass.
//
// The third convolution ("large_k") has no bias here, unlike the seed's: a bias right before a
// batch normalization in training has a gradient that is zero up to rounding (the normalization
// subtracts the batch mean), and Adam turns that rounding into steps of full size, so its value
// is rounding noise, on one device as across processes (Keras's own run shows it:
// tests/golden/cnn_step.json), and so are the moving mean and the predictions it feeds.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <utility>
#include <vector>

#include "mpi_checks.hpp"

namespace {

using namespace tessel::layers;
using bn = batch_normalization<{.center = true, .scale = false}>;
template <class Dist>
using cnn = tessel::sequential<
    Dist, input<28, 28, 1>, rescaling<1.0 / 255.0>,
    conv2d<12, 3, {.padding = "same", .use_bias = false}>, bn, relu<>,
    conv2d<24, 6, {.strides = 2, .use_bias = false}>, bn, relu<>,
    conv2d<32, 6, {.strides = 2, .padding = "same", .use_bias = false, .name = "large_k"}>, bn,
    relu<>,
    global_average_pooling2d<>, dense<256, {.activation = "relu"}>, dropout<0.5>, dense<10>>;

constexpr double tolerance = 1e-5;
using tessel::testing::check;
using tessel::testing::rel;

template <class Model>
void compile(Model& m, bool adam = false) {
  const tessel::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  if (adam)
    m.compile(tessel::optimizers::adam{.learning_rate = 1e-3}, loss, {"accuracy"});
  else
    m.compile(tessel::optimizers::sgd{.learning_rate = 0.05, .momentum = 0.9}, loss,
              {"accuracy"});
}

// 10 steps of 30 rows, then one of 2 n + 1 and one of 1.
template <class Model>
std::vector<tessel::logs> train(Model& m, const tessel::array<float>& x,
                                const tessel::array<std::int32_t>& y) {
  std::vector<tessel::logs> out;
  std::size_t at = 0;
  std::vector<std::size_t> sizes(10, 30);
  sizes.push_back(2 * static_cast<std::size_t>(tessel::num_processes()) + 1);
  sizes.push_back(1);
  for (const std::size_t rows : sizes) {
    out.push_back(m.train_on_batch(tessel::data::slice_rows(x, at, at + rows),
                                   tessel::data::slice_rows(y, at, at + rows)));
    at += rows;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    auto [train_set, test_set] = tessel::datasets::fashion_mnist::load_data();
    const std::size_t n = 400, m = 100;
    const auto x = tessel::data::to_float(tessel::data::slice_rows(train_set.first, 0, n), 1.0f);
    const auto y = tessel::data::to_int32(tessel::data::slice_rows(train_set.second, 0, n));
    const auto xt = tessel::data::to_float(tessel::data::slice_rows(test_set.first, 0, m), 1.0f);
    const auto yt = tessel::data::to_int32(tessel::data::slice_rows(test_set.second, 0, m));
    const auto x4 = tessel::data::reshape(x, {n, 28, 28, 1});
    const auto xt4 = tessel::data::reshape(xt, {m, 28, 28, 1});

    // A fresh model whose first step leaves some processes no rows (1 row, then 3): the batch
    // statistics count only the rows that exist, the empty processes' gradients are zero, and
    // the steps equal one device's (losses, weights with the moving statistics, predict).
    {
      cnn<tessel::data_parallel<>> empty;
      compile(empty);
      std::vector<tessel::logs> logs;
      for (const auto& [from, to] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 4}})
        logs.push_back(empty.train_on_batch(tessel::data::slice_rows(x4, from, to),
                                            tessel::data::slice_rows(y, from, to)));
      const auto weights = empty.get_weights();
      const auto pred = empty.predict(tessel::data::slice_rows(xt4, 0, 5), 3);
      if (tessel::process_id() == 0) {
        cnn<tessel::one_device> ref;
        compile(ref);
        double worst = 0;
        for (const auto& [from, to] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 4}}) {
          const auto l = ref.train_on_batch(tessel::data::slice_rows(x4, from, to),
                                            tessel::data::slice_rows(y, from, to));
          for (const auto& [key, value] : l) {
            const double d = rel(*tessel::find_log(logs[from == 0 ? 0 : 1], key), value);
            worst = std::max(worst, d);
            check(d <= tolerance, "empty replicas: step " + std::to_string(from) + " " + key);
          }
        }
        const auto ref_weights = ref.get_weights();
        for (std::size_t i = 0; i < ref_weights.size(); ++i) {
          const double d = rel(weights[i].values, ref_weights[i].values);
          worst = std::max(worst, d);
          check(d <= tolerance, "empty replicas: variable " + std::to_string(i) + " differs by " +
                                    std::to_string(d) + " relative");
        }
        const double d =
            rel(pred.values, ref.predict(tessel::data::slice_rows(xt4, 0, 5), 3).values);
        worst = std::max(worst, d);
        check(d <= tolerance, "empty replicas: predict");
        std::printf(
            "seeds/002 CNN on %d processes, a first step of 1 row then 3: worst relative "
            "difference from one device %.3g\n",
            tessel::num_processes(), worst);
      }
    }

    cnn<tessel::data_parallel<>> dist;
    compile(dist);
    dist.reset_communication_stats();
    dist.train_on_batch(tessel::data::slice_rows(x4, 0, 30), tessel::data::slice_rows(y, 0, 30));
    // One step's all_reduces over "batch": the plan's (the batch statistics' forward and
    // backward, and the gradients', which the buckets may merge into fewer calls) and the loss's.
    const tessel::model_plan& plan = dist.plan();
    const int batch = static_cast<int>(plan.mesh.index_of("batch"));
    std::size_t statistics = 0, gradients = 0;
    for (const auto& s : plan)
      if (s.step.kind == tessel::collective::all_reduce && s.step.axis == batch) {
        if (s.role == tessel::step_role::statistic) ++statistics;
        if (s.role == tessel::step_role::variable_gradient) ++gradients;
      }
    const bool distributed = tessel::num_processes() > 1;
    check(statistics == (distributed ? 9u : 0u),
          "the plan lists 9 batch-statistic all_reduces (2 forward and 1 backward per batch "
          "normalization), got " + std::to_string(statistics));
    const std::size_t run = dist.communication_stats().count(tessel::collective::all_reduce,
                                                             "batch");
    const std::size_t buckets = dist.gradient_bucket_count();
    check(!distributed || run == statistics + buckets + 1,
          "a step runs the plan's statistic all_reduces, one per gradient bucket and the loss's: "
          "expected " + std::to_string(statistics + buckets + 1) + ", ran " + std::to_string(run));
    check(gradients > 0 || !distributed, "the plan lists the gradients' reductions");

    cnn<tessel::data_parallel<>> model;
    compile(model);
    const auto logs = train(model, x4, y);
    const auto weights = model.get_weights();
    const auto eval = model.evaluate(xt4, yt, 32, 0);
    const auto pred = model.predict(xt4, 32);
    double worst_loss = 0, worst_weight = 0;
    if (tessel::process_id() == 0) {
      cnn<tessel::one_device> ref;
      compile(ref);
      const auto ref_logs = train(ref, x4, y);
      for (std::size_t s = 0; s < ref_logs.size(); ++s)
        for (const auto& [key, value] : ref_logs[s]) {
          const double d = rel(*tessel::find_log(logs[s], key), value);
          worst_loss = std::max(worst_loss, d);
          check(d <= tolerance, "step " + std::to_string(s) + " " + key);
        }
      const auto ref_weights = ref.get_weights();
      for (std::size_t i = 0; i < ref_weights.size(); ++i) {
        const double d = rel(weights[i].values, ref_weights[i].values);
        worst_weight = std::max(worst_weight, d);
        check(d <= tolerance, "variable " + std::to_string(i) + " differs by " +
                                  std::to_string(d) + " relative");
      }
      const auto ref_eval = ref.evaluate(xt4, yt, 32, 0);
      for (const auto& [key, value] : ref_eval)
        check(rel(*tessel::find_log(eval, key), value) <= tolerance, "evaluate " + key);
      const auto ref_pred = ref.predict(xt4, 32);
      check(rel(pred.values, ref_pred.values) <= tolerance, "predict");
      std::printf("seeds/002 CNN on %d processes, SGD: worst relative difference from one "
                  "device: losses and metrics %.3g, weights %.3g (tolerance %.0e)\n",
                  tessel::num_processes(), worst_loss, worst_weight, tolerance);
    }
    cnn<tessel::data_parallel<>> with_adam;
    compile(with_adam, true);
    const auto adam_logs = train(with_adam, x4, y);
    const auto adam_weights = with_adam.get_weights();
    if (tessel::process_id() == 0) {
      cnn<tessel::one_device> ref;
      compile(ref, true);
      const auto ref_logs = train(ref, x4, y);
      double worst_adam_loss = 0, worst_adam_weight = 0;
      for (std::size_t s = 0; s < ref_logs.size(); ++s) {
        const double d = rel(*tessel::find_log(adam_logs[s], "loss"),
                             *tessel::find_log(ref_logs[s], "loss"));
        worst_adam_loss = std::max(worst_adam_loss, d);
        check(d <= tolerance, "Adam: step " + std::to_string(s) + " loss");
      }
      const auto ref_weights = ref.get_weights();
      for (std::size_t i = 0; i < ref_weights.size(); ++i)
        worst_adam_weight =
            std::max(worst_adam_weight, rel(adam_weights[i].values, ref_weights[i].values));
      std::printf("seeds/002 CNN on %d processes, Adam: worst relative difference from one "
                  "device: losses %.3g, weights %.3g\n",
                  tessel::num_processes(), worst_adam_loss, worst_adam_weight);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error (process %d): %s\n", tessel::process_id(), e.what());
    return 1;
  }
  return tessel::testing::finish("convolution_test");
}
