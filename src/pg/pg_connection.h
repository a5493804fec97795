// One libpq connection whose every wait is bounded, plus the small value types around it:
// query parameters, an owned result, and the one place PostgreSQL errors become idem statuses.
//
// Thread safety: a PgConnection is used by one thread at a time (the pool hands it out).
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"

namespace idem::internal::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// Parameters of one statement: text for numbers and strings, binary for bytea, or NULL.
class PgParams {
 public:
  PgParams& Text(std::string value);
  PgParams& Bytes(std::string value);
  PgParams& Int(int64_t value) { return Text(std::to_string(value)); }
  PgParams& Null();

  int size() const { return static_cast<int>(values_.size()); }
  // Pointer arrays for libpq; valid while this object lives and is not changed.
  const char* const* values() const;
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  std::vector<std::string> values_;
  std::vector<bool> null_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
  mutable std::vector<const char*> pointers_;
};

// The one place PostgreSQL failures become statuses. `result` may be null (the connection
// failed before a result arrived). Connection problems, timeouts, lock timeouts, deadlocks and
// a server shutting down are kUnavailable; a missing function or table (schema not created)
// and the wrong isolation level are kFailedPrecondition; bad data is kInvalidArgument; a
// ledger txn id reused for another account or amount (SQLSTATE ID001) is kAlreadyExists.
Status FromPgResult(const PGresult* result, PGconn* conn, std::string_view op);
// REQUIRES: result is not null. Ok when the status is PGRES_COMMAND_OK or PGRES_TUPLES_OK.
Status CheckResult(const PGresult* result, PGconn* conn, std::string_view op);

// Binary-format result columns.
Result<int64_t> ColumnInt(const PGresult* result, int row, int column);
bool ColumnIsNull(const PGresult* result, int row, int column);
std::string_view ColumnBytes(const PGresult* result, int row, int column);

class PgConnection {
 public:
  // Connects with libpq's expanded keywords (the URL plus overrides). Blocks at most for
  // libpq's connect_timeout. kUnavailable when the server cannot be reached.
  static Result<std::unique_ptr<PgConnection>> Connect(const std::vector<std::string>& keywords,
                                                        const std::vector<std::string>& values,
                                                        std::chrono::milliseconds reply_timeout);
  ~PgConnection();
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // Runs a statement with text results. Waits at most reply_timeout for the reply; after that
  // the connection is marked broken and the call is kUnavailable.
  Result<PgResult> Exec(std::string_view op, const std::string& sql);
  // Prepares `sql` as the named statement on this connection.
  Status Prepare(std::string_view op, const std::string& name, const std::string& sql);
  // Runs a prepared statement with binary results.
  Result<PgResult> ExecPrepared(std::string_view op, const std::string& name,
                                const PgParams& params);

  // False once the connection failed or timed out: the pool drops it.
  bool healthy() const { return healthy_ && PQstatus(conn_) == CONNECTION_OK; }
  PGconn* raw() const { return conn_; }

 private:
  PgConnection(PGconn* conn, std::chrono::milliseconds reply_timeout)
      : conn_(conn), reply_timeout_(reply_timeout) {}
  // After a successful PQsend*: flushes, then collects the results, bounded by reply_timeout_.
  Result<PgResult> Collect(std::string_view op);
  Status Failed(std::string_view op, std::string what);

  PGconn* conn_;
  std::chrono::milliseconds reply_timeout_;
  bool healthy_ = true;
};

}  // namespace idem::internal::pg
