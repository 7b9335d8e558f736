// expect: duplicate_layer_name<tessel::name_string\{"d1(\\000)*"\}>
// Two layers named "d1": Keras refuses a Sequential model whose layer names repeat.
// Expected diagnostic: tessel::diagnostic::duplicate_layer_name<"d1">.
#include <tessel/trainer/sequential.hpp>
#include <tessel/layers.hpp>

using namespace tessel::layers;
using model_t = tessel::sequential<input<784>, dense<200, {.name = "d1"}>,
                                   dense<10, {.name = "d1"}>>;
// fix: name the second layer "d2".

int main() { return static_cast<int>(model_t::layer_count); }
