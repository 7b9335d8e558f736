// tessel::ps's non-template code (ps/compilation.hpp), compiled once: the coordinator's
// scheduling, failures and transfers (ps/coordinator_core.hpp). The target defines
// TESSEL_PS_SOURCE.
#include <tessel/ps.hpp>
