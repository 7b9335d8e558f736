// What the strategy tests share (strategy_test.cpp, strategy_reduction_test.cpp): the model, and
// the comparisons with one device of an uneven global batch and of fit.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace tessel::testing {

template <class Dist>
using mlp = sequential<Dist, layers::input<12>, layers::dense<16, {.activation = "relu"}>,
                       layers::dense<4>>;

inline bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// The largest relative difference between two models' weights (infinity when they hold
// different numbers of arrays).
inline double worst_weights(const std::vector<array<float>>& a,
                            const std::vector<array<float>>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, rel(a[i].values, b[i].values));
  return worst;
}
// The same over two state trees' optimizer variables (infinity when their paths differ).
template <class Tree>
double worst_optimizer_state(const Tree& a, const Tree& b) {
  const auto &va = a.optimizer_variables, &vb = b.optimizer_variables;
  if (va.size() != vb.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (va[i].path != vb[i].path) return INFINITY;
    worst = std::max(worst, rel(va[i].numpy(), vb[i].numpy()));
  }
  return worst;
}

// Steps `from` .. `from + steps` of 16 rows each, trained by both models on the same batches.
template <class A, class B>
void train_both(A& a, B& b, const data_set& d, std::size_t from, std::size_t steps) {
  for (std::size_t step = from; step < from + steps; ++step) {
    const auto x = data::slice_rows(d.x, step * 16, step * 16 + 16);
    const auto y = data::slice_rows(d.y, step * 16, step * 16 + 16);
    a.train_on_batch(x, y);
    b.train_on_batch(x, y);
  }
}

// 20 steps of a global batch of 10 (split unevenly over 4 processes), against one device.
template <class Dist>
void uneven(const char* what, const testing::data_set& d) {
  mlp<Dist> a;
  mlp<one_device> b;
  a.compile({.optimizer = "sgd", .loss = "mse"});
  b.compile({.optimizer = "sgd", .loss = "mse"});
  a.set_weights(b.get_weights());
  double worst_loss = 0;
  for (std::size_t step = 0; step < 20; ++step) {
    const std::size_t first = (step * 10) % (d.x.rows() - 10);
    const auto x = data::slice_rows(d.x, first, first + 10);
    const auto y = data::slice_rows(d.y, first, first + 10);
    worst_loss = std::max(worst_loss, rel(*find_log(a.train_on_batch(x, y), "loss"),
                                          *find_log(b.train_on_batch(x, y), "loss")));
  }
  const double worst_weight = worst_weights(a.get_weights(), b.get_weights());
  check(worst_loss <= 1e-5 && worst_weight <= 1e-5,
        std::string(what) + ": a global batch of 10 equals one device (loss " +
            std::to_string(worst_loss) + ", weights " + std::to_string(worst_weight) + ")");
}

// A fresh model whose first step leaves some processes no rows (a global batch of 1 on 2 or more
// processes, of 3 on 4) trains as one device: their gradients are zero and the loss is the mean
// over the rows that exist. Two steps (1 row then 3, or 3 then 1) with Adam, whose slots the
// first step makes; the losses, the weights and predict in batches of 3.
template <class Dist>
void empty_replicas(const char* what, const testing::data_set& d) {
  double worst_loss = 0, worst_weight = 0, worst_prediction = 0;
  for (const std::size_t first : {std::size_t{1}, std::size_t{3}}) {
    mlp<Dist> a;
    mlp<one_device> b;
    a.compile({.optimizer = "adam", .loss = "mse"});
    b.compile({.optimizer = "adam", .loss = "mse"});
    std::size_t at = 0;
    for (const std::size_t rows : {first, 4 - first}) {
      const auto x = data::slice_rows(d.x, at, at + rows);
      const auto y = data::slice_rows(d.y, at, at + rows);
      worst_loss = std::max(worst_loss, rel(*find_log(a.train_on_batch(x, y), "loss"),
                                            *find_log(b.train_on_batch(x, y), "loss")));
      at += rows;
    }
    worst_weight = std::max(worst_weight, worst_weights(a.get_weights(), b.get_weights()));
    const auto xt = data::slice_rows(d.x, 0, 5);
    worst_prediction =
        std::max(worst_prediction, rel(a.predict(xt, 3).values, b.predict(xt, 3).values));
  }
  check(worst_loss <= 1e-5 && worst_weight <= testing::adam_weight_tolerance &&
            worst_prediction <= 1e-5,
        std::string(what) +
            ": a first step that leaves some processes no rows equals one device (loss " +
            std::to_string(worst_loss) + ", weights " + std::to_string(worst_weight) +
            ", predictions " + std::to_string(worst_prediction) + ")");
  if (process_id() == 0)
    std::printf(
        "%s: empty replicas, worst relative difference from one device: loss %.2e, weights "
        "%.2e, predictions %.2e\n",
        what, worst_loss, worst_weight, worst_prediction);
}

// fit for 2 epochs over 100 samples in batches of 10 (the last ones split unevenly over 4
// processes), against one device: the losses of every epoch, the weights and the optimizer state.
template <class Dist>
void fit_equal(const char* what, const testing::data_set& d) {
  mlp<Dist> a;
  mlp<one_device> b;
  a.compile({.optimizer = "adam", .loss = "mse"});
  b.compile({.optimizer = "adam", .loss = "mse"});
  a.set_weights(b.get_weights());
  const auto x = data::slice_rows(d.x, 0, 100), y = data::slice_rows(d.y, 0, 100);
  const auto ds = from_tensor_slices(x, y).batch(10);
  const history ha = a.fit(ds, {.epochs = 2, .verbose = 0});
  const history hb = b.fit(ds, {.epochs = 2, .verbose = 0});
  double worst_loss = 0;
  for (std::size_t e = 0; e < 2; ++e)
    worst_loss = std::max(worst_loss, rel(ha.history.at("loss")[e], hb.history.at("loss")[e]));
  const double worst_weight = worst_weights(a.get_weights(), b.get_weights());
  const double worst_state = worst_optimizer_state(a.get_state_tree(), b.get_state_tree());
  check(worst_loss <= 1e-5 && worst_weight <= testing::adam_weight_tolerance &&
            worst_state <= testing::adam_weight_tolerance,
        std::string(what) + ": fit equals one device (loss " + std::to_string(worst_loss) +
            ", weights " + std::to_string(worst_weight) + ", optimizer state " +
            std::to_string(worst_state) + ")");
  if (process_id() == 0)
    std::printf(
        "%s: fit, worst relative difference from one device: loss %.2e, weights %.2e, "
        "optimizer state %.2e\n",
        what, worst_loss, worst_weight, worst_state);
}

}  // namespace tessel::testing
