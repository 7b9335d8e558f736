// The largest MLP that trains on 2 processes within 2 GiB per process, under each shard_state,
// found by the memory plan when the program compiles and then trained. The MLP is the
// benchmarks' (input W -> 3 x dense W relu -> dense 10, Adam, global batch 256), its width W a
// multiple of 256; `--model deep` takes 12 hidden layers instead, deep enough that under
// shard_state::gradients the whole gradients take turns in a window of two layers, and under
// shard_state::weights the whole weights too (each process keeps its parts); the last row takes
// shard_state::weights without overlap, whose windows hold one layer. For each option the
// compiler takes the widest W whose plan fits the budget; at run time each chosen
// model trains 2 steps on 2 processes and the host backend's high-water mark is compared with
// the plan and the budget (the peak from before the model is built, which under
// shard_state::weights holds no whole weights: each process draws its parts alone).
//
//   mpiexec -n 2 largest_model_bench [--model wide|deep]
#include <array>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <utility>

namespace {
using namespace tessel;
using mesh2 = device_mesh<axis<"batch", 2>>;
constexpr std::size_t budget = std::size_t{2} << 30, batch = 256, step = 256, count = 24;

// An MLP of `Depth` hidden layers, its candidate widths from `First` x 256 on (24 of them).
template <std::size_t Depth, std::size_t First>
struct mlp {
  static constexpr std::size_t depth = Depth;
  template <std::size_t W>
  static constexpr model_desc desc = [] {
    std::array<op_desc, Depth + 1> ops{};
    for (std::size_t i = 0; i < Depth; ++i) {
      const char name[] = {'d', static_cast<char>('0' + (i + 1) / 10),
                           static_cast<char>('0' + (i + 1) % 10)};
      ops[i] =
          dense_op<{.units = W, .activation = activation_kind::relu}>(std::string_view(name, 3));
    }
    ops[Depth] = dense_op<{.units = 10}>("head");
    return describe_model(shape_value{W}, ops);
  }();
  // Whether candidate I's plan fits the budget, its gradients reduced as O says.
  template <shard_state S, gradient_options O, std::size_t I>
  static constexpr bool fits =
      memory_plan_v<data_parallel<mesh2, S>, desc<(First + I) * step>, batch, 2, O>.peak() <=
      budget;
  // The widest candidate in [Lo, Hi) whose plan fits the budget (0: none), by bisection (a plan's
  // peak grows with the width): the compiler plans 5 of the 24 candidates, not all of them.
  template <shard_state S, gradient_options O, std::size_t Lo, std::size_t Hi>
  static constexpr std::size_t widest_in() {
    if constexpr (Hi - Lo == 1) {
      return fits<S, O, Lo> ? (First + Lo) * step : 0;
    } else {
      constexpr std::size_t mid = Lo + (Hi - Lo) / 2;
      if constexpr (fits<S, O, mid>) return widest_in<S, O, mid, Hi>();
      else return widest_in<S, O, Lo, mid>();
    }
  }
  template <shard_state S, gradient_options O>
  static constexpr std::size_t widest = widest_in<S, O, 0, count>();
  template <std::size_t, class T>
  using same = T;
  template <shard_state S, std::size_t W, std::size_t... I>
  static auto model_of(std::index_sequence<I...>)
      -> sequential<data_parallel<mesh2, S>, layers::input<W>,
                    same<I, layers::dense<W, {.activation = "relu"}>>..., layers::dense<10>>;
  template <shard_state S, std::size_t W>
  using model = decltype(model_of<S, W>(std::make_index_sequence<Depth>{}));
};
using three = mlp<3, 16>;   // widths 4096 .. 9984
using twelve = mlp<12, 8>;  // widths 2048 .. 7936

template <class M, shard_state S, gradient_options O = gradient_options{}>
double train(const char* name, double baseline_params) {
  constexpr std::size_t W = M::template widest<S, O>;
  static_assert(W > 0, "largest_model_bench: no candidate width fits the budget");
  constexpr memory_plan plan =
      memory_plan_v<data_parallel<mesh2, S>, M::template desc<W>, batch, 2, O>;
  array<float> x({batch, W});
  array<std::int32_t> y({batch});
  for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i % 13) / 13.0f;
  for (std::size_t i = 0; i < batch; ++i) y.values[i] = static_cast<std::int32_t>(i % 10);
  const std::size_t before = get_memory_info().current;
  reset_memory_stats();
  double params = 0, loss = 0;
  {
    typename M::template model<S, W> m;
    m.set_gradient_options(O);
    m.compile({.optimizer = "adam", .loss = "sparse_categorical_crossentropy"});
    for (int i = 0; i < 2; ++i) loss = m.train_on_batch(x, y).front().second;
    params = static_cast<double>(m.count_params());
  }
  const double measured = static_cast<double>(get_memory_info().peak - before);
  if (process_id() == 0) {
    std::printf(
        "  shard_state::%-20s width %5zu: %6.1f M parameters (%.2fx), plan %7.1f MiB "
        "(gradients %6.1f MiB), measured peak %7.1f MiB of %zu MiB, loss %.3f\n",
        name, W, params / 1e6, baseline_params > 0 ? params / baseline_params : 1.0,
        static_cast<double>(plan.peak()) / (1 << 20),
        static_cast<double>(plan.gradients) / (1 << 20), measured / (1 << 20), budget >> 20, loss);
    std::printf(
        "RESULT largest depth=%zu shard=%s overlap=%d width=%zu params=%.0f plan_bytes=%zu "
        "peak_bytes=%.0f\n",
        M::depth, name, O.overlap ? 1 : 0, W, params, plan.peak(), measured);
  }
  if (measured > static_cast<double>(budget))
    throw runtime_error("largest_model_bench: the measured peak is over the budget");
  return params;
}

template <class M>
void run_all() {
  if (process_id() == 0)
    std::printf(
        "largest_model_bench: the widest MLP (input W, %zu x dense W, dense 10; Adam; "
        "global batch %zu) within %zu MiB per process on 2 processes\n",
        M::depth, batch, budget >> 20);
  const double none = train<M, shard_state::none>("none", 0);
  train<M, shard_state::optimizer>("optimizer", none);
  train<M, shard_state::gradients>("gradients", none);
  train<M, shard_state::weights>("weights", none);
  // Without overlap the windows hold one layer, not two (gradient_options::overlap).
  train<M, shard_state::weights, gradient_options{.overlap = false}>("weights, no overlap", none);
}
}  // namespace

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  try {
    const std::string model = argc > 2 && std::string(argv[1]) == "--model" ? argv[2] : "wide";
    if (model == "wide")
      run_all<three>();
    else if (model == "deep")
      run_all<twelve>();
    else
      throw value_error("largest_model_bench: --model is wide or deep, not " + model);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return 0;
}
