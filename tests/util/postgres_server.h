// The test suite's names for servers/postgres_server.h (shared with `idem chaos`).
#pragma once

#include "servers/postgres_server.h"

namespace idem::testing {
using servers::PostgresServer;
using servers::SharedPostgresServer;

}  // namespace idem::testing
