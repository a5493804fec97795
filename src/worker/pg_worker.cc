// The worker layer on PostgreSQL (include/idem/worker.h): each call is one round trip running
// one function of schema `idem` (sql/schema/worker.sql) on the caller's connection,
// inside the caller's transaction. Errors convert in the PostgreSQL module's one place
// (FromPgResult, pg/pg_errors.h).
#include <libpq-fe.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "idem/scope.h"
#include "idem/worker.h"
#include "pg/pg_errors.h"
#include "pg/pg_params.h"
#include "pg/pg_result.h"
#include "worker/worker_common.h"

namespace idem::worker {
namespace {

using internal::pg::PgParams;
using internal::pg::PgResult;

// The longest intent lease or keep idem.intent_begin / intent_sent accept (as the gateway's
// durations).
constexpr std::chrono::hours kMaxIntentDuration{24 * 3650};

// kInvalidArgument, naming the call `op`, unless `intent_id` follows the rule for keys.
Status CheckIntentId(std::string_view op, std::string_view intent_id) {
  Status valid = ValidateKey(intent_id);
  if (valid.ok()) return valid;
  return valid.WithContext(std::string(op) + ": the intent id follows the rule for keys");
}

// kInvalidArgument, naming the call `op` and the argument `name`, unless `duration` is positive
// and at most kMaxIntentDuration; `least` is the smallest positive one in its unit ("1 ms").
template <typename Rep, typename Period>
Status CheckIntentDuration(std::string_view op, std::string_view name,
                           std::chrono::duration<Rep, Period> duration, std::string_view least) {
  if (duration.count() > 0 && duration <= kMaxIntentDuration) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + std::string(name) + " must be " +
                              std::string(least) + " to 3650 days");
}

// Runs `sql` with text parameters and text results; the result must hold one row, one column.
Result<PgResult> Run(PGconn* conn, std::string_view op, const char* sql, const PgParams& params) {
  const std::string what = "postgresql " + std::string(op);
  if (conn == nullptr) return InvalidArgumentError(what + ": no connection");
  const PGTransactionStatusType tx = PQtransactionStatus(conn);
  if (tx != PQTRANS_INTRANS) {
    return FailedPreconditionError(
        what + (tx == PQTRANS_INERROR ? ": the transaction is aborted; roll it back"
                                      : ": must run inside the caller's transaction (BEGIN first)"));
  }
  PgResult result(PQexecParams(conn, sql, params.size(), nullptr, params.values(),
                               params.lengths(), params.formats(), /*resultFormat=*/0));
  if (result == nullptr) return internal::pg::FromPgResult(nullptr, conn, op);
  IDEM_RETURN_IF_ERROR(internal::pg::CheckResult(result.get(), conn, op));
  if (PQntuples(result.get()) != 1 || PQnfields(result.get()) != 1 ||
      PQgetisnull(result.get(), 0, 0)) {
    return DataLossError(what + ": expected one non-null value");
  }
  return result;
}

std::string_view Value(const PgResult& result) {
  return {PQgetvalue(result.get(), 0, 0), static_cast<size_t>(PQgetlength(result.get(), 0, 0))};
}

Result<bool> RunBool(PGconn* conn, std::string_view op, const char* sql, const PgParams& params) {
  auto result = Run(conn, op, sql, params);
  if (!result.ok()) return result.status();
  const std::string_view v = Value(*result);
  if (v == "t") return true;
  if (v == "f") return false;
  return DataLossError("postgresql " + std::string(op) + ": not a boolean: " + std::string(v));
}

Result<int64_t> ParseInt(std::string_view op, std::string_view value) {
  const std::string text(value);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') {
    return DataLossError("postgresql " + std::string(op) + ": not an integer: " + text);
  }
  return static_cast<int64_t>(n);
}

// A text[] literal: {"a","b"} with backslash escapes, for one $n::text[] parameter.
std::string TextArray(std::span<const std::string_view> items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

Result<bool> InboxClaim(PGconn* conn, std::string_view consumer, std::string_view message_id) {
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty("inbox claim", {consumer, message_id}));
  PgParams params;
  params.Text(std::string(consumer)).Text(std::string(message_id));
  auto claimed = RunBool(conn, "inbox claim", "SELECT idem.inbox_claim($1::text, $2::text)", params);
  if (!claimed.ok()) return claimed.status().WithContext("consumer " + std::string(consumer));
  return claimed;
}

