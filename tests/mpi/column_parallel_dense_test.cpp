// The first step of model-parallel training, built from the seams: a column-parallel dense layer
// (kernel laid out (None, 'model'), bias ('model',), output replicated) runs forward and backward
// on 1, 2 and 4 processes from its plan, and equals one device.
//   - The plan is the planner's for a two-layer model on mesh data=1 x model=n (the first layer
//     makes the column-parallel layer's input gradient needed): forward all_gather('model', dim 0)
//     of the bias and all_gather('model', dim 1) of the output; backward all_reduce('model') of
//     the input gradient. The test runs exactly the steps the plan lists, dispatched by role,
//     and checks that list.
//   - Each process initializes only its shard of the kernel and bias (shard_block + fill_block),
//     computes with the host backend's GEMM on its shard, and moves data with the collectives on
//     tensor dimensions (runtime run_step with the tensor's shape: dimension 1 is packed).
//   - Process 0 computes the layer on one device from the unsharded variables: the output, the
//     kernel and bias gradients (each process's shard of them) and the input gradient must agree
//     within 1e-5 relative.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using B = default_backend;
using mesh = device_mesh<axis<"data", 1>, axis<"model">>;
using map = layout_map<mesh, rule<"d/kernel", none, "model">, rule<"d/bias", "model">,
                       rule<"d/output", none, none>>;
using dist = model_parallel<map, "data">;
constexpr std::size_t batch = 6, in_features = 32, units = 24;
constexpr double tolerance = 1e-5;

