// expect: not_a_metric_on_this_backend<hit_rate, tessel::backend::host>
// A metric type with a name but no local_sum<B> for the model's backend.
#include <tessel/tessel.hpp>

struct hit_rate {
  std::string name = "hit_rate";
};
// fix: give it `template <class B> void local_sum(const tessel::metrics::metric_call<B>&) const`.

using namespace tessel::layers;

int main() {
  tessel::basic_sequential<tessel::backend::host, tessel::one_device, input<4>, dense<2>> model;
  model.compile("sgd", "mse", {hit_rate{}});
}
