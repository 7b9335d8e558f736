// Model parallelism for a model that outgrows one device's memory share: a 4-layer MLP 8192 wide
// (4 x 8192 x 8192 kernels, 1.07 GB of weights; 4.3 GB with their gradients and Adam's moments),
// layers alternately column- and row-parallel (Megatron), trained with Adam on a fixed batch.
// On 1 process it is the same model on one device; on 2 processes (`mpiexec -n 2`) it runs on a
// 1x2 data x model mesh. Reports the median step time (slowest process), the bytes of weights and
// of optimizer state each process holds, and the bytes the layers' collectives moved per step
// against the bytes the plan lists.
//
//   model_parallel_bench [--steps N] [--warmup W] [--batch B]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

namespace {
using namespace tessel::layers;
using tessel::none;
using tessel::rule;

constexpr std::size_t width = 8192;
using mesh = tessel::device_mesh<tessel::axis<"data", 1>, tessel::axis<"model", 2>>;
using megatron = tessel::layout_map<mesh, rule<"l1/kernel", none, "model">, rule<"l1/bias", "model">,
                                    rule<"l2/kernel", "model", none>,
                                    rule<"l3/kernel", none, "model">, rule<"l3/bias", "model">,
                                    rule<"l4/kernel", "model", none>>;
template <class Dist>
using mlp = tessel::sequential<Dist, input<width>, dense<width, {.activation = "relu", .name = "l1"}>,
                               dense<width, {.activation = "relu", .name = "l2"}>,
                               dense<width, {.activation = "relu", .name = "l3"}>,
                               dense<width, {.name = "l4"}>>;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double max_over_ranks(double v) {
  if (tessel::num_processes() > 1) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

template <class Model>
int run(int steps, int warmup, std::size_t batch) {
  Model model;
  model.compile({.optimizer = "adam", .loss = "mse"});
  tessel::array<float> x({batch, width}), y({batch, width});
  tessel::random::stream s(3, 4);
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = 2.0f * s.uniform(i) - 1.0f;
  for (std::size_t i = 0; i < y.size(); ++i) y.values[i] = s.uniform(x.size() + i);
  for (int i = 0; i < warmup; ++i) model.train_on_batch(x, y);
  std::vector<double> step_s;
  std::size_t moved = 0;
  for (int i = 0; i < steps; ++i) {
    if (tessel::num_processes() > 1) MPI_Barrier(MPI_COMM_WORLD);
    if constexpr (Model::model_parallel) model.clear_collectives();
    const double t0 = now();
    model.train_on_batch(x, y);
    step_s.push_back(max_over_ranks(now() - t0));
    if constexpr (Model::model_parallel) moved = model.collectives().bytes();
  }
  std::sort(step_s.begin(), step_s.end());
  double weights = 0, state = 0;
  for (auto* v : model.variables()) weights += static_cast<double>(v->value.size()) * 4;
  for (auto* v : model.get_optimizer().variables()) state += static_cast<double>(v->value.size()) * 4;
  std::size_t planned = 0;
  if constexpr (Model::model_parallel) {
    const auto d = Model::describe(&tessel::loss_rules::elementwise, 2);
    const auto p = tessel::plan_model(Model::distribution::value, model.mesh().shape(), d, batch);
    for (const auto& st : p)
      if (st.role != tessel::step_role::loss) planned += st.step.bytes;
  }
  if (tessel::process_id() == 0)
    std::printf("RESULT model_parallel processes=%d batch=%zu ms_per_step=%.1f "
                "weight_mb_per_process=%.1f optimizer_mb_per_process=%.1f "
                "collective_mb_per_step=%.2f planned_mb_per_step=%.2f\n",
                tessel::num_processes(), batch, step_s[step_s.size() / 2] * 1e3, weights / 1e6,
                state / 1e6, static_cast<double>(moved) / 1e6, static_cast<double>(planned) / 1e6);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    int steps = 3, warmup = 1;
    std::size_t batch = 32;
    for (int i = 1; i + 1 < argc; ++i) {
      if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--warmup") == 0) warmup = std::atoi(argv[++i]);
      else if (std::strcmp(argv[i], "--batch") == 0) batch = std::strtoul(argv[++i], nullptr, 10);
    }
    if (tessel::num_processes() == 1) return run<mlp<tessel::one_device>>(steps, warmup, batch);
    return run<mlp<tessel::model_parallel<megatron, "data">>>(steps, warmup, batch);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
}
