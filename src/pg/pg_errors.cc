#include "pg/pg_errors.h"

namespace idem::internal::pg {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string TrimmedError(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown error" : text;
}

Status FromPgResult(const PGresult* result, PGconn* conn, std::string_view op) {
  std::string message = "postgresql " + std::string(op) + ": ";
  const char* sqlstate = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  if (result != nullptr && PQresultErrorMessage(result)[0] != '\0') {
    message += TrimmedError(PQresultErrorMessage(result));
  } else {
    message += TrimmedError(conn != nullptr ? PQerrorMessage(conn) : nullptr);
  }
  const std::string_view code = sqlstate != nullptr ? sqlstate : "";
  if (code.empty() || (conn != nullptr && PQstatus(conn) != CONNECTION_OK)) {
    return UnavailableError(std::move(message));
  }
  message += " (SQLSTATE " + std::string(code) + ")";
  if (StartsWith(code, "08") || StartsWith(code, "53") || StartsWith(code, "57") ||
      StartsWith(code, "40") || code == "55P03" || code == "58000" || code == "58030") {
    return UnavailableError(std::move(message));  // connection, resources, shutdown, timeouts
  }
  if (StartsWith(code, "42") || code == "55000" || StartsWith(code, "3F") ||
      StartsWith(code, "25")) {
    return FailedPreconditionError(std::move(message));  // no schema, wrong transaction state
  }
  // idem's own SQLSTATEs (class ID), raised by the worker layer (sql/schema/worker.sql).
  if (code == "ID001") return AlreadyExistsError(std::move(message));  // ledger txn id reused
  if (code == "ID002") return FailedPreconditionError(std::move(message));  // ledger immutable
  if (StartsWith(code, "22")) return InvalidArgumentError(std::move(message));
  if (StartsWith(code, "XX")) return DataLossError(std::move(message));
  return InternalError(std::move(message));
}

Status CheckResult(const PGresult* result, PGconn* conn, std::string_view op) {
  const ExecStatusType status = PQresultStatus(result);
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return Status::Ok();
  return FromPgResult(result, conn, op);
}

}  // namespace idem::internal::pg
