// The test suite's names for servers/postgres_server.h (shared with `idem chaos`).
#pragma once

#include <chrono>
#include <string>

#include "servers/postgres_server.h"
#include "util/wait_for.h"

namespace idem::testing {
using servers::PostgresServer;
using servers::SharedPostgresServer;

// True once backend `pid` of `server` waits on a lock (a race it is part of really overlaps);
// false if it does not within `timeout`.
inline bool WaitForLockWait(const PostgresServer& server, int pid,
                            std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const std::string sql =
      "SELECT wait_event_type FROM pg_stat_activity WHERE pid = " + std::to_string(pid);
  return WaitFor([&] { return server.Query("postgres", sql) == "Lock"; }, timeout);
}

}  // namespace idem::testing
