// The seeds/000 ModelParallel MLP: its layouts and communication plan on the four 8-device
// meshes 8x1, 4x2, 2x4 and 1x8, computed when this program compiles, and d1's kernel drawn by
// visualize_sharding on each.
#include <cstdio>
#include <tessel/tessel.hpp>

namespace {

using tessel::none;
using tessel::rule;

// Input(28, 28, 1) -> Flatten -> Dense(200, relu, no bias, "d1") -> Dropout(0.4)
//   -> Dense(10, softmax, "d2"); mean squared error.
constexpr tessel::model_desc seed_mlp = tessel::describe_model(
    tessel::shape_value{28, 28, 1},
    std::array{
        tessel::flatten_op("flatten"),
        tessel::dense_op<{
            .units = 200, .use_bias = false, .activation = tessel::activation_kind::relu}>("d1"),
        tessel::dropout_op("dropout"),
        tessel::dense_op<{.units = 10, .activation = tessel::activation_kind::softmax}>("d2")},
    &tessel::loss_rules::elementwise);

constexpr std::size_t global_batch = 16;

template <std::size_t Data, std::size_t Model>
void explain_on_mesh() {
  using mesh = tessel::device_mesh<tessel::axis<"data", Data>, tessel::axis<"model", Model>>;
  using map = tessel::layout_map<mesh, rule<"d1/kernel", none, "model">, rule<"d1/bias", "model">,
                                 rule<"d2/output", "data", none>>;
  using distribution = tessel::model_parallel<map, "data">;
  constexpr const tessel::model_plan& plan =
      tessel::model_plan_v<distribution, seed_mlp, global_batch>;
  std::printf("== ModelParallel, mesh %zux%zu ==\n%s", Data, Model,
              tessel::explain(plan, seed_mlp).c_str());
  // Which device holds which block of d1's kernel (jax.debug.visualize_array_sharding's grid).
  const tessel::variable_plan& d1 = *plan.variable("d1/kernel");
  std::printf("d1/kernel %s:\n%s\n", tessel::to_string(d1.layout, plan.mesh).c_str(),
              tessel::visualize_sharding(d1.shape, d1.layout, plan.mesh).c_str());
}

}  // namespace

int main() {
  explain_on_mesh<8, 1>();
  explain_on_mesh<4, 2>();
  explain_on_mesh<2, 4>();
  explain_on_mesh<1, 8>();
}
