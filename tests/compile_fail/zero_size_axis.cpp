// expect: axis_size_must_be_positive<tessel::fixed_string<6>\{"model"\}>
// A mesh axis of size 0.
// Expected diagnostic: tessel::diagnostic::axis_size_must_be_positive<"model">.
#include <tessel/core.hpp>

using Model = tessel::axis<"model", 0>;
// fix: using Model = tessel::axis<"model", 4>;

constexpr auto size = Model::size;  // instantiates the axis and its checks

int main() {}
