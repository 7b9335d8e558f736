// tessel::tessel's second part: the templates over the host backend that do not depend on a
// model's type (core/compilation.hpp), instantiated once. src/tessel.cpp holds the non-template
// functions; the two compile side by side. This file sees those functions' declarations only
// (as a program does), so TESSEL_SOURCE, which the library's sources are given, is undone first;
// its `extern template` declarations are then followed by the definitions below, as C++ allows.
#if !defined(TESSEL_SEPARATE_COMPILATION)
#error \
    "compile src/tessel_templates.cpp with -DTESSEL_SEPARATE_COMPILATION (CMake's tessel::tessel does)"
#endif
#undef TESSEL_SOURCE

#include <tessel/tessel.hpp>

#include "backend_templates.hpp"

namespace tessel {
TESSEL_BACKEND_TEMPLATES(backend::host, comm::communicator)
TESSEL_DATASET_TEMPLATES(, float, float)
TESSEL_DATASET_TEMPLATES(, float, std::int32_t)
TESSEL_DESCRIBE_SAMPLES_TEMPLATES(, float)
TESSEL_DESCRIBE_SAMPLES_TEMPLATES(, std::int32_t)
namespace data {
TESSEL_ARRAY_OPS_TEMPLATES(, float)
TESSEL_ARRAY_OPS_TEMPLATES(, std::int32_t)
TESSEL_ARRAY_OPS_TEMPLATES(, std::uint8_t)
}  // namespace data
}  // namespace tessel
