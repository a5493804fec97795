// The test suite's names for servers/redis_server.h (shared with `idem chaos`).
#pragma once

#include <gtest/gtest.h>

#include "servers/redis_server.h"

namespace idem::testing {
using servers::RedisServer;

// One redis-server for the whole test binary, started on first use; tests keep apart by key
// prefix. A server that cannot start fails the calling test.
inline RedisServer& SharedRedisServer() {
  static RedisServer server;
  static const std::string error = server.Start();
  if (!error.empty()) ADD_FAILURE() << "cannot start redis-server: " << error;
  return server;
}
}  // namespace idem::testing
