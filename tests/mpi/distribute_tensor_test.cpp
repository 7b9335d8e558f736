// distribute_tensor (Keras's distribute_tensor, JAX's device_put): every process gives the same
// global array and keeps its block under the layout: rows over "data" and columns over "model"
// of a 2x2 mesh, rows over both axes at once, replicated, and a 1-D mesh sized at run time. Each
// block is compared with the slice of the global array it must hold; a layout of another rank
// and a dimension that does not divide are refused with the dimension named.
#include <string>
#include <tessel/model/distribute.hpp>
#include <tessel/tessel.hpp>
#include <vector>

#include "mpi_checks.hpp"

namespace {
using namespace tessel;
using tessel::testing::check;
using tessel::testing::error_of;

// The values of rows [r0, r0 + nr) and columns [c0, c0 + nc) of x (rank 2).
std::vector<float> slice(const array<float>& x, std::size_t r0, std::size_t nr, std::size_t c0,
                         std::size_t nc) {
  std::vector<float> out;
  for (std::size_t r = r0; r < r0 + nr; ++r)
    for (std::size_t c = c0; c < c0 + nc; ++c) out.push_back(x.values[r * x.shape[1] + c]);
  return out;
}
template <class B>
std::vector<float> host(const basic_dtensor<B>& t) {
  std::vector<float> v(t.size());
  B::download(t.local(), std::span<float>(v));
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  initialize guard(argc, argv);
  try {
    array<float> x({8, 6});
    for (std::size_t i = 0; i < x.size(); ++i) x.values[i] = static_cast<float>(i);
    const auto p = static_cast<std::size_t>(process_id());
    {
      using mesh = device_mesh<axis<"batch">>;
      const auto t = distribute_tensor<tensor_layout<mesh, "batch", none>>(x);
      const std::size_t n = static_cast<std::size_t>(num_processes()), rows = 8 / n;
      check(t.shard().offset[0] == p * rows && t.shard().extent[0] == rows,
            "1-D mesh: process " + std::to_string(p) + " holds rows " + std::to_string(p * rows));
      check(host(t) == slice(x, p * rows, rows, 0, 6), "1-D mesh: the block's values");
      const auto r = distribute_tensor<tensor_layout<mesh, none, none>>(x);
      check(host(r) == x.values, "replicated: every process holds the whole array");
    }
    if (num_processes() == 4) {
      using mesh = device_mesh<axis<"data", 2>, axis<"model", 2>>;
      const std::size_t data = p / 2, model = p % 2;  // devices are numbered row-major
      const auto t = distribute_tensor<tensor_layout<mesh, "data", "model">>(x);
      check(host(t) == slice(x, data * 4, 4, model * 3, 3), "2x2: rows by data, columns by model");
      const auto both = distribute_tensor<tensor_layout<mesh, axes<"data", "model">, none>>(x);
      check(host(both) == slice(x, p * 2, 2, 0, 6), "2x2: rows over both axes");
      const auto cols = distribute_tensor<tensor_layout<mesh, none, "data">>(x);
      check(host(cols) == slice(x, 0, 8, data * 3, 3), "2x2: columns by data, replicated on model");
      array<float> odd({7, 6}, std::vector<float>(42, 1.0f));
      const std::string e1 =
          error_of([&] { distribute_tensor<tensor_layout<mesh, "data", none>>(odd); });
      check(e1.find("dimension 0") != std::string::npos, "7 rows over 'data' (2) refused: " + e1);
      array<float> flat({48}, x.values);
      const std::string e2 =
          error_of([&] { distribute_tensor<tensor_layout<mesh, "data", none>>(flat); });
      check(e2.find("the array has rank 1 (shape (48,)) but the layout has rank 2") !=
                std::string::npos,
            "a layout of another rank refused: " + e2);
    }
  } catch (const std::exception& e) {
    return guard.fail(e);
  }
  return tessel::testing::finish("distribute_tensor_test");
}