using tessel::testing::check;
using tessel::testing::rel;
B::matrix upload(const std::vector<float>& v, std::size_t rows, std::size_t cols) {
  B::matrix m = B::make_matrix("m", rows, cols);
  B::upload(v, m);
  return m;
}
std::vector<float> download(const B::matrix& m) {
  std::vector<float> v(B::rows(m) * B::cols(m));
  B::download(m, v);
  return v;
}
// Columns [first, first + count) of a row-major (rows, cols) matrix.
std::vector<float> columns(const std::vector<float>& m, std::size_t rows, std::size_t cols,
                           std::size_t first, std::size_t count) {
  std::vector<float> out;
  for (std::size_t r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + static_cast<std::ptrdiff_t>(r * cols + first),
               m.begin() + static_cast<std::ptrdiff_t>(r * cols + first + count));
  return out;
}
std::vector<float> random_values(std::size_t n, std::uint64_t stream) {
  std::vector<float> v(n);
  initializers::fill("random_normal", random::stream(7, stream), 1, n, 1, v);
  return v;
}
// The variable's values on this device: its block of the global tensor, drawn alone.
std::vector<float> shard_of(const char* init, const char* path, const layout_value& layout,
                            const mesh_value& m, const shape_value& global,
                            const std::array<std::size_t, max_mesh_rank>& coords) {
  const block b = shard_block(layout, m, global, coords);
  std::size_t n = 1;
  for (std::size_t d = 0; d < global.rank; ++d) n *= b.extent[d];
  std::vector<float> out(n);
  initializers::fill_block(
      init, random::stream(1337, random::hash_name(path)), {global.extents.data(), global.rank},
      {b.offset.extents.data(), global.rank}, {b.extent.extents.data(), global.rank}, out);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    const auto pm = process_mesh<mesh>::bind();
    const std::size_t n = pm.mesh().extent(1), me = pm.coordinates()[1];
    const auto model_desc_ = describe_model(
        shape_value{40},
        std::array{dense_op<{.units = in_features, .activation = activation_kind::relu}>("a"),
                   dense_op<{.units = units}>("d")});
    const model_plan plan = plan_model(dist::value, pm.shape(), model_desc_, batch);
    check(plan.ok, "the plan is made");
    if (process_id() == 0) std::fputs(explain(plan, model_desc_).c_str(), stdout);

    // The plan's collectives, as the issue states them (none on one device).
    std::vector<std::string> listed;
    for (const auto& s : plan)
      listed.push_back(step_name(plan, s) + " " + to_string(s.step, plan.mesh));
    const std::vector<std::string> expected =
        n == 1 ? std::vector<std::string>{}
               : std::vector<std::string>{"bias all_gather('model', dim 0)",
                                          "output all_gather('model', dim 1)",
                                          "input gradient all_reduce('model')"};
    check(listed == expected,
          "the plan lists bias and output all_gathers and the input "
          "gradient's all_reduce");

    // This device's shards, drawn alone; the input and the output gradient, replicated.
    const shape_value w_shape{in_features, units}, b_shape{units};
    const layout_value w_layout = plan.variables[2].layout, b_layout = plan.variables[3].layout;
    std::array<std::size_t, max_mesh_rank> coords{};
    coords[1] = me;
    const auto w_local =
        shard_of("glorot_uniform", "d/kernel", w_layout, plan.mesh, w_shape, coords);
    const auto b_local = shard_of("random_normal", "d/bias", b_layout, plan.mesh, b_shape, coords);
    const std::size_t cols = units / n;
    const auto h = random_values(batch * in_features, 1), dy = random_values(batch * units, 2);

    // Forward and backward, running the plan's steps by role.
    std::vector<float> scratch, bias(units), y(batch * units), dx(batch * in_features);
    const B::matrix hm = upload(h, batch, in_features), wm = upload(w_local, in_features, cols);
    B::matrix y_local = B::make_matrix("y", batch, cols);
    B::gemm(false, false, 1.0f, hm, wm, 0.0f, y_local);
    const auto y_local_host = download(y_local);
    if (n == 1) bias = b_local, y = y_local_host;  // whole already: the plan gathers nothing
    B::matrix dy_local = upload(columns(dy, batch, units, me * cols, cols), batch, cols);
    B::matrix dw = B::make_matrix("dw", in_features, cols),
              dxm = B::make_matrix("dx", batch, in_features);
    B::gemm(true, false, 1.0f, hm, dy_local, 0.0f, dw);
    B::gemm(false, true, 1.0f, dy_local, wm, 0.0f, dxm);
    B::matrix db = B::make_matrix("db", 1, cols);
    B::column_sums(dy_local, db);
    dx = download(dxm);
    std::size_t executed = 0;
    for (const auto& s : plan) {
      ++executed;
      if (s.when == phase::forward && s.role == step_role::variable &&
          plan.variables[s.index].path.view() == "d/bias") {
        const std::array<std::size_t, 1> local{cols};
        comm::run_step(pm, s.step, std::span<const std::size_t>(local),
                       std::span<const float>(b_local), std::span<float>(bias), scratch);
      } else if (s.when == phase::forward && s.role == step_role::output) {
        const std::array<std::size_t, 2> local{batch, cols};
        comm::run_step(pm, s.step, std::span<const std::size_t>(local),
                       std::span<const float>(y_local_host), std::span<float>(y), scratch);
      } else if (s.when == phase::backward && s.role == step_role::operand_gradient) {
        const std::array<std::size_t, 2> local{batch, in_features};
        comm::run_step(pm, s.step, std::span<const std::size_t>(local), std::span<const float>(dx),
                       std::span<float>(dx), scratch);
      } else {
        --executed;
        check(false, "a planned step this layer does not run: " + to_string(s.step, plan.mesh));
      }
    }
    check(executed == listed.size(), "every planned step ran");
    for (std::size_t r = 0; r < batch; ++r)  // the bias, replicated after its all_gather
      for (std::size_t c = 0; c < units; ++c) y[r * units + c] += bias[c];

    // One device, from the unsharded variables.
    std::vector<float> w_full(in_features * units), b_full(units);
    initializers::fill("glorot_uniform", random::stream(1337, random::hash_name("d/kernel")),
                       in_features, units, 2, w_full);
    initializers::fill("random_normal", random::stream(1337, random::hash_name("d/bias")), 1, units,
                       1, b_full);
    const B::matrix wf = upload(w_full, in_features, units), dyf = upload(dy, batch, units);
    B::matrix yf = B::make_matrix("yf", batch, units),
              dwf = B::make_matrix("dwf", in_features, units),
              dxf = B::make_matrix("dxf", batch, in_features),
              dbf = B::make_matrix("dbf", 1, units);
    B::gemm(false, false, 1.0f, hm, wf, 0.0f, yf);
    B::gemm(true, false, 1.0f, hm, dyf, 0.0f, dwf);
    B::gemm(false, true, 1.0f, dyf, wf, 0.0f, dxf);
    B::column_sums(dyf, dbf);
    auto y_ref = download(yf);
    for (std::size_t r = 0; r < batch; ++r)
      for (std::size_t c = 0; c < units; ++c) y_ref[r * units + c] += b_full[c];
    const double e_w = rel(w_local, columns(w_full, in_features, units, me * cols, cols));
    const double e_y = rel(y, y_ref);
    const double e_dw =
        rel(download(dw), columns(download(dwf), in_features, units, me * cols, cols));
    const double e_db = rel(download(db), columns(download(dbf), 1, units, me * cols, cols));
    const double e_dx = rel(dx, download(dxf));
    check(e_w == 0, "the kernel shard drawn alone is the slice of the whole kernel");
    check(e_y <= tolerance, "output: " + std::to_string(e_y));
    check(e_dw <= tolerance, "kernel gradient shard: " + std::to_string(e_dw));
    check(e_db <= tolerance, "bias gradient shard: " + std::to_string(e_db));
    check(e_dx <= tolerance, "input gradient: " + std::to_string(e_dx));
    double worst = std::max({e_y, e_dw, e_db, e_dx});
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (process_id() == 0)
      std::printf(
          "column-parallel dense on %zu processes: worst relative difference from one "
          "device %.3g (tolerance %.0e)\n",
          n, worst, tolerance);
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("column_parallel_dense_test");
}
