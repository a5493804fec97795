// The test suite's names for servers/postgres_server.h (shared with `idem chaos`).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "servers/postgres_server.h"

namespace idem::testing {
using servers::PostgresServer;
using servers::SharedPostgresServer;

// The URL of a new, empty database on the binary's shared server. If the server is not
// running, the calling test fails and gets a URL that cannot connect.
inline std::string FreshPostgresUrl() {
  PostgresServer& server = SharedPostgresServer();
  if (!server.error().empty()) {
    ADD_FAILURE() << server.error();
    return "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1";
  }
  return server.Url(server.CreateDatabase());
}
}  // namespace idem::testing