Status InboxRetention(PGconn* conn, std::string_view consumer, std::chrono::seconds keep) {
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty("inbox retention", {consumer}));
  if (keep.count() < 0) return InvalidArgumentError("inbox retention: keep must be >= 0");
  PgParams params;
  params.Text(std::string(consumer)).Text(std::to_string(keep.count()) + " seconds");
  auto result = Run(conn, "inbox retention",
                    "SELECT 1 FROM (SELECT idem.inbox_retention($1::text, $2::interval)) r",
                    params);
  return result.ok() ? Status::Ok() : result.status().WithContext("consumer " + std::string(consumer));
}

Result<int64_t> InboxSweep(PGconn* conn) {
  auto report = InboxSweepSteps(conn);
  if (!report.ok()) return report.status();
  return report->claims_dropped;
}

Result<InboxSweepReport> InboxSweepSteps(PGconn* conn,
                                         std::optional<std::chrono::system_clock::time_point> now,
                                         int horizon_days) {
  constexpr std::string_view kOp = "inbox sweep";
  if (conn == nullptr) return InvalidArgumentError("postgresql inbox sweep: no connection");
  if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
    return FailedPreconditionError(
        "postgresql inbox sweep: must run outside a transaction (each bounded step commits on "
        "its own)");
  }
  PgParams params;
  if (now) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        now->time_since_epoch());
    params.Text(std::to_string(ms.count()));
  } else {
    params.Null();
  }
  params.Text(std::to_string(horizon_days));
  // Every step but the last drops or creates a partition, so the loop ends; the cap is a
  // safeguard.
  constexpr int kMaxSteps = 100000;
  InboxSweepReport report;
  for (int step = 0; step < kMaxSteps; ++step) {
    PgResult result(PQexecParams(
        conn,
        "SELECT claims_dropped, partitions_dropped, partitions_created, partitions_busy, "
        "done::text FROM idem.inbox_sweep_step(coalesce(to_timestamp($1::bigint / 1000.0), "
        "now()), $2::integer)",
        params.size(), nullptr, params.values(), params.lengths(), params.formats(),
        /*resultFormat=*/0));
    if (result == nullptr) return internal::pg::FromPgResult(nullptr, conn, kOp);
    IDEM_RETURN_IF_ERROR(internal::pg::CheckResult(result.get(), conn, kOp));
    if (PQntuples(result.get()) != 1 || PQnfields(result.get()) != 5) {
      return DataLossError("postgresql inbox sweep: expected one row of five columns");
    }
    int64_t counts[4];
    for (int i = 0; i < 4; ++i) {
      auto value = ParseInt(kOp, PQgetvalue(result.get(), 0, i));
      if (!value.ok()) return value.status();
      counts[i] = *value;
    }
    report.claims_dropped += counts[0];
    report.partitions_dropped += counts[1];
    report.partitions_created += counts[2];
    report.partitions_busy += counts[3];
    ++report.steps;
    if (std::string_view(PQgetvalue(result.get(), 0, 4)) == "true") return report;
  }
  return InternalError("postgresql inbox sweep: not done after " + std::to_string(kMaxSteps) +
                       " steps");
}

Result<bool> LedgerAppend(PGconn* conn, std::string_view account, std::string_view txn_id,
                          int64_t amount, std::string_view meta_json) {
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty("ledger append", {account, txn_id}));
  PgParams params;
  params.Text(std::string(account)).Text(std::string(txn_id)).Int(amount);
  if (meta_json.empty()) params.Text("{}"); else params.Text(std::string(meta_json));
  auto appended = RunBool(conn, "ledger append",
                          "SELECT idem.ledger_append($1::text, $2::text, $3::bigint, $4::jsonb)",
                          params);
  if (!appended.ok()) return appended.status().WithContext("txn " + std::string(txn_id));
  return appended;
}

Result<int64_t> LedgerBalance(PGconn* conn, std::string_view account) {
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty("ledger balance", {account}));
  PgParams params;
  params.Text(std::string(account));
  auto result = Run(conn, "ledger balance", "SELECT idem.ledger_balance($1::text)", params);
  if (!result.ok()) return result.status().WithContext("account " + std::string(account));
  return ParseInt("ledger balance", Value(*result));
}

Result<TransitionOutcome> Transition(PGconn* conn, std::string_view kind, std::string_view id,
                                     std::string_view to_state,
                                     std::span<const std::string_view> allowed_from) {
  IDEM_RETURN_IF_ERROR(internal::worker::CheckTransition(kind, id, to_state));
  PgParams params;
  params.Text(std::string(kind)).Text(std::string(id)).Text(std::string(to_state))
      .Text(TextArray(allowed_from));
  auto result = Run(conn, "transition",
                    "SELECT idem.transition($1::text, $2::text, $3::text, $4::text[])", params);
  if (!result.ok()) {
    return result.status().WithContext(std::string(kind) + " " + std::string(id));
  }
  return internal::worker::ParseTransitionOutcome(Value(*result));
}

