// A layer whose op and planning rule disagree is stopped where the executor follows the plan's
// edge, naming the layer, what arrived and what was planned, rather than moving a tensor along a
// reshard the plan does not list. The test layer is an identity whose backward labels its
// input's gradient replicated, where its rule (a linear element-wise op's) planned it split over
// the batch axis, as the input comes.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;

struct mislabelled : stateless_layer {
  static constexpr std::string_view class_name = "Mislabelled";
  static constexpr std::string_view base_name = "mislabelled";
  static constexpr name_string given_name{"odd"};
  template <class... In>
  using on = node<mislabelled, In...>;
  static void keras_config(layers::keras_config&) {}
  template <class B>
  struct runtime {
    using matrix = typename B::matrix;
    using tensor = basic_dtensor<B>;
    runtime(const layer_info&, variable_store<B>&, std::uint64_t) {}
    template <class Reduce>
    const tensor& forward(const op_args<B>& a, const pass_context&, Reduce&) {
      return *a.operands[0];
    }
    template <class Reduce>
    op_gradients<B> backward(const op_args<B>& a, const matrix& dy, const op_grads<B>&,
                             const pass_context&, Reduce&) {
      op_gradients<B> out;
      if (a.wants_operand_gradients & 1u)
        out.operands[0] = a.operands[0]->like(dy).relabel(layout_value::replicated(2));
      return out;
    }
  };
};

using mesh = device_mesh<axis<"data", 2>>;
using map = layout_map<mesh, rule<"d1/kernel", none, none>>;
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    std::string message;
    try {
      sequential<model_parallel<map, "data">, input<8>, dense<8, {.name = "d1"}>, mislabelled,
                 dense<4, {.name = "d2"}>>
          m;
      m.compile({.optimizer = "sgd", .loss = "mse"});
      m.train_on_batch(array<float>({4, 8}), array<float>({4, 4}));
    } catch (const std::logic_error& e) {
      message = e.what();
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf("%s\n", message.c_str());
    check(message.find("tessel: layer 1's operand_gradient_used arrives laid out as ") !=
                  std::string::npos &&
              message.find("(None, None), where the plan has ('data', None)") !=
                  std::string::npos &&
              message.find("the layer's op and its planning rule disagree") != std::string::npos,
          "a layer whose op and rule disagree is stopped: " + message);
  } catch (const std::exception& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  return tessel::testing::finish("rule_disagreement_test");
}
