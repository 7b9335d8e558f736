// A program outside the tessel tree, built against the installed package: headers only
// (tessel::tessel) and with the compiled library (tessel::compiled, whose visualize_sharding
// comes from the installed static library).
#include <cstdio>
#include <tessel/tessel.hpp>

using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using kernel = tessel::tensor_layout<mesh, tessel::none, "model">;
constexpr auto local = tessel::local_shape_v<kernel, tessel::shape<784, 200>>;

int main() {
  std::printf("%zux%zu\n", local[0], local[1]);
  std::printf("%s", tessel::visualize_sharding(tessel::shape_value{784, 200}, kernel::value,
                                               mesh::value)
                        .c_str());
}
