#include "worker/consumer_transactions.h"

#include <utility>

#include "pg/pg_result.h"

namespace idem::worker {
namespace {

// The inbox claim's prepared statement on the connection (PrepareClaim).
constexpr const char* kClaimStatement = "idem_consumer_inbox_claim";

}  // namespace

ConsumerTransactions::ConsumerTransactions(std::string conninfo, bool inbox,
                                           std::string inbox_consumer)
    : conninfo_(std::move(conninfo)), inbox_(inbox), inbox_consumer_(std::move(inbox_consumer)) {}

ConsumerTransactions::~ConsumerTransactions() {
  if (pg_ != nullptr) PQfinish(pg_);
}

bool ConsumerTransactions::connected() const { return PQstatus(pg_) == CONNECTION_OK; }

Status ConsumerTransactions::EnsureConnected() {
  if (pg_ == nullptr || PQstatus(pg_) == CONNECTION_BAD) claim_prepared_ = false;
  if (pg_ == nullptr) pg_ = PQconnectdb(conninfo_.c_str());
  else if (PQstatus(pg_) == CONNECTION_BAD) PQreset(pg_);
  if (PQstatus(pg_) != CONNECTION_OK) {
    std::string e = PQerrorMessage(pg_);
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    return UnavailableError("connect to PostgreSQL: " + e);
  }
  return Status::Ok();
}

bool ConsumerTransactions::Control(const char* sql, std::string_view expect, std::string* error) {
  PGresult* r = PQexec(pg_, sql);
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK && expect == PQcmdStatus(r);
  if (!ok) {
    *error = std::string(sql) + ": " +
             (PQresultStatus(r) == PGRES_COMMAND_OK ? std::string("answered ") + PQcmdStatus(r)
                                                    : std::string(PQerrorMessage(pg_)));
    while (!error->empty() && error->back() == '\n') error->pop_back();
  }
  PQclear(r);
  return ok;
}

void ConsumerTransactions::Rollback() {
  if (PQstatus(pg_) == CONNECTION_OK && PQtransactionStatus(pg_) != PQTRANS_IDLE) {
    PQclear(PQexec(pg_, "ROLLBACK"));
  }
}

Status ConsumerTransactions::PrepareClaim() {
  if (claim_prepared_) return Status::Ok();
  PQclear(PQexec(pg_, (std::string("DEALLOCATE ") + kClaimStatement).c_str()));  // may not exist
  PGresult* r = PQexec(pg_, (std::string("PREPARE ") + kClaimStatement +
                             " (text, text) AS SELECT idem.inbox_claim($1, $2)").c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  Status out;
  if (!ok) {
    std::string e = PQerrorMessage(pg_);
    while (!e.empty() && e.back() == '\n') e.pop_back();
    const char* sqlstate = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    out = (sqlstate != nullptr && std::string_view(sqlstate).substr(0, 2) == "42")
              ? FailedPreconditionError("inbox claim: " + e +
                                        " (is the worker schema installed? idem migrate)")
              : UnavailableError("prepare the inbox claim: " + e);
  }
  PQclear(r);
  claim_prepared_ = ok;
  return out;
}

std::string ConsumerTransactions::ErrorText(PGresult* r) const {
  std::string e = r != nullptr ? PQresultErrorMessage(r) : "";
  if (e.empty()) e = PQerrorMessage(pg_);
  while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
  return e;
}

Result<bool> ConsumerTransactions::BeginAndClaim(const std::string& key, Ending ending,
                                                 Status* ended) {
  if (inbox_ && !claim_prepared_ && ending != Ending::kNone) {
    // Preparing runs statements of its own: end the previous transaction first.
    if (ending == Ending::kCommit) {
      *ended = Commit();
      if (!ended->ok()) Rollback();
    } else {
      Rollback();
    }
    ending = Ending::kNone;
  }
  std::string sql;
  if (ending == Ending::kCommit) sql = "COMMIT; ";
  if (ending == Ending::kRollback) sql = "ROLLBACK; ";
  sql += "BEGIN";
  if (inbox_) {
    IDEM_RETURN_IF_ERROR(PrepareClaim());
    IDEM_RETURN_IF_ERROR(AppendClaim(key, &sql));
  }
  std::vector<internal::pg::PgResult> results;
  if (PQsendQuery(pg_, sql.c_str()) == 1) {
    while (PGresult* r = PQgetResult(pg_)) results.emplace_back(r);
  }
  size_t next = 0;
  if (ending != Ending::kNone) {
    PGresult* r = results.empty() ? nullptr : results[0].get();
    const bool ok = r != nullptr && PQresultStatus(r) == PGRES_COMMAND_OK &&
                    std::string_view(PQcmdStatus(r)) ==
                        (ending == Ending::kCommit ? "COMMIT" : "ROLLBACK");
    if (ok) {
      *ended = Status::Ok();
      next = 1;
    } else if (r != nullptr && PQresultStatus(r) == PGRES_COMMAND_OK) {
      *ended = UnavailableError("COMMIT: answered " + std::string(PQcmdStatus(r)));
      next = 1;  // the transaction had failed; the BEGIN and claim ran after it
    } else {
      *ended = UnavailableError(std::string(ending == Ending::kCommit ? "COMMIT" : "ROLLBACK") +
                                ": " + ErrorText(r));
      if (r == nullptr || PQstatus(pg_) != CONNECTION_OK) {
        claim_prepared_ = false;
        return UnavailableError("BEGIN and inbox claim: " + ErrorText(r));
      }
      return BeginAndClaim(key, Ending::kNone, ended);  // skipped by the server: again
    }
  }
  PGresult* begun = results.size() > next ? results[next].get() : nullptr;
  PGresult* claim = results.size() > next + 1 ? results[next + 1].get() : nullptr;
  if (begun == nullptr || PQresultStatus(begun) != PGRES_COMMAND_OK) {
    claim_prepared_ = false;
    return UnavailableError("BEGIN: " + ErrorText(begun));
  }
  if (!inbox_) return true;
  return ClaimAnswer(claim);
}

Status ConsumerTransactions::AppendClaim(std::string_view key, std::string* sql) {
  char* consumer =
      PQescapeLiteral(pg_, inbox_consumer_.data(), inbox_consumer_.size());
  char* id = PQescapeLiteral(pg_, key.data(), key.size());
  Status out;
  if (consumer == nullptr || id == nullptr) {
    out = UnavailableError(std::string("escape: ") + PQerrorMessage(pg_));
  } else {
    *sql += std::string("; EXECUTE ") + kClaimStatement + "(" + consumer + ", " + id + ")";
  }
  PQfreemem(consumer);
  PQfreemem(id);
  return out;
}

Result<bool> ConsumerTransactions::ClaimAnswer(PGresult* claim) {
  if (claim != nullptr && PQresultStatus(claim) == PGRES_TUPLES_OK && PQntuples(claim) == 1) {
    return PQgetvalue(claim, 0, 0)[0] == 't';
  }
  const std::string e = ErrorText(claim);
  const char* sqlstate = claim != nullptr ? PQresultErrorField(claim, PG_DIAG_SQLSTATE) : nullptr;
  claim_prepared_ = false;
  return (sqlstate != nullptr && std::string_view(sqlstate).substr(0, 2) == "42")
             ? FailedPreconditionError("inbox claim: " + e +
                                       " (is the worker schema installed? idem migrate)")
             : UnavailableError("inbox claim: " + e);
}

Status ConsumerTransactions::Commit() {
  std::string error;
  if (Control("COMMIT", "COMMIT", &error)) return Status::Ok();
  return UnavailableError(error);
}

Result<std::vector<bool>> ConsumerTransactions::BeginAndClaimAll(
    const std::vector<std::string_view>& keys) {
  std::string sql = "BEGIN";
  if (inbox_) {
    IDEM_RETURN_IF_ERROR(PrepareClaim());
    for (std::string_view key : keys) IDEM_RETURN_IF_ERROR(AppendClaim(key, &sql));
  }
  std::vector<internal::pg::PgResult> results;
  if (PQsendQuery(pg_, sql.c_str()) == 1) {
    while (PGresult* r = PQgetResult(pg_)) results.emplace_back(r);
  }
  if (results.empty() || PQresultStatus(results[0].get()) != PGRES_COMMAND_OK) {
    claim_prepared_ = false;
    return UnavailableError("BEGIN: " +
                            ErrorText(results.empty() ? nullptr : results[0].get()));
  }
  std::vector<bool> claimed(keys.size(), true);
  if (inbox_) {
    for (size_t i = 0; i < keys.size(); ++i) {
      Result<bool> c = ClaimAnswer(results.size() > i + 1 ? results[i + 1].get() : nullptr);
      if (!c.ok()) return c.status();
      claimed[i] = *c;
    }
  }
  return claimed;
}

}  // namespace idem::worker
