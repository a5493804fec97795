// The test suite's names for servers/redis_server.h (shared with `idem chaos`).
#pragma once

#include "servers/redis_server.h"

namespace idem::testing {
using servers::RedisServer;
}  // namespace idem::testing
