// The calls of the PostgreSQL store, shared by the pooled store and the transactional API:
// each call's SQL (one statement, one round trip), its parameters and the decoding of its row.
// The logic itself lives in the SQL functions of sql/schema/records.sql.
#pragma once

#include <libpq-fe.h>

#include <optional>
#include <string>

#include "idem/record.h"
#include "idem/store.h"
#include "pg/pg_params.h"
#include "pg/pg_result.h"

namespace idem::internal::pg {

// The SHA-256 (32 raw bytes) of the scope's length-prefixed encoding: for each of tenant,
// client and key, its 4-byte big-endian length then its bytes. ("ab","c") != ("a","bc").
std::string ScopeId(const Scope& scope);

// "Now" for a call: nullopt means the database server's clock (clock_timestamp()).
using NowParam = std::optional<TimePoint>;
// nullopt when `clock` is the process's system clock, so every gateway shares the server's
// clock; the clock's reading otherwise (a test's ManualClock).
NowParam NowFor(const std::shared_ptr<Clock>& clock);

inline constexpr const char* kBeginSql =
    "SELECT o_outcome, o_token, o_previous_token, o_retry_after_ms, o_response "
    "FROM idem_begin($1::bytea, $2::text, $3::text, $4::text, $5::bytea, $6::bigint, "
    "$7::bigint, $8::bigint)";
inline constexpr const char* kCompleteSql =
    "SELECT idem_complete($1::bytea, $2::bigint, $3::bytea, $4::bigint, $5::bigint)";
inline constexpr const char* kAcceptSql =
    "SELECT idem_accept($1::bytea, $2::bigint, $3::bytea, $4::bigint, $5::bigint, $6::bigint)";
inline constexpr const char* kReleaseSql =
    "SELECT idem_release($1::bytea, $2::bigint, $3::bigint)";
inline constexpr const char* kPurgeSql = "SELECT idem_purge($1::bytea, $2::bigint)";
inline constexpr const char* kWatchSql = "SELECT idem_watch($1::bytea, $2::bigint)";
inline constexpr const char* kGetSql =
    "SELECT fingerprint, state, token, lease_deadline_ms, created_ms, expires_ms, response "
    "FROM idem_records WHERE scope_id = $1::bytea AND expires_ms > idem_now($2::bigint) "
    "ORDER BY expires_ms DESC LIMIT 1";
// The tiered store's durable half (sql/schema/tiered.sql).
inline constexpr const char* kTierBeginSql =
    "SELECT o_outcome, o_token, o_previous_token, o_retry_after_ms, o_response "
    "FROM idem_tier_begin($1::bytea, $2::text, $3::text, $4::text, $5::bytea, $6::bigint, "
    "$7::bigint, $8::bigint, $9::bigint)";
inline constexpr const char* kTierSettleSql =
    "SELECT idem_tier_settle($1::bytea, $2::text, $3::text, $4::text, $5::bytea, $6::bigint, "
    "$7::smallint, $8::bytea, $9::bigint, $10::bigint, $11::bigint)";
inline constexpr const char* kSweepSql = "SELECT idem_sweep($1::bigint, $2::bigint)";
// One bounded step of the worker layer's inbox sweep (sql/schema/worker.sql), run by Sweep
// too, each in its own transaction, until it answers true (done): now in ms, horizon days.
inline constexpr const char* kInboxSweepSql =
    "SELECT done FROM idem.inbox_sweep_step(to_timestamp($1::bigint / 1000.0), $2::integer)";
inline constexpr const char* kEnsurePartitionsSql =
    "SELECT idem_ensure_partitions($1::bigint, $2::bigint)";

PgParams BeginParams(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                     Duration abandoned_retention, NowParam now);
PgParams CompleteParams(const Scope& scope, FencingToken token, const StoredResponse& response,
                        Duration ttl, NowParam now);
PgParams AcceptParams(const Scope& scope, FencingToken token, const StoredResponse& accepted,
                      Duration lease, Duration abandoned_retention, NowParam now);
PgParams TierBeginParams(const Scope& scope, const Fingerprint& fingerprint, Duration lease,
                         Duration abandoned_retention, FencingToken token_floor, NowParam now);
// `state` kCompleted: `response` is the final one, kept `keep`; kInFlight: the accepted
// response of a long-running operation, under a lease of `keep`.
PgParams TierSettleParams(const Scope& scope, const Fingerprint& fingerprint, FencingToken token,
                          RecordState state, const StoredResponse& response, Duration keep,
                          Duration abandoned_retention, NowParam now);
PgParams ReleaseParams(const Scope& scope, FencingToken token, NowParam now);
PgParams PurgeParams(const Scope& scope, NowParam now);
PgParams GetParams(const Scope& scope, NowParam now);

// Decoders of binary-format results (DecodeBool and DecodeInt: pg_result.h). kDataLoss when
// the row is not what the SQL promises.
Result<BeginOutcome> DecodeBegin(const PGresult* result);
Result<std::optional<Record>> DecodeGet(const PGresult* result, const Scope& scope);

}  // namespace idem::internal::pg
