// expect: axis_name_must_not_be_empty<0>
// A mesh axis with an empty name.
// Expected diagnostic: tessel::diagnostic::axis_name_must_not_be_empty.
#include <tessel/core.hpp>

using Data = tessel::axis<"", 8>;
// fix: using Data = tessel::axis<"data", 8>;

constexpr auto size = Data::size;

int main() {}
