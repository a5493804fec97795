#include "store/postgres/postgres_store.h"

#include <utility>

#include "core/store_checks.h"
#include "pg/pg_pool.h"
#include "pg/pg_schema.h"
#include "pg/pg_url.h"
#include "store/postgres/pg_calls.h"
#include "store/postgres/pg_notices.h"
#include "store/tiers.h"

namespace idem {
namespace {

using internal::pg::PgConfig;
using internal::pg::PgConnection;
using internal::pg::PgParams;
using internal::pg::PgPool;
using internal::pg::PgResult;

constexpr Duration kDay = std::chrono::hours(24);

// Every connection prepares the same statements, named after their call.
struct Prepared {
  const char* name;
  const char* sql;
};
constexpr Prepared kStatements[] = {
    {"idem_begin", internal::pg::kBeginSql},
    {"idem_complete", internal::pg::kCompleteSql},
    {"idem_accept", internal::pg::kAcceptSql},
    {"idem_release", internal::pg::kReleaseSql},
    {"idem_purge", internal::pg::kPurgeSql},
    {"idem_watch", internal::pg::kWatchSql},
    {"idem_get", internal::pg::kGetSql},
    {"idem_sweep", internal::pg::kSweepSql},
    {"idem_ensure_partitions", internal::pg::kEnsurePartitionsSql},
    {"idem_inbox_sweep", internal::pg::kInboxSweepSql},
    {"idem_tier_begin", internal::pg::kTierBeginSql},
    {"idem_tier_settle", internal::pg::kTierSettleSql},
};

// A settling call's answer: true when the caller still owned the record (it is settled), false
// when another owner's claim stands.
Result<CompleteOutcome> OkUnlessFenced(const Result<bool>& owned) {
  if (!owned.ok()) return owned.status();
  return *owned ? CompleteOutcome::kOk : CompleteOutcome::kFenced;
}

Status PrepareAll(PgConnection& conn) {
  for (const Prepared& p : kStatements) {
    IDEM_RETURN_IF_ERROR(conn.Prepare(std::string("prepare ") + p.name, p.name, p.sql));
  }
  return Status::Ok();
}

class PostgresStore final : public internal::DurableTier {
 public:
  PostgresStore(PgConfig config, const StoreOptions& options)
      : options_(options), pool_(std::move(config), PrepareAll) {}

  // Creates the partitions for today through the horizon.
  Status EnsurePartitions() {
    PgParams params;
    const auto now = Now();
    if (now) params.Int(ToMillis(*now)); else params.Null();
    params.Int((kDay * pool_.config().partition_horizon_days).count());
    auto done = Call("ensure partitions", "idem_ensure_partitions", params);
    return done.ok() ? Status::Ok() : done.status();
  }

  Result<BeginOutcome> Begin(const Scope& scope, const Fingerprint& fingerprint,
                             Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    auto result = Call("begin", "idem_begin",
                       internal::pg::BeginParams(scope, fingerprint, lease,
                                                 options_.abandoned_retention, Now()));
    if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
    auto outcome = internal::pg::DecodeBegin(result->get());
    if (!outcome.ok()) return outcome.status().WithContext("begin scope " + scope.Digest());
    return outcome;
  }

  Result<BeginOutcome> BeginAbove(const Scope& scope, const Fingerprint& fingerprint,
                                  Duration lease, FencingToken token_floor) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    auto result = Call("begin", "idem_tier_begin",
                       internal::pg::TierBeginParams(scope, fingerprint, lease,
                                                     options_.abandoned_retention, token_floor,
                                                     Now()));
    if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
    auto outcome = internal::pg::DecodeBegin(result->get());
    if (!outcome.ok()) return outcome.status().WithContext("begin scope " + scope.Digest());
    return outcome;
  }

  Result<CompleteOutcome> Settle(const Scope& scope, const Fingerprint& fingerprint,
                                 FencingToken token, RecordState state,
                                 const StoredResponse& response, Duration keep) override {
    IDEM_RETURN_IF_ERROR(state == RecordState::kCompleted ? internal::CheckTtl(keep)
                                                          : internal::CheckLease(keep));
    return OkUnlessFenced(
        CallBool("settle", "idem_tier_settle",
                 internal::pg::TierSettleParams(scope, fingerprint, token, state, response, keep,
                                                options_.abandoned_retention, Now()),
                 scope));
  }

  Result<CompleteOutcome> Complete(const Scope& scope, FencingToken token,
                                   const StoredResponse& response, Duration ttl) override {
    IDEM_RETURN_IF_ERROR(internal::CheckTtl(ttl));
    return OkUnlessFenced(CallBool("complete", "idem_complete",
                                   internal::pg::CompleteParams(scope, token, response, ttl, Now()),
                                   scope));
  }

  Result<CompleteOutcome> Accept(const Scope& scope, FencingToken token,
                                 const StoredResponse& accepted, Duration lease) override {
    IDEM_RETURN_IF_ERROR(internal::CheckLease(lease));
    return OkUnlessFenced(CallBool("accept", "idem_accept",
                                   internal::pg::AcceptParams(scope, token, accepted, lease,
                                                              options_.abandoned_retention, Now()),
                                   scope));
  }

  Result<ReleaseOutcome> Release(const Scope& scope, FencingToken token) override {
    auto done = CallBool("release", "idem_release",
                         internal::pg::ReleaseParams(scope, token, Now()), scope);
    if (!done.ok()) return done.status();
    return *done ? ReleaseOutcome::kReleased : ReleaseOutcome::kFenced;
  }

