// expect: training under model_parallel is not built yet
// A sequential model under model_parallel: its layouts plan (plan_model / explain print them), but
// training with sharded weights is not built yet, so the model type is refused with a message
// saying so and what to use instead.
#include <tessel/tessel.hpp>

using namespace tessel::layers;
using mesh = tessel::device_mesh<tessel::axis<"data", 2>, tessel::axis<"model", 4>>;
using map = tessel::layout_map<mesh, tessel::rule<"d1/kernel", tessel::none, "model">>;
using model_t = tessel::sequential<tessel::model_parallel<map, "data">, input<784>,
                                   dense<200, {.name = "d1"}>, dense<10>>;
// fix: using model_t = tessel::sequential<tessel::data_parallel<>, input<784>, ...>;

int main() { return static_cast<int>(model_t::layer_count); }
