// TESSEL_FORCE_HOST keeps a program linked with tessel::cuda on the host (passes when it compiles).
#include <tessel/tessel.hpp>
#include <type_traits>

static_assert(std::is_same_v<tessel::default_backend, tessel::backend::host>,
              "TESSEL_FORCE_HOST: the default backend is the host");
