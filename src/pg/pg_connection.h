// One libpq connection whose every wait is bounded. Its statements' parameters (pg_params.h),
// results (pg_result.h) and errors (pg_errors.h) have files of their own.
//
// Thread safety: a PgConnection is used by one thread at a time (the pool hands it out).
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/status.h"
#include "pg/pg_params.h"
#include "pg/pg_result.h"

namespace idem::internal::pg {

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
  // For a connection between statements: whether it is still open, looked at without waiting
  // (one poll). The server closes an idle connection when it shuts down, restarts or ends the
  // session; a connection found closed is marked broken, so the caller can connect afresh
  // before sending anything rather than fail a statement on it.
  bool StillOpen();
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
