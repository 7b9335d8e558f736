// A program outside the tessel tree, built against the installed package twice: with headers only
// (tessel::header_only) and with the compiled library (tessel::tessel, whose visualize_sharding,
// trainer core and saving come from the installed static library). It prints a layout, then
// trains a small model two steps and says whether the loss went down.
#include <cstdio>
#include <tessel/tessel.hpp>
#include <vector>

// With the compiled library, the kernels' dependencies stay inside it.
#if defined(TESSEL_SEPARATE_COMPILATION) && \
    (defined(KOKKOS_VERSION) || defined(CBLAS_H) || defined(LIBXSMM_H))
#error "a program linked with tessel::tessel includes Kokkos, the BLAS or libxsmm"
#endif

using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using kernel = tessel::tensor_layout<mesh, tessel::none, "model">;
constexpr auto local = tessel::local_shape_v<kernel, tessel::shape<784, 200>>;

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  std::printf("%zux%zu\n", local[0], local[1]);
  std::printf("%s", tessel::visualize_sharding(tessel::shape_value{784, 200}, kernel::value,
                                               mesh::value)
                        .c_str());
  using namespace tessel::layers;
  tessel::sequential<input<4>, dense<8, {.activation = "relu"}>, dense<2>> model;
  model.compile({.optimizer = "sgd", .loss = "mse"});
  std::vector<float> xs(32), ys(16);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) / 7.0f;
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i % 2);
  const tessel::array<float> x({8, 4}, xs), y({8, 2}, ys);
  const double first = *tessel::find_log(model.train_on_batch(x, y), "loss");
  const double second = *tessel::find_log(model.train_on_batch(x, y), "loss");
  std::printf("trained: loss %.6f then %.6f\n", first, second);
  return second < first ? 0 : 1;
}
