// Everything tessel provides. Today that is the compile-time core; execution, layers and the
// model API are included here as they land.
#pragma once

#include "core.hpp"
