#include "store/postgres/pg_schema.h"

#include "outbox/outbox_claim_room_sql.h"
#include "outbox/outbox_fails_closed_sql.h"
#include "outbox/outbox_floor_sql.h"
#include "outbox/outbox_held_claim_sql.h"
#include "outbox/outbox_key_header_sql.h"
#include "outbox/outbox_lock_kept_plan_sql.h"
#include "outbox/outbox_plans_sql.h"
#include "outbox/outbox_settle_by_day_sql.h"
#include "outbox/outbox_sql.h"
#include "outbox/outbox_subjects_keys_sql.h"
#include "store/postgres/pg_inbox_dispatch_sql.h"
#include "store/postgres/pg_inbox_fast_sql.h"
#include "store/postgres/pg_inbox_lean_sql.h"
#include "store/postgres/pg_notices_sql.h"
#include "store/postgres/pg_operations_sql.h"
#include "store/postgres/pg_schema_sql.h"
#include "store/postgres/pg_tiered_sql.h"
#include "store/postgres/pg_worker_limits_sql.h"
#include "store/postgres/pg_worker_sql.h"

namespace idem::internal::pg {
namespace {

// The migrations, in order: kMigrations[v - 1] takes the schema from version v - 1 to v. Each
// runs with the connection's search_path set to the store schema. To add a layer, append its
// SQL here and bump kSchemaVersion.
struct Migration {
  const char* what;
  const char* sql;
};
constexpr Migration kMigrations[] = {
    {"record store", kSchemaV1},
    {"worker layer (schema idem)", kSchemaV2Worker},
    {"emit layer: the outbox (schema idem)", outbox::internal::kOutboxSchemaSql},
    {"worker layer: inbox claims address their day partitions", kSchemaV4InboxDispatch},
    {"worker layer: a one-statement fast path for inbox claims", kSchemaV5InboxFast},
    {"emit layer: the relay's claim and mark on kept plans", outbox::internal::kOutboxPlansSql},
    {"worker layer: the inbox claim's fast path in one expression and one statement",
     kSchemaV7InboxLean},
    {"emit layer: room on each outbox page for the claim to be a HOT update",
     outbox::internal::kOutboxClaimRoomSql},
    {"gateway: settle notices wake waiters on other gateways", kSchemaV9SettleNotices},
    {"gateway: long-running operations (accepted responses, operation_complete); idem_watch "
     "without the scope lock",
     kSchemaV10Operations},
    {"gateway: the tiered store's durable half (idem_tier_begin, idem_tier_settle)",
     kSchemaV11Tiered},
    {"emit layer: the relay holds its claim as row locks (idem.outbox_lock, outbox_settle, "
     "outbox_attempts)",
     outbox::internal::kOutboxHeldClaimSql},
    {"gateway: a completion's settle notice carries its response", kSchemaV13CarriedNotices},
    {"emit layer: the relay's lock and gauges keep their plans (idem.outbox_lock, "
     "idem.outbox_stats in PL/pgSQL)",
     outbox::internal::kOutboxLockKeptPlanSql},
    {"emit layer: the relay's settle marks a batch one day partition at a time "
     "(idem.outbox_settle)",
     outbox::internal::kOutboxSettleByDaySql},
    {"emit layer: a floor below which no outbox row can be pending (idem.outbox_last_id, "
     "idem.outbox_floor_xid, idem.outbox_floor, idem.outbox_stats(from))",
     outbox::internal::kOutboxFloorSql},
    {"worker layer: building blocks fail closed on NULLs and bound their inputs; the inbox "
     "sweep in steps (idem.inbox_sweep_step); balances derived by a ledger trigger",
     kWorkerLimitsSql},
    {"emit layer: a relay takes only the rows its subjects cover, and its own batches do not "
     "hold back their keys' later rows (idem.outbox_subjects_regex, idem.outbox_lock with "
     "subjects and held rows, idem.outbox_floors, idem.outbox_lag, idem.outbox_stats with "
     "subjects)",
     outbox::internal::kOutboxSubjectsKeysSql},
    {"emit layer: building blocks fail closed on NULLs and bound their inputs (floors, locks, "
     "gauges, settle, sweep: 0 to 366 days)",
     outbox::internal::kOutboxFailsClosedSql},
    {"emit layer: the relay's lock answers each row's ordering key, sent as the header "
     "Idem-Ordering-Key (idem.outbox_lock_keyed); idem.outbox_enqueue refuses keys with "
     "control characters",
     outbox::internal::kOutboxKeyHeaderSql},
};
static_assert(std::size(kMigrations) == kSchemaVersion);

Result<int> MigrateLocked(PgConnection& conn, const std::string& schema) {
  auto locked = conn.Exec("migrate: lock", "SELECT pg_advisory_xact_lock(" +
                                               std::to_string(kLockNamespace) + ", " +
                                               std::to_string(kSchemaLock) + ")");
  if (!locked.ok()) return locked.status();
  auto created = conn.Exec("migrate: create schema",
                           "CREATE SCHEMA IF NOT EXISTS \"" + schema + "\";"
                           "CREATE TABLE IF NOT EXISTS idem_schema (version integer NOT NULL)");
  if (!created.ok()) return created.status();
  auto read = conn.Exec("migrate: read version", "SELECT coalesce(max(version), 0) FROM idem_schema");
  if (!read.ok()) return read.status();
  if (PQntuples(read->get()) != 1) return DataLossError("migrate: idem_schema unreadable");
  const int current = std::atoi(PQgetvalue(read->get(), 0, 0));
  if (current > kSchemaVersion) {
    return FailedPreconditionError("postgresql schema version " + std::to_string(current) +
                                   " is newer than this idem build understands (" +
                                   std::to_string(kSchemaVersion) + "); upgrade idem");
  }
  for (int v = current + 1; v <= kSchemaVersion; ++v) {
    auto applied = conn.Exec("migrate to version " + std::to_string(v) + " (" +
                                 kMigrations[v - 1].what + ")",
                             kMigrations[v - 1].sql);
    if (!applied.ok()) return applied.status();
  }
  if (current != kSchemaVersion) {
    auto stamped = conn.Exec("migrate: record version",
                             "DELETE FROM idem_schema; INSERT INTO idem_schema (version) VALUES (" +
                                 std::to_string(kSchemaVersion) + ")");
    if (!stamped.ok()) return stamped.status();
  }
  return kSchemaVersion;
}

// The version recorded in the schema, read without the migration lock; 0 when there is no
// idem_schema table yet (or it cannot be read: the locked path then says why).
int RecordedVersion(PgConnection& conn) {
  auto exists = conn.Exec("migrate: look for idem_schema",
                          "SELECT to_regclass('idem_schema') IS NOT NULL");
  if (!exists.ok() || PQntuples(exists->get()) != 1 ||
      std::string_view(PQgetvalue(exists->get(), 0, 0)) != "t") {
    return 0;
  }
  auto read = conn.Exec("migrate: read version", "SELECT coalesce(max(version), 0) FROM idem_schema");
  if (!read.ok() || PQntuples(read->get()) != 1) return 0;
  return std::atoi(PQgetvalue(read->get(), 0, 0));
}

}  // namespace

Result<int> MigrateSchema(PgConnection& conn, const std::string& schema) {
  // A schema already at this build's version needs no lock: every connection of every
  // process checks at connect, and one process stopped (SIGSTOP, a debugger) inside a
  // migration's transaction would otherwise block them all until it resumed.
  if (RecordedVersion(conn) == kSchemaVersion) return kSchemaVersion;
  auto began = conn.Exec("migrate: begin", "BEGIN");
  if (!began.ok()) return began.status();
  auto version = MigrateLocked(conn, schema);
  if (!version.ok()) {
    if (conn.healthy()) (void)conn.Exec("migrate: rollback", "ROLLBACK");
    return version.status();
  }
  auto committed = conn.Exec("migrate: commit", "COMMIT");
  if (!committed.ok()) return committed.status();
  return version;
}

}  // namespace idem::internal::pg
