// Functional models distributed equal one device: a residual block (dense, dense, add with the
// block's input, relu, dense), the same block after a layer (whose output's gradient sums the
// block's and the join's), layer normalization after a layer split by columns, and two branches
// joined by concatenate, each trained 20 steps (RMSprop, and Adam) under data_parallel on every
// process of the job, and, on 4 processes, under model_parallel on a 2x2 mesh: the residual block's
// pair of dense layers split as a Megatron pair (column- then row-parallel, its output a partial
// sum the add completes), the branches' kernels split by columns (their outputs gathered by the
// concatenate). Losses, accuracy, every weight, predictions and evaluate against one device; the
// collectives of a further step are the plan's. A user's loss (tests/support/user_losses.hpp's
// Huber) trains so too, under data_parallel and over classes split on 2x2; a user's loss with no
// form for split rows is refused there.
#include <tessel/tessel.hpp>

#include "../support/user_losses.hpp"
#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::compare;
using tessel::testing::make_data;

using x = input<32>;
using h = dense<32, {.name = "d2"}>::on<dense<64, {.activation = "relu", .name = "d1"}>::on<x>>;
using residual_out =
    dense<4, {.activation = "softmax", .name = "head"}>::on<relu<"relu">::on<add<"add">::on<x, h>>>;
template <class Dist>
using residual = functional<Dist, x, residual_out>;

using a = dense<16, {.activation = "relu", .name = "a"}>::on<x>;
using b = dense<8, {.activation = "tanh", .name = "b"}>::on<x>;
using branches_out =
    dense<4, {.activation = "softmax", .name = "out"}>::on<concatenate<"concat">::on<a, b>>;
template <class Dist>
using two_branch = functional<Dist, x, branches_out>;

// The join reads a layer's output that another layer reads too: its gradient sums both.
using pre = dense<32, {.activation = "tanh", .name = "pre"}>::on<x>;
using inner_h =
    dense<32, {.name = "d2"}>::on<dense<64, {.activation = "relu", .name = "d1"}>::on<pre>>;
using inner_out =
    dense<4, {.activation = "softmax", .name = "head"}>::on<add<"add">::on<pre, inner_h>>;
template <class Dist>
using inner_residual = functional<Dist, x, inner_out>;

// Layer normalization after a layer whose output is split by features: the rule gathers the
// features it normalizes together.
using normalized_out = dense<4, {.activation = "softmax", .name = "head"}>::on<layer_normalization<{
    .name = "ln"}>::on<dense<64, {.activation = "relu", .name = "d1"}>::on<x>>>;
template <class Dist>
using normalized = functional<Dist, x, normalized_out>;

// Logits whose classes stay split over "model" on 2x2: binary cross-entropy on logits sums each
// device's own elements (an element-wise loss).
using logits_out = dense<4, {.name = "head"}>::on<relu<"relu">::on<add<"add">::on<x, h>>>;
template <class Dist>
using residual_logits = functional<Dist, x, logits_out>;

// A user's cross-entropy with no form for split rows (no compute_split): refused over split
// classes, with what to do.
struct whole_row_crossentropy {
  std::string name = "whole_row_crossentropy";
  const loss_rule* plan_rule() const { return &loss_rules::crossentropy; }
  template <class B>
  void compute(const loss_call<B>& c) const {
    B::crossentropy_on_probabilities(c.local(), typename B::index_vector(), c.targets, c.grad,
                                     c.grad_scale, epsilon, c.sums, c.slot);
  }
};

using mesh_2x2 = device_mesh<axis<"data", 2>, axis<"model", 2>>;
using residual_map = layout_map<mesh_2x2, rule<"d1/kernel", none, "model">,
                                rule<"d1/bias", "model">, rule<"d2/kernel", "model", none>>;
using split_head_map = layout_map<mesh_2x2, rule<"d1/kernel", none, "model">,
                                  rule<"d1/bias", "model">, rule<"d2/kernel", "model", none>,
                                  rule<"head/kernel", none, "model">, rule<"head/bias", "model">>;
