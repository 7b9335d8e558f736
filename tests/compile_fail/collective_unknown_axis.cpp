// expect: axis_not_in_mesh<tessel::fixed_string<6>\{"modle"\}, tessel::device_mesh<
// comm::all_reduce<"modle"> sums over an axis the data x model mesh does not have.
// Expected diagnostic: tessel::diagnostic::axis_not_in_mesh<"modle", Mesh>.
#include <span>

#include <tessel/runtime/collectives.hpp>

using Mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;

void sum_gradients(const tessel::process_mesh<Mesh>& pm, std::span<float> grads) {
  tessel::comm::all_reduce<"modle">(pm, grads);
  // fix:   tessel::comm::all_reduce<"model">(pm, grads);
}

int main() {}
