// expect: optimizer_has_no_update_for_this_backend<lookahead, tessel::backend::host>
// An optimizer type with a name, hyperparameters and slots but no update<B> for the model's
// backend: compile() names the type, the backend and the missing member.
#include <tessel/tessel.hpp>

struct lookahead {
  double learning_rate = 0.01;
  static constexpr std::string_view class_name = "Lookahead";
  static constexpr std::string_view name = "lookahead";
  static constexpr auto fields() {
    return std::tuple{tessel::optimizers::field{"learning_rate", &lookahead::learning_rate}};
  }
  std::array<const char*, 3> slot_names() const { return {"slow", nullptr, nullptr}; }
};
// fix: give it `template <class B> void update(const tessel::optimizers::step<B>&) const`.

using namespace tessel::layers;

int main() {
  tessel::basic_sequential<tessel::backend::host, tessel::one_device, input<4>, dense<2>> model;
  model.compile(lookahead{}, "mean_squared_error");
}