using branches_map = layout_map<mesh_2x2, rule<"a/kernel", none, "model">, rule<"a/bias", "model">,
                                rule<"b/kernel", none, "model">, rule<"b/bias", "model">>;
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    const auto d = make_data(64, 32, 4);
    compare<residual<data_parallel<>>, residual<one_device>>("residual block, data_parallel", d.x,
                                                             d.y);
    compare<residual<data_parallel<>>, residual<one_device>>(
        "residual block, data_parallel with Adam", d.x, d.y, "adam");
    compare<two_branch<data_parallel<>>, two_branch<one_device>>("two branches, data_parallel", d.x,
                                                                 d.y);
    compare<inner_residual<data_parallel<>>, inner_residual<one_device>>(
        "inner residual block, data_parallel", d.x, d.y);
    compare<normalized<data_parallel<>>, normalized<one_device>>(
        "layer normalization, data_parallel", d.x, d.y, "adam");
    compare<residual<data_parallel<>>, residual<one_device>>(
        "residual block, binary_crossentropy, data_parallel", d.x, d.y, "adam",
        losses::binary_crossentropy{});
    compare<residual_logits<data_parallel<>>, residual_logits<one_device>>(
        "residual block, a user's Huber loss, data_parallel", d.x, d.y, "adam", user::huber{});
    if (num_processes() == 4) {
      {
        // A metric that sums whole rows over classes split across devices is refused, on every
        // process, with what to do.
        residual_logits<model_parallel<split_head_map, "data">> m;
        m.compile({.optimizer = "sgd", .loss = "mse", .metrics = {"mae"}});
        const std::string message = tessel::testing::error_of([&] {
          m.train_on_batch(data::slice_rows(d.x, 0, 16), data::slice_rows(d.y, 0, 16));
        });
        tessel::testing::check(
            message.find("Metric mae sums whole rows, but the output's classes are split across "
                         "devices") != std::string::npos,
            "mae over split classes is refused: " + message);
      }
      {
        residual<model_parallel<split_head_map, "data">> m;
        m.compile({.optimizer = "sgd", .loss = whole_row_crossentropy{}});
        const std::string message = tessel::testing::error_of([&] {
          m.train_on_batch(data::slice_rows(d.x, 0, 16), data::slice_rows(d.y, 0, 16));
        });
        tessel::testing::check(
            message.find("whole_row_crossentropy: the output's classes are split across devices, "
                         "and this loss has no form for split rows (compute_split)") !=
                std::string::npos,
            "a user's loss without a split form over split classes is refused: " + message);
      }
      compare<residual_logits<model_parallel<split_head_map, "data">>, residual_logits<one_device>>(
          "residual block, binary_crossentropy on logits split over 'model' on 2x2", d.x, d.y,
          "rmsprop", losses::binary_crossentropy{.from_logits = true});
      compare<residual_logits<model_parallel<split_head_map, "data">>, residual_logits<one_device>>(
          "residual block, a user's Huber loss on logits split over 'model' on 2x2", d.x, d.y,
          "adam", user::huber{});
      compare<normalized<model_parallel<residual_map, "data">>, normalized<one_device>>(
          "layer normalization after d1 split by columns on 2x2", d.x, d.y, "adam");
      compare<inner_residual<model_parallel<residual_map, "data">>, inner_residual<one_device>>(
          "inner residual block on 2x2", d.x, d.y);
      compare<residual<model_parallel<residual_map, "data">>, residual<one_device>>(
          "residual block on 2x2", d.x, d.y);
      compare<residual<model_parallel<residual_map, "data">>, residual<one_device>>(
          "residual block on 2x2 with Adam", d.x, d.y, "adam");
      compare<two_branch<model_parallel<branches_map, "data">>, two_branch<one_device>>(
          "two branches on 2x2", d.x, d.y);
    }
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("functional_test");
}
