// expect: layout_rank_mismatch<2, 3>
// A rank-2 layout applied to a rank-3 tensor of shape (16, 28, 28).
// Expected diagnostic: tessel::diagnostic::layout_rank_mismatch<2, 3> (layout rank, tensor rank).
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Layout = tessel::tensor_layout<Mesh, tessel::none, "model">;
// fix: using Layout = tessel::tensor_layout<Mesh, tessel::none, tessel::none, "model">;

constexpr auto local = tessel::local_shape_v<Layout, tessel::shape<16, 28, 28>>;

int main() {}
