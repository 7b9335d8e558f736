// expect: at most one mesh axis may be sized at run time
// A mesh with two axes sized at run time cannot be laid over the processes: how to split the
// process count between "data" and "model" is not known.
#include <tessel/tessel.hpp>

using mesh = tessel::device_mesh<tessel::axis<"data">, tessel::axis<"model">>;
// fix: using mesh = tessel::device_mesh<tessel::axis<"data">, tessel::axis<"model", 4>>;

int main(int argc, char** argv) {
  tessel::initialize guard(argc, argv);
  auto pm = tessel::process_mesh<mesh>::bind();
  return static_cast<int>(pm.size());
}
