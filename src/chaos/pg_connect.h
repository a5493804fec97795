// libpq connections of `idem chaos` itself (its services, its evidence and its bookkeeping), with
// PostgreSQL's notices kept off the user's terminal when a fault explains them and shown when
// nothing does.
//
// libpq prints a notice, or an error the server sends while a connection is idle (a backend's
// "FATAL: terminating connection due to unexpected postmaster exit" when postgres_restart kills
// the server), on standard error unless the connection has a notice processor. Setting one
// after PQconnectdb is too late for a FATAL that arrives during the handshake, so Connect sets
// it before the connection starts (PQconnectStart).
#pragma once

#include <string>

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::chaos {

// Whether this run restarts its PostgreSQL (postgres_restart): then the notices a dying or
// recovering server sends are expected and dropped. Otherwise they are printed like any other
// warning or error. Set before the first Connect.
void ExpectPostgresRestarts(bool expected);

// PQconnectdb(conninfo) with the notice processor in place from the start: routine notices
// (NOTICE, INFO, LOG, DEBUG) and, with ExpectPostgresRestarts, those of a server going down or
// coming back are dropped; every other one is printed on standard error as
// "idem chaos: postgresql says: ...". Never null (libpq's out-of-memory aside); check PQstatus
// as after PQconnectdb. Waits at most 10 s for the server.
PGconn* Connect(const std::string& conninfo);

}  // namespace idem::chaos
