// default_backend: the backend a program's models and tensors use unless told otherwise.
#pragma once

#include "host.hpp"
#include "interface.hpp"

namespace tessel {

using default_backend = backend::host;
static_assert(backend::backend_interface<default_backend>);

}  // namespace tessel
