// expect: axis_used_twice_in_layout<tessel::name_string\{"model(\\000)*"\}>
// A tensor_layout shards two dimensions over the same mesh axis "model".
// Expected diagnostic: tessel::diagnostic::axis_used_twice_in_layout<"model">.
#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using Layout = tessel::tensor_layout<Mesh, "model", "model">;
// fix: using Layout = tessel::tensor_layout<Mesh, "data", "model">;

constexpr auto layout = Layout::value;

int main() {}
