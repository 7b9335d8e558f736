#pragma once
// Asynchronous training with parameter servers (TensorFlow's ParameterServerStrategy and
// ClusterCoordinator): link with tessel::ps, which adds ZeroMQ (libzmq3-dev, cppzmq-dev).
// Not part of tessel.hpp: programs that do not use it need no ZeroMQ.
#include "ps/backup_position.hpp"
#include "ps/cluster.hpp"
#include "ps/compilation.hpp"
#include "ps/coordinator.hpp"
#include "ps/coordinator_core.hpp"
#include "ps/messages.hpp"
#include "ps/partitioner.hpp"
#include "ps/security.hpp"
#include "ps/server.hpp"
#include "ps/server_core.hpp"
#include "ps/transport.hpp"
