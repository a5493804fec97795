#include "pg/pg_connection.h"

#include <poll.h>

#include <cstring>
#include <utility>

namespace idem::internal::pg {
namespace {

using Clock = std::chrono::steady_clock;

std::string TrimmedError(const char* message) {
  std::string text = message != nullptr ? message : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text.empty() ? "unknown error" : text;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

// ---- PgParams --------------------------------------------------------------------------------

PgParams& PgParams::Text(std::string value) {
  lengths_.push_back(static_cast<int>(value.size()));
  values_.push_back(std::move(value));
  null_.push_back(false);
  formats_.push_back(0);
  return *this;
}

PgParams& PgParams::Bytes(std::string value) {
  Text(std::move(value));
  formats_.back() = 1;
  return *this;
}

PgParams& PgParams::Null() {
  Text("");
  null_.back() = true;
  return *this;
}

const char* const* PgParams::values() const {
  pointers_.clear();
  for (size_t i = 0; i < values_.size(); ++i) {
    pointers_.push_back(null_[i] ? nullptr : values_[i].data());
  }
  return pointers_.data();
}

// ---- errors ----------------------------------------------------------------------------------

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

// ---- binary columns --------------------------------------------------------------------------

bool ColumnIsNull(const PGresult* result, int row, int column) {
  return PQgetisnull(result, row, column) != 0;
}

std::string_view ColumnBytes(const PGresult* result, int row, int column) {
  return {PQgetvalue(result, row, column),
          static_cast<size_t>(PQgetlength(result, row, column))};
}

Result<int64_t> ColumnInt(const PGresult* result, int row, int column) {
  if (ColumnIsNull(result, row, column)) {
    return DataLossError("column " + std::to_string(column) + " is NULL");
  }
  const std::string_view bytes = ColumnBytes(result, row, column);
  if (bytes.size() != 1 && bytes.size() != 2 && bytes.size() != 4 && bytes.size() != 8) {
    return DataLossError("column " + std::to_string(column) + " is not a binary integer");
  }
  uint64_t value = 0;
  for (unsigned char c : bytes) value = (value << 8) | c;
  // Sign-extend the narrower widths.
  const int bits = static_cast<int>(bytes.size()) * 8;
  if (bits < 64 && (value >> (bits - 1)) != 0) value |= ~uint64_t{0} << bits;
  return static_cast<int64_t>(value);
}

// ---- PgConnection ----------------------------------------------------------------------------

Result<std::unique_ptr<PgConnection>> PgConnection::Connect(
    const std::vector<std::string>& keywords, const std::vector<std::string>& values,
    std::chrono::milliseconds reply_timeout) {
  std::vector<const char*> k, v;
  for (const auto& s : keywords) k.push_back(s.c_str());
  for (const auto& s : values) v.push_back(s.c_str());
  k.push_back(nullptr);
  v.push_back(nullptr);
  PGconn* conn = PQconnectdbParams(k.data(), v.data(), /*expand_dbname=*/1);
  if (conn == nullptr) return UnavailableError("postgresql connect: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    Status error = UnavailableError("postgresql connect: " + TrimmedError(PQerrorMessage(conn)));
    PQfinish(conn);
    return error;
  }
  if (PQsetnonblocking(conn, 1) != 0) {
    PQfinish(conn);
    return UnavailableError("postgresql connect: cannot switch to non-blocking mode");
  }
  return std::unique_ptr<PgConnection>(new PgConnection(conn, reply_timeout));
}

PgConnection::~PgConnection() { PQfinish(conn_); }

Status PgConnection::Failed(std::string_view op, std::string what) {
  healthy_ = false;
  return UnavailableError("postgresql " + std::string(op) + ": " + what);
}

Result<PgResult> PgConnection::Collect(std::string_view op) {
  const auto deadline = Clock::now() + reply_timeout_;
  const int fd = PQsocket(conn_);
  auto wait = [&](short events) -> Status {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Failed(op, "no reply within " + std::to_string(reply_timeout_.count()) + " ms");
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) return Failed(op, std::string("poll: ") + std::strerror(errno));
    return Status::Ok();
  };
  for (;;) {  // send everything
    const int flushed = PQflush(conn_);
    if (flushed == 0) break;
    if (flushed < 0) return Failed(op, TrimmedError(PQerrorMessage(conn_)));
    IDEM_RETURN_IF_ERROR(wait(POLLIN | POLLOUT));
    if (PQconsumeInput(conn_) == 0) return Failed(op, TrimmedError(PQerrorMessage(conn_)));
  }
  PgResult first;  // the first result, or the first error among several
  for (;;) {
    while (PQisBusy(conn_) != 0) {
      IDEM_RETURN_IF_ERROR(wait(POLLIN));
      if (PQconsumeInput(conn_) == 0) return Failed(op, TrimmedError(PQerrorMessage(conn_)));
    }
    PGresult* next = PQgetResult(conn_);
    if (next == nullptr) break;
    const ExecStatusType s = PQresultStatus(next);
    const bool is_error = s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK;
    const bool have_error = first && PQresultStatus(first.get()) != PGRES_COMMAND_OK &&
                            PQresultStatus(first.get()) != PGRES_TUPLES_OK;
    if (!first || (is_error && !have_error)) {
      first.reset(next);
    } else {
      PQclear(next);
    }
  }
  if (!first) return Failed(op, TrimmedError(PQerrorMessage(conn_)));
  Status checked = CheckResult(first.get(), conn_, op);
  if (!checked.ok()) {
    if (PQstatus(conn_) != CONNECTION_OK) healthy_ = false;
    return checked;
  }
  return first;
}

Result<PgResult> PgConnection::Exec(std::string_view op, const std::string& sql) {
  if (PQsendQuery(conn_, sql.c_str()) == 0) {
    return Failed(op, TrimmedError(PQerrorMessage(conn_)));
  }
  return Collect(op);
}

Status PgConnection::Prepare(std::string_view op, const std::string& name,
                             const std::string& sql) {
  if (PQsendPrepare(conn_, name.c_str(), sql.c_str(), 0, nullptr) == 0) {
    return Failed(op, TrimmedError(PQerrorMessage(conn_)));
  }
  auto result = Collect(op);
  return result.ok() ? Status::Ok() : result.status();
}

Result<PgResult> PgConnection::ExecPrepared(std::string_view op, const std::string& name,
                                            const PgParams& params) {
  if (PQsendQueryPrepared(conn_, name.c_str(), params.size(), params.values(),
                          params.lengths(), params.formats(), /*resultFormat=*/1) == 0) {
    return Failed(op, TrimmedError(PQerrorMessage(conn_)));
  }
  return Collect(op);
}

}  // namespace idem::internal::pg
