// The transactional API of include/idem/postgres.h: the store's SQL calls, run with
// PQexecParams on the caller's connection and inside the caller's transaction.
#include <libpq-fe.h>

#include "idem/postgres.h"
#include "core/store_checks.h"
#include "pg/pg_errors.h"
#include "pg/pg_params.h"
#include "pg/pg_result.h"
#include "store/postgres/pg_calls.h"

namespace idem::postgres {
namespace {

using internal::pg::PgParams;
using internal::pg::PgResult;

Result<PgResult> Run(PGconn* conn, std::string_view op, const char* sql,
                     const PgParams& params) {
  if (conn == nullptr) return InvalidArgumentError("postgresql " + std::string(op) + ": no connection");
  const PGTransactionStatusType tx = PQtransactionStatus(conn);
  if (tx != PQTRANS_INTRANS) {
    return FailedPreconditionError(
        "postgresql " + std::string(op) +
        (tx == PQTRANS_INERROR ? ": the transaction is aborted; roll it back"
                               : ": must run inside the caller's transaction (BEGIN first)"));
  }
  PgResult result(PQexecParams(conn, sql, params.size(), nullptr, params.values(),
                               params.lengths(), params.formats(), /*resultFormat=*/1));
  if (result == nullptr) return internal::pg::FromPgResult(nullptr, conn, op);
  IDEM_RETURN_IF_ERROR(internal::pg::CheckResult(result.get(), conn, op));
  return result;
}

}  // namespace

Result<BeginOutcome> BeginInTransaction(PGconn* conn, const Scope& scope,
                                        const Fingerprint& fingerprint, Duration lease,
                                        const TransactionOptions& options) {
  IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
  auto result = Run(conn, "begin", internal::pg::kBeginSql,
                    internal::pg::BeginParams(scope, fingerprint, lease,
                                              options.abandoned_retention,
                                              internal::pg::NowFor(options.clock)));
  if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
  return internal::pg::DecodeBegin(result->get());
}

Result<CompleteOutcome> CompleteInTransaction(PGconn* conn, const Scope& scope,
                                              FencingToken token, const StoredResponse& response,
                                              Duration ttl, const TransactionOptions& options) {
  IDEM_RETURN_IF_ERROR(internal::CheckTtl(ttl));
  auto result = Run(conn, "complete", internal::pg::kCompleteSql,
                    internal::pg::CompleteParams(scope, token, response, ttl,
                                                 internal::pg::NowFor(options.clock)));
  if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
  auto done = internal::pg::DecodeBool(result->get());
  if (!done.ok()) return done.status();
  return *done ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
}

Result<ReleaseOutcome> ReleaseInTransaction(PGconn* conn, const Scope& scope, FencingToken token,
                                            const TransactionOptions& options) {
  auto result = Run(conn, "release", internal::pg::kReleaseSql,
                    internal::pg::ReleaseParams(scope, token, internal::pg::NowFor(options.clock)));
  if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
  auto done = internal::pg::DecodeBool(result->get());
  if (!done.ok()) return done.status();
  return *done ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
}

}  // namespace idem::postgres
