// The test suite's names for servers/nats_server.h (shared with `idem chaos`).
#pragma once

#include "servers/nats_server.h"

namespace idem::testing {
using servers::NatsServer;
}  // namespace idem::testing
