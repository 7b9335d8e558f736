// expect: axis_not_in_mesh<tessel::fixed_string<6>\{"modle"\}, tessel::device_mesh<
// device_mesh::extent<"modle">() asks for the size of an axis the mesh does not have.
// Expected diagnostic: tessel::diagnostic::axis_not_in_mesh<"modle", Mesh>.
#include <cstddef>

#include <tessel/core.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;

std::size_t model_size(const Mesh& mesh) {
  return mesh.extent<"modle">();
  // fix:   return mesh.extent<"model">();
}

int main() { return static_cast<int>(model_size(Mesh{})); }
