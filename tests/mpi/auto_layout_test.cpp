// A model under model_parallel<auto_layout<Mesh>, "data">: the compiler chooses its layouts
// (columns, then rows: the Megatron pair) for the mesh of the job (2x2 on 4 processes, 2x4 on
// 8), and the model trains as on one device: 20 steps with RMSprop and with Adam, losses,
// accuracy, weights, predictions and evaluate; a further step's collectives are the plan's.
// The chosen layout map is printed as Keras code, and explain() prints it. Under a memory budget
// no layout fits, the compiler splits the state over "data" as well, and the model still trains
// as on one device.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>

#include "compare_models.hpp"
#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using namespace tessel::layers;
using tessel::testing::check;
using tessel::testing::compare;
using tessel::testing::make_data;

template <class Dist>
using block = sequential<Dist, input<64>, dense<256, {.activation = "relu", .name = "col"}>,
                         dense<64, {.activation = "tanh", .name = "row"}>,
                         dense<4, {.activation = "softmax", .name = "head"}>>;

template <std::size_t Model>
void run() {
  using mesh = device_mesh<axis<"data", 2>, axis<"model", Model>>;
  using automatic = block<model_parallel<auto_layout<mesh, {.global_batch = 16}>, "data">>;
  // What the compiler chose: a plain model_parallel over a layout_map, with the pair's rules.
  using chosen = typename automatic::distribution;
  constexpr distribution_value v = chosen::value;
  const std::string code = layout_map_code(v);
  check(code.find("layout_map[\"col/kernel\"] = (None, \"model\")\n"
                  "layout_map[\"col/bias\"] = (\"model\",)\n"
                  "layout_map[\"row/kernel\"] = (\"model\", None)\n") != std::string::npos,
        "the compiler chose columns then rows for the pair:\n" + code);
  if (process_id() == 0) std::printf("chosen on 2x%zu:\n%s", Model, code.c_str());
  {
    automatic m;
    const std::string text = m.explain(16);
    check(text.find("layouts chosen by auto_layout, as Keras code:\n" + code) != std::string::npos,
          "explain() prints the chosen layouts as Keras code:\n" + text);
    check(!block<model_parallel<layout_map<mesh>, "data">>::automatic_layouts &&
              automatic::automatic_layouts,
          "a model knows whether the compiler chose its layouts");
  }
  const auto data = make_data(64, 64, 4);
  const std::string name = "auto_layout on 2x" + std::to_string(Model);
  compare<automatic, block<one_device>>(name.c_str(), data.x, data.y);
  compare<automatic, block<one_device>>((name + " with Adam").c_str(), data.x, data.y, "adam");

  // A budget no layout fits (the pair's needs 286,016 B per device on 2x2, 149,824 on 2x4): the
  // compiler splits the state over "data" too (218,672 and 115,504 B), keeping the layouts.
  constexpr std::size_t budget = Model == 2 ? 240'000 : 130'000;
  using tight = block<
      model_parallel<auto_layout<mesh, {.global_batch = 16, .memory_budget = budget}>, "data">>;
  constexpr distribution_value t = tight::distribution::value;
  check(t.shard == shard_state::gradients && layout_map_code(t).find(code) == 0 &&
            layout_map_code(t).find("# tessel also splits each process's optimizer state and "
                                    "gradients over \"data\"") != std::string::npos,
        "within the budget the compiler splits the state as well:\n" + layout_map_code(t));
  {
    tight m;
    check(m.memory(16).peak() <= budget,
          "the split state's plan fits the budget: " + std::to_string(m.memory(16).peak()));
  }
  compare<tight, block<one_device>>((name + " within a budget, its state split").c_str(), data.x,
                                    data.y, "adam");
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    if (num_processes() == 4)
      run<2>();
    else if (num_processes() == 8)
      run<4>();
    else
      check(false, "auto_layout_test runs on 4 or 8 processes");
  } catch (const std::exception& e) {
    check(false, std::string("unexpected exception: ") + e.what());
  }
  return tessel::testing::finish("auto_layout_test");
}