  Result<std::optional<Record>> Get(const Scope& scope) override {
    auto result = Call("get", "idem_get", internal::pg::GetParams(scope, Now()));
    if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
    auto record = internal::pg::DecodeGet(result->get(), scope);
    if (!record.ok()) return record.status().WithContext("get scope " + scope.Digest());
    return record;
  }

  Result<bool> Purge(const Scope& scope) override {
    return CallBool("purge", "idem_purge", internal::pg::PurgeParams(scope, Now()), scope);
  }

  Status OpenConnections(int concurrency) override {
    return pool_.Warm(static_cast<size_t>(std::max(concurrency, 0)));
  }

  Status Watch(const Scope& scope) override {
    // Same parameters as a purge: the scope id and now.
    auto watched = CallBool("watch", "idem_watch", internal::pg::PurgeParams(scope, Now()), scope);
    return watched.ok() ? Status::Ok() : watched.status();
  }

  Result<std::unique_ptr<internal::SettleSubscription>> SubscribeSettled(
      internal::SettleHandler on_settled) override {
    return internal::pg::SubscribePostgresSettled(pool_.config(), std::move(on_settled));
  }

  Result<uint64_t> Sweep(TimePoint now) override {
    PgParams params;
    params.Int(ToMillis(now)).Int((kDay * pool_.config().partition_horizon_days).count());
    auto result = Call("sweep", "idem_sweep", params);
    if (!result.ok()) return result.status();
    auto dropped = internal::pg::DecodeInt(result->get());
    if (!dropped.ok()) return dropped.status().WithContext("sweep");
    // The worker layer's inbox shares the database and the schedule: its expired day
    // partitions go too, in bounded steps, each its own transaction, so that no claim waits
    // for more than one step. Its claims are not counted in the records swept. Every step
    // but the last drops or creates a partition, so the loop ends; the cap is a safeguard.
    PgParams inbox;
    inbox.Int(ToMillis(now)).Int(pool_.config().partition_horizon_days);
    constexpr int kMaxInboxSteps = 100000;
    for (int step = 0;; ++step) {
      if (step == kMaxInboxSteps) {
        return InternalError("inbox sweep: not done after " + std::to_string(step) + " steps");
      }
      auto inbox_step = Call("inbox sweep", "idem_inbox_sweep", inbox);
      if (!inbox_step.ok()) return inbox_step.status();
      auto done = internal::pg::DecodeBool(inbox_step->get());
      if (!done.ok()) return done.status().WithContext("inbox sweep");
      if (*done) break;
    }
    return static_cast<uint64_t>(std::max<int64_t>(0, *dropped));
  }

  std::string Describe() const override {
    const PgConfig& c = pool_.config();
    return c.display + " (pool_size=" + std::to_string(c.pool_size) +
           ", timeout_ms=" + std::to_string(c.timeout.count()) + ", schema=" + c.schema + ")";
  }

 private:
  internal::pg::NowParam Now() const { return internal::pg::NowFor(options_.clock); }

  Result<PgResult> Call(std::string_view op, const std::string& statement,
                        const PgParams& params) {
    return pool_.Run<PgResult>(op, [&](PgConnection& conn) {
      return conn.ExecPrepared(op, statement, params);
    });
  }

  Result<bool> CallBool(std::string_view op, const std::string& statement,
                        const PgParams& params, const Scope& scope) {
    auto result = Call(op, statement, params);
    if (!result.ok()) return result.status().WithContext("scope " + scope.Digest());
    auto value = internal::pg::DecodeBool(result->get());
    if (!value.ok()) {
      return value.status().WithContext(std::string(op) + " scope " + scope.Digest());
    }
    return value;
  }

  const StoreOptions options_;
  PgPool pool_;
};

// One connection outside any pool, for the schema migration.
Result<int> Migrate(const PgConfig& config) {
  auto conn = PgConnection::Connect(config.keywords, config.values,
                                    config.timeout + std::chrono::seconds(1));
  if (!conn.ok()) return conn.status().WithContext(config.display);
  auto version = internal::pg::MigrateSchema(**conn, config.schema);
  if (!version.ok()) return version.status().WithContext(config.display);
  return version;
}

}  // namespace

Result<std::unique_ptr<Store>> OpenPostgresStore(std::string_view url,
                                                 const StoreOptions& options) {
  auto store = internal::OpenPostgresDurableTier(url, options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Store>(std::move(*store));
}

namespace internal {

Result<std::unique_ptr<DurableTier>> OpenPostgresDurableTier(std::string_view url,
                                                             const StoreOptions& options) {
  auto config = pg::ParsePostgresUrl(url);
  if (!config.ok()) return config.status();
  auto version = Migrate(*config);
  if (!version.ok()) return version.status();
  auto store = std::make_unique<PostgresStore>(std::move(*config), options);
  IDEM_RETURN_IF_ERROR(store->EnsurePartitions());
  return std::unique_ptr<DurableTier>(std::move(store));
}

}  // namespace internal

Result<int> MigratePostgresSchema(std::string_view url) {
  auto config = internal::pg::ParsePostgresUrl(url);
  if (!config.ok()) return config.status();
  return Migrate(*config);
}

}  // namespace idem
