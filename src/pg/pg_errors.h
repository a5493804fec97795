// The one place PostgreSQL failures become idem statuses: a result's SQLSTATE (or the
// connection's state) decides the StatusCode.
#pragma once

#include <libpq-fe.h>

#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem::internal::pg {

// `result` may be null (the connection failed before a result arrived). Connection problems,
// timeouts, lock timeouts, deadlocks and a server shutting down are kUnavailable; a missing
// function or table (schema not created) and the wrong isolation level are
// kFailedPrecondition; bad data is kInvalidArgument; a ledger txn id reused for another account
// or amount (SQLSTATE ID001) is kAlreadyExists.
Status FromPgResult(const PGresult* result, PGconn* conn, std::string_view op);
// REQUIRES: result is not null. Ok when the status is PGRES_COMMAND_OK or PGRES_TUPLES_OK.
Status CheckResult(const PGresult* result, PGconn* conn, std::string_view op);

// libpq's error message without its trailing newline; "unknown error" when there is none.
std::string TrimmedError(const char* message);

}  // namespace idem::internal::pg
