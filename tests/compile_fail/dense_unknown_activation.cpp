// expect: unknown activation; use linear, relu, sigmoid, tanh or softmax
// A dense layer with a misspelt activation.
#include <tessel/layers.hpp>

using layer = tessel::layers::dense<10, {.activation = "rleu"}>;
// fix: .activation = "relu"

int main() { return layer::has_variables ? 0 : 1; }
