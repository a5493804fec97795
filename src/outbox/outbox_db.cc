#include "outbox/outbox_db.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nlohmann/json.hpp>

#include "pg/pg_binary_array.h"
#include "pg/pg_schema.h"
#include "pg/pg_url.h"

namespace idem::outbox {
namespace {

using internal::pg::BinaryArray;
using internal::pg::ColumnBytes;
using internal::pg::ColumnInt;
using internal::pg::PgArrayElement;
using internal::pg::PgParams;

constexpr const char* kLock = "idem_relay_lock";
constexpr const char* kAttempt = "idem_relay_attempt";
constexpr const char* kSettle = "idem_relay_settle";
constexpr const char* kPark = "idem_relay_park";
constexpr const char* kStats = "idem_relay_stats";
constexpr const char* kLag = "idem_relay_lag";
constexpr const char* kFloor = "idem_relay_floor";

double ColumnDouble(const PGresult* result, int row, int column) {
  const std::string_view bytes = ColumnBytes(result, row, column);
  if (bytes.size() != 8) return 0;
  uint64_t bits = 0;
  for (unsigned char c : bytes) bits = (bits << 8) | c;
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// jsonb in binary format: a version byte (1), then the JSON text.
Result<std::vector<std::pair<std::string, std::string>>> DecodeHeaders(std::string_view bytes) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (bytes.empty() || bytes[0] != 1) return DataLossError("outbox claim: headers not jsonb v1");
  if (bytes.substr(1) == "{}") return headers;  // the common case, without a JSON parse
  auto json = nlohmann::json::parse(bytes.substr(1), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return DataLossError("outbox claim: headers are not a JSON object");
  for (const auto& [name, value] : json.items()) {
    if (value.is_string()) headers.emplace_back(name, value.get<std::string>());
  }
  return headers;
}

// A text[] literal: every element double-quoted, its backslashes and quotes escaped, so any
// text stays one element.
std::string TextArray(const std::vector<std::string>& values) {
  std::string out = "{";
  for (const auto& value : values) {
    if (out.size() > 1) out += ',';
    out += '"';
    for (char c : value) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

bool ColumnBool(const PGresult* result, int row, int column) {
  const std::string_view bytes = ColumnBytes(result, row, column);
  return bytes.size() == 1 && bytes[0] != 0;
}

// Server notices other than routine ones (a FATAL as the server goes away, ...) go to the log,
// not to stderr raw. `log` is the logging::Log given to Open.
void LogNotice(void* log, const char* message) {
  std::string text = message;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const bool routine = text.rfind("NOTICE", 0) == 0 || text.rfind("DEBUG", 0) == 0 ||
                       text.rfind("INFO", 0) == 0 || text.rfind("LOG", 0) == 0;
  if (!routine) static_cast<logging::Log*>(log)->Warn("relay", "postgresql says: " + text);
}

}  // namespace

Result<std::unique_ptr<OutboxDb>> OutboxDb::Open(const std::string& url, logging::Log& log,
                                                 bool listen) {
  auto config = internal::pg::ParsePostgresUrl(url);
  if (!config.ok()) return config.status();
  auto conn = internal::pg::PgConnection::Connect(config->keywords, config->values,
                                                  config->timeout + std::chrono::seconds(1));
  if (!conn.ok()) return conn.status().WithContext(config->display);
  PQsetNoticeProcessor((*conn)->raw(), &LogNotice, &log);
  auto version = internal::pg::MigrateSchema(**conn, config->schema);
  if (!version.ok()) return version.status().WithContext(config->display);
  std::unique_ptr<OutboxDb> db(new OutboxDb(std::move(*conn), config->display));
  auto& c = *db->conn_;
  IDEM_RETURN_IF_ERROR(c.Prepare("prepare lock", kLock,
                                 "SELECT id, day, event_id, subject, payload, headers, "
                                 "first_attempt_age_ms, attempts, keyed, held_back, ordering_key "
                                 "FROM idem.outbox_lock_keyed($1::integer, $2::bigint, $3::text[], "
                                 "$4::bigint[], $5::bigint)"));
  IDEM_RETURN_IF_ERROR(c.Prepare("prepare attempt", kAttempt,
                                 "SELECT idem.outbox_attempt($1, $2::bigint[])"));
  IDEM_RETURN_IF_ERROR(c.Prepare(
      "prepare settle", kSettle,
      "SELECT idem.outbox_settle($1, $2::bigint[], $3::integer[], $4::bigint[], $5::boolean[], "
      "$6::bigint[], $7::integer[], $8)::bigint"));
  IDEM_RETURN_IF_ERROR(c.Prepare("prepare park", kPark,
                                 "SELECT idem.outbox_park($1::bigint, $2::integer, $3)"));
  IDEM_RETURN_IF_ERROR(c.Prepare("prepare lag", kLag,
                                 "SELECT idem.outbox_lag($1::bigint, $2::text[])"));
  IDEM_RETURN_IF_ERROR(c.Prepare(
      "prepare stats", kStats,
      "SELECT lag_seconds, pending, parked, other_pending, other_lag_seconds, other_event_id, "
      "other_subject FROM idem.outbox_stats($1::bigint, $2::text[], $3::bigint)"));
  IDEM_RETURN_IF_ERROR(c.Prepare("prepare floor", kFloor,
                                 "SELECT any_floor, covered_floor FROM idem.outbox_floors("
                                 "$1::bigint, $2::xid8, $3::bigint, $4::bigint, $5::text[])"));
  if (listen) {
    auto listened = c.Exec("listen", "LISTEN idem_outbox");
    if (!listened.ok()) return listened.status();
  }
  return db;
}

Result<LockedBatch> OutboxDb::LockBatch(int limit, int64_t after_id,
                                        const std::vector<std::string>& subjects,
                                        const std::vector<int64_t>& held, int64_t floor) {
  auto begun = conn_->Exec("outbox lock: begin", "BEGIN");
  if (!begun.ok()) return begun.status();
  PgParams params;
  params.Int(limit)
      .Int(after_id)
      .Text(TextArray(subjects))
      .Bytes(BinaryArray(PgArrayElement::kInt8, held.size(), [&](size_t i) { return held[i]; }))
      .Int(floor);
  auto result = conn_->ExecPrepared("outbox lock", kLock, params);
  if (!result.ok()) {
    AbandonBatch();
    return result.status();
  }
  const PGresult* r = result->get();
  LockedBatch batch;
  const int locked = PQntuples(r);
  batch.full = locked >= limit;
  batch.rows.reserve(locked);
  for (int i = 0; i < locked; ++i) {
    auto id = ColumnInt(r, i, 0);
    auto day = ColumnInt(r, i, 1);
    auto age = ColumnInt(r, i, 6);
    auto attempts = ColumnInt(r, i, 7);
    if (!id.ok() || !day.ok() || !age.ok() || !attempts.ok()) {
      AbandonBatch();
      return DataLossError("outbox lock: a row's id, day or attempt columns are unreadable");
    }
    batch.highest_id = std::max(batch.highest_id, *id);
    if (ColumnBool(r, i, 9)) {
      ++batch.held_back;
      continue;
    }
    ClaimedRow& row = batch.rows.emplace_back();
    row.id = *id;
    row.day = static_cast<int32_t>(*day);
    row.event_id = ColumnBytes(r, i, 2);
    row.subject = ColumnBytes(r, i, 3);
    row.payload = ColumnBytes(r, i, 4);
    auto headers = DecodeHeaders(ColumnBytes(r, i, 5));
    if (!headers.ok()) {
      AbandonBatch();
      return headers.status().WithContext("event " + row.event_id);
    }
    row.headers = std::move(*headers);
    row.first_attempt_age_ms = *age;
    row.attempts = static_cast<int32_t>(*attempts);
    row.keyed = ColumnBool(r, i, 8);
    if (row.keyed) row.ordering_key = std::string(ColumnBytes(r, i, 10));
  }
  if (batch.rows.empty()) AbandonBatch();
  return batch;
}

Status OutboxDb::RecordAttempt(const std::string& batch, const std::vector<int64_t>& ids) {
  PgParams params;
  params.Text(batch).Bytes(BinaryArray(PgArrayElement::kInt8, ids.size(),
                                       [&](size_t i) { return ids[i]; }));
  auto result = conn_->ExecPrepared("outbox attempt", kAttempt, params);
  return result.ok() ? Status::Ok() : result.status();
}

Result<int64_t> OutboxDb::SettleBatch(const std::string& batch,
                                      const std::vector<PublishedRow>& published,
                                      const std::vector<RowKey>& failed,
                                      const std::string& error) {
  PgParams params;
  const auto ints = [](PgArrayElement type, const auto& rows, auto field) {
    return BinaryArray(type, rows.size(), [&](size_t i) { return field(rows[i]); });
  };
  params.Text(batch)
      .Bytes(ints(PgArrayElement::kInt8, published, [](const PublishedRow& r) { return r.id; }))
      .Bytes(ints(PgArrayElement::kInt4, published, [](const PublishedRow& r) { return r.day; }))
      .Bytes(ints(PgArrayElement::kInt8, published,
                  [](const PublishedRow& r) { return static_cast<int64_t>(r.stream_seq); }))
      .Bytes(ints(PgArrayElement::kBool, published,
                  [](const PublishedRow& r) { return r.duplicate; }))
      .Bytes(ints(PgArrayElement::kInt8, failed, [](const RowKey& r) { return r.id; }))
      .Bytes(ints(PgArrayElement::kInt4, failed, [](const RowKey& r) { return r.day; }))
      .Text(error);
  auto result = conn_->ExecPrepared("outbox settle", kSettle, params);
  if (!result.ok()) {
    AbandonBatch();
    return result.status();
  }
  auto marked = ColumnInt(result->get(), 0, 0);
  auto committed = conn_->Exec("outbox settle: commit", "COMMIT");
  if (!committed.ok()) {
    AbandonBatch();
    return committed.status();
  }
  return marked;
}

void OutboxDb::AbandonBatch() {
  if (!conn_->healthy() || PQtransactionStatus(conn_->raw()) == PQTRANS_IDLE) return;
  // A failed rollback needs nothing more: the server ends the transaction with the session.
  (void)conn_->Exec("outbox: rollback", "ROLLBACK");
}

Status OutboxDb::LimitIdleHold(std::chrono::milliseconds lease) {
  auto set = conn_->Exec("outbox: idle hold limit",
                         "SET idle_in_transaction_session_timeout = " +
                             std::to_string(std::max<int64_t>(lease.count(), 1)));
  return set.ok() ? Status::Ok() : set.status();
}

bool OutboxDb::InTransaction() const {
  return PQtransactionStatus(conn_->raw()) != PQTRANS_IDLE;
}

Status OutboxDb::Park(const ClaimedRow& row, const std::string& reason) {
  PgParams params;
  params.Int(row.id).Int(row.day).Text(reason);
  auto result = conn_->ExecPrepared("outbox park", kPark, params);
  return result.ok() ? Status::Ok() : result.status().WithContext("event " + row.event_id);
}

Result<double> OutboxDb::LagSeconds(int64_t from, const std::vector<std::string>& subjects) {
  PgParams params;
  params.Int(from).Text(TextArray(subjects));
  auto result = conn_->ExecPrepared("outbox lag", kLag, params);
  if (!result.ok()) return result.status();
  if (PQntuples(result->get()) != 1) return DataLossError("outbox lag: no row");
  return ColumnDouble(result->get(), 0, 0);
}

Result<OutboxStats> OutboxDb::Stats(int64_t from, const std::vector<std::string>& subjects,
                                    int64_t any_from) {
  PgParams params;
  params.Int(from).Text(TextArray(subjects)).Int(any_from);
  auto result = conn_->ExecPrepared("outbox stats", kStats, params);
  if (!result.ok()) return result.status();
  const PGresult* r = result->get();
  if (PQntuples(r) != 1) return DataLossError("outbox stats: no row");
  OutboxStats stats;
  stats.lag_seconds = ColumnDouble(r, 0, 0);
  auto pending = ColumnInt(r, 0, 1);
  auto parked = ColumnInt(r, 0, 2);
  auto other = ColumnInt(r, 0, 3);
  if (!pending.ok() || !parked.ok() || !other.ok()) {
    return DataLossError("outbox stats: unreadable counts");
  }
  stats.pending = *pending;
  stats.parked = *parked;
  stats.other_pending = *other;
  stats.other_lag_seconds = ColumnDouble(r, 0, 4);
  stats.other_event_id = ColumnBytes(r, 0, 5);
  stats.other_subject = ColumnBytes(r, 0, 6);
  return stats;
}

Result<OutboxDb::FloorMark> OutboxDb::MarkFloor() {
  // Two statements, two transactions, in this order: see sql/schema/outbox.sql, "floors and
  // gauges".
  auto last = conn_->Exec("outbox floor: last id", "SELECT idem.outbox_last_id()");
  if (!last.ok()) return last.status();
  auto next_xid = conn_->Exec("outbox floor: a transaction id",
                              "SELECT idem.outbox_floor_xid()::text");
  if (!next_xid.ok()) return next_xid.status();
  if (PQntuples(last->get()) != 1 || PQntuples(next_xid->get()) != 1) {
    return DataLossError("outbox floor: no row");
  }
  FloorMark mark;
  const std::string_view last_id(PQgetvalue(last->get(), 0, 0),
                                 PQgetlength(last->get(), 0, 0));
  const auto [end, error] =
      std::from_chars(last_id.data(), last_id.data() + last_id.size(), mark.last_id);
  if (error != std::errc() || end != last_id.data() + last_id.size()) {
    return DataLossError("outbox floor: the last id '" + std::string(last_id) +
                         "' is not an integer");
  }
  mark.xid_bound = PQgetvalue(next_xid->get(), 0, 0);
  if (mark.xid_bound.empty()) return DataLossError("outbox floor: no transaction id");
  return mark;
}

Result<std::optional<OutboxDb::FloorPair>> OutboxDb::Floors(
    const FloorMark& mark, int64_t from, int64_t covered_from,
    const std::vector<std::string>& subjects) {
  PgParams params;
  params.Int(mark.last_id).Text(mark.xid_bound).Int(from).Int(covered_from).Text(
      TextArray(subjects));
  auto result = conn_->ExecPrepared("outbox floor", kFloor, params);
  if (!result.ok()) return result.status();
  const PGresult* r = result->get();
  if (PQntuples(r) != 1) return DataLossError("outbox floor: no row");
  if (internal::pg::ColumnIsNull(r, 0, 0) || internal::pg::ColumnIsNull(r, 0, 1)) {
    return std::optional<FloorPair>();
  }
  auto any = ColumnInt(r, 0, 0);
  auto covered = ColumnInt(r, 0, 1);
  if (!any.ok()) return any.status();
  if (!covered.ok()) return covered.status();
  return std::optional<FloorPair>(FloorPair{*any, *covered});
}

Result<int64_t> SweepOutbox(internal::pg::PgConnection& conn, int keep_days) {
  auto result = conn.Exec("outbox sweep", "SELECT idem.outbox_sweep(" +
                                              std::to_string(keep_days) + ", 2)");
  if (!result.ok()) return result.status();
  return std::atoll(PQgetvalue(result->get(), 0, 0));
}

Result<int64_t> OutboxDb::Sweep(int keep_days) { return SweepOutbox(*conn_, keep_days); }

Result<int64_t> OutboxDb::ForgetAttempts(std::chrono::milliseconds older_than) {
  auto result = conn_->Exec("outbox forget attempts", "SELECT idem.outbox_forget_attempts(" +
                                                          std::to_string(older_than.count()) + ")");
  if (!result.ok()) return result.status();
  return std::atoll(PQgetvalue(result->get(), 0, 0));
}

bool OutboxDb::DrainNotifies() {
  bool any = false;
  while (PGnotify* n = PQnotifies(conn_->raw())) {
    any = true;
    PQfreemem(n);
  }
  return any;
}

Result<bool> OutboxDb::WaitForNotify(std::chrono::milliseconds timeout) {
  PGconn* raw = conn_->raw();
  if (PQconsumeInput(raw) == 0) {
    return UnavailableError(std::string("postgresql listen: ") + PQerrorMessage(raw));
  }
  if (DrainNotifies()) return true;
  pollfd p{PQsocket(raw), POLLIN, 0};
  const int n = poll(&p, 1, static_cast<int>(timeout.count()));
  if (n < 0 && errno != EINTR) {
    return UnavailableError(std::string("postgresql listen: poll: ") + std::strerror(errno));
  }
  if (n <= 0) return false;
  if (PQconsumeInput(raw) == 0 || PQstatus(raw) != CONNECTION_OK) {
    return UnavailableError(std::string("postgresql listen: ") + PQerrorMessage(raw));
  }
  return DrainNotifies();
}

}  // namespace idem::outbox
