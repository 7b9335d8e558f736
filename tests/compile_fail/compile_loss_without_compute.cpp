// expect: not_a_loss_on_this_backend<relative_error, tessel::backend::host>
// A loss type with a name and a planning rule but no compute<B> for the model's backend.
#include <tessel/tessel.hpp>

struct relative_error {
  static constexpr std::string_view name = "relative_error";
  const tessel::loss_rule* plan_rule() const { return &tessel::loss_rules::elementwise; }
};
// fix: give it `template <class B> void compute(const tessel::loss_call<B>&) const`.

using namespace tessel::layers;

int main() {
  tessel::basic_sequential<tessel::backend::host, tessel::one_device, input<4>, dense<2>> model;
  model.compile("sgd", relative_error{});
}