Result<std::string> StateOf(PGconn* conn, std::string_view kind, std::string_view id) {
  IDEM_RETURN_IF_ERROR(internal::worker::RequireNonEmpty("state of", {kind, id}));
  PgParams params;
  params.Text(std::string(kind)).Text(std::string(id));
  auto result = Run(conn, "state of", "SELECT idem.state_of($1::text, $2::text)", params);
  if (!result.ok()) {
    return result.status().WithContext(std::string(kind) + " " + std::string(id));
  }
  return std::string(Value(*result));
}

Result<IntentBegun> IntentBegin(PGconn* conn, std::string_view intent_id,
                                std::chrono::milliseconds lease) {
  IDEM_RETURN_IF_ERROR(CheckIntentId("intent begin", intent_id));
  IDEM_RETURN_IF_ERROR(CheckIntentDuration("intent begin", "lease", lease, "1 ms"));
  PgParams params;
  params.Text(std::string(intent_id)).Text(std::to_string(lease.count()) + " milliseconds");
  auto result = Run(conn, "intent begin",
                    "SELECT row(outcome, token, retry_after_ms)::text FROM "
                    "idem.intent_begin($1::text, $2::interval)",
                    params);
  if (!result.ok()) return result.status().WithContext("intent " + std::string(intent_id));
  // The row as text: (outcome,token,retry_after_ms), empty fields for NULLs.
  std::string row(Value(*result));
  if (row.size() < 2 || row.front() != '(' || row.back() != ')') {
    return DataLossError("postgresql intent begin: unexpected row " + row);
  }
  row = row.substr(1, row.size() - 2);
  const size_t c1 = row.find(',');
  const size_t c2 = row.find(',', c1 == std::string::npos ? c1 : c1 + 1);
  if (c1 == std::string::npos || c2 == std::string::npos) {
    return DataLossError("postgresql intent begin: unexpected row " + row);
  }
  const std::string outcome = row.substr(0, c1);
  IntentBegun begun;
  if (outcome == "acquired") begun.outcome = IntentOutcome::kAcquired;
  else if (outcome == "taken_over") begun.outcome = IntentOutcome::kTakenOver;
  else if (outcome == "sent") begun.outcome = IntentOutcome::kSent;
  else if (outcome == "pending") begun.outcome = IntentOutcome::kPending;
  else return DataLossError("postgresql intent begin: unknown outcome " + outcome);
  if (const std::string token = row.substr(c1 + 1, c2 - c1 - 1); !token.empty()) {
    auto t = ParseInt("intent begin", token);
    if (!t.ok()) return t.status();
    begun.token = static_cast<uint64_t>(*t);
  }
  if (const std::string retry = row.substr(c2 + 1); !retry.empty()) {
    auto r = ParseInt("intent begin", retry);
    if (!r.ok()) return r.status();
    begun.retry_after = std::chrono::milliseconds(*r);
  }
  return begun;
}

Result<bool> IntentSent(PGconn* conn, std::string_view intent_id, uint64_t token,
                        std::chrono::seconds keep) {
  IDEM_RETURN_IF_ERROR(CheckIntentId("intent sent", intent_id));
  IDEM_RETURN_IF_ERROR(CheckIntentDuration("intent sent", "keep", keep, "1 s"));
  PgParams params;
  params.Text(std::string(intent_id)).Text(std::to_string(token))
      .Text(std::to_string(keep.count()) + " seconds");
  auto sent = RunBool(conn, "intent sent",
                      "SELECT idem.intent_sent($1::text, $2::bigint, $3::interval)", params);
  if (!sent.ok()) return sent.status().WithContext("intent " + std::string(intent_id));
  return sent;
}

Result<bool> IntentRelease(PGconn* conn, std::string_view intent_id, uint64_t token) {
  IDEM_RETURN_IF_ERROR(CheckIntentId("intent release", intent_id));
  PgParams params;
  params.Text(std::string(intent_id)).Text(std::to_string(token));
  auto released = RunBool(conn, "intent release",
                          "SELECT idem.intent_release($1::text, $2::bigint)", params);
  if (!released.ok()) return released.status().WithContext("intent " + std::string(intent_id));
  return released;
}

}  // namespace idem::worker
