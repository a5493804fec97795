// The test suite's name for servers/nats_cluster.h (shared with `idem chaos`).
#pragma once

#include "servers/nats_cluster.h"

namespace idem::testing {
using servers::NatsCluster;
}  // namespace idem::testing
