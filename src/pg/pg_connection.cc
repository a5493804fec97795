#include "pg/pg_connection.h"

#include <poll.h>

#include <cstring>
#include <utility>

#include "core/idle_socket.h"
#include "pg/pg_errors.h"

namespace idem::internal::pg {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

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

bool PgConnection::StillOpen() {
  if (!healthy()) return false;
  switch (internal::LookAtIdleSocket(PQsocket(conn_))) {
    case internal::IdleSocket::kQuiet:
      return true;
    case internal::IdleSocket::kClosed:
      healthy_ = false;
      return false;
    case internal::IdleSocket::kReadable:
      break;
  }
  // Something arrived between statements (a notice, a changed setting, or the server's last
  // words before it closes): libpq takes it in and says whether the connection survives.
  if (PQconsumeInput(conn_) == 0 || PQstatus(conn_) != CONNECTION_OK) healthy_ = false;
  return healthy_;
}

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
