// Schema version 17 on a real PostgreSQL server: the worker layer's building blocks fail closed
// on NULLs and refuse out-of-range input with SQLSTATE 22023, the inbox sweep works in bounded
// steps that never hold a claim up for long, and the ledger's balances are written only from
// its entries.
#include <libpq-fe.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "idem/worker.h"
#include "worker/pg_worker_fixture.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using worker_test::Conn;
using worker_test::PgWorkerTest;

// "ERROR 22023: ..." as Conn::Exec reports an invalid_parameter_value.
bool IsInvalid(const std::string& answer) { return answer.rfind("ERROR 22023", 0) == 0; }

// Counts the inbox's partitions (name, day from the name or NULL) matching `where`.
std::string CountPartitions(const std::string& where) {
  return "WITH parts AS MATERIALIZED (SELECT c.relname FROM pg_inherits i JOIN pg_class c "
         "ON c.oid = i.inhrelid WHERE i.inhparent = 'idem.inbox'::regclass), days AS (SELECT "
         "relname, CASE WHEN relname ~ '^inbox_p[0-9]{8}$' THEN to_date(substring(relname "
         "FROM 8), 'YYYYMMDD') END AS day FROM parts) SELECT count(*) FROM days WHERE " + where;
}

// ---- three-valued logic ----------------------------------------------------------------------

// A NULL in allowed_from made `state = ANY (allowed_from)` NULL, and `IF NOT NULL` never
// refused: any transition was applied.
TEST_F(PgWorkerTest, TransitionFailsClosedOnNulls) {
  for (const std::string call :
       {"idem.transition('order', 'n1', 'shipped', ARRAY[NULL]::text[])",
        "idem.transition('order', 'n1', 'shipped', NULL)",
        "idem.transition('order', 'n1', 'paid', ARRAY['cancelled', NULL])",
        "idem.transition(NULL, 'n1', 'shipped', '{none}')",
        "idem.transition('order', NULL, 'shipped', '{none}')",
        "idem.transition('order', 'n1', NULL, '{none}')",
        "idem.transition('order', 'n1', '', '{none}')"}) {
    const std::string answer = Sql("SELECT " + call);
    EXPECT_TRUE(IsInvalid(answer)) << call << ": " << answer;
  }
  EXPECT_EQ(Sql("SELECT idem.state_of('order', 'n1')"), "none");
  ASSERT_EQ(Sql("SELECT idem.transition('order', 'n1', 'shipped', '{none}')"), "applied");
  // From an existing state, a NULL among the allowed states is refused too.
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.transition('order', 'n1', 'refunded', "
                            "ARRAY['x', NULL, 'y'])")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.transition('order', 'n1', 'refunded', "
                            "ARRAY[ARRAY['x', NULL]])")));
  EXPECT_EQ(Sql("SELECT idem.state_of('order', 'n1')"), "shipped");
  // An empty list allows nothing: refused, not an error.
  EXPECT_EQ(Sql("SELECT idem.transition('order', 'n1', 'refunded', '{}')"), "refused");
}

// Reads answered 'none' and 0 for a NULL entity or account, as if it existed and were empty.
TEST_F(PgWorkerTest, ReadsRefuseNullArguments) {
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.state_of(NULL, '1')")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.state_of('order', NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.ledger_balance(NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.ledger_balance('')")));
  // Helpers answer NULL for NULL (greatest(1, NULL) made idem.inbox_days(NULL) 1).
  EXPECT_EQ(Sql("SELECT idem.inbox_days(NULL) IS NULL"), "t");
  EXPECT_EQ(Sql("SELECT idem.inbox_expiry_day('m', NULL, now()) IS NULL"), "t");
}

// intent_sent's keep went through greatest(1, ...): NULL kept the SENT record 1 ms, so the
// intent could be acquired (and its call made) again at once.
TEST_F(PgWorkerTest, IntentSentRefusesANullKeep) {
  const std::string token = Sql("SELECT token FROM idem.intent_begin('push:n', '10 seconds')");
  ASSERT_FALSE(token.empty());
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.intent_sent('push:n', " + token + ", NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.intent_sent('push:n', " + token + ", '-1 day')")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.intent_sent('push:n', NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.intent_release('push:n', NULL)")));
  EXPECT_EQ(Sql("SELECT outcome FROM idem.intent_begin('push:n')"), "pending");
}

// The record store's functions compared fingerprints with `<>`: a NULL one was no mismatch, so
// idem_begin replayed another request's response for it.
TEST_F(PgWorkerTest, RecordFunctionsTreatANullFingerprintAsAMismatch) {
  const std::string scope = "sha256('null-fp')";
  const std::string begin = "SELECT o_outcome || ' ' || o_token FROM idem_begin(" + scope +
                            ", 't', '', 'k', sha256('req'), 30000, 60000, NULL)";
  const std::string begun = Sql(begin);
  ASSERT_EQ(begun.rfind("1 ", 0), 0u) << begun;
  ASSERT_EQ(Sql("SELECT idem_complete(" + scope + ", " + begun.substr(2) +
                ", '\\x00'::bytea, 60000, NULL)"),
            "t");
  EXPECT_EQ(Sql("SELECT o_outcome FROM idem_begin(" + scope +
                ", 't', '', 'k', NULL, 30000, 60000, NULL)"),
            "5");
  EXPECT_EQ(Sql("SELECT o_outcome FROM idem_tier_begin(" + scope +
                ", 't', '', 'k', NULL, 30000, 60000, 0, NULL)"),
            "5");
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem_tier_settle(" + scope +
                            ", 't', '', 'k', NULL, 99, 2::smallint, '\\x00'::bytea, 60000, "
                            "60000, NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem_tier_settle(" + scope +
                            ", 't', '', 'k', sha256('req'), NULL, 2::smallint, '\\x00'::bytea, "
                            "60000, 60000, NULL)")));
}

// ---- limits -----------------------------------------------------------------------------------

TEST_F(PgWorkerTest, InboxRetentionAndSweepHaveBounds) {
  const std::string too_long = Sql("SELECT idem.inbox_retention('c2', '100000 years')");
  EXPECT_TRUE(IsInvalid(too_long)) << too_long;
  EXPECT_NE(too_long.find("366 days"), std::string::npos) << too_long;
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_retention('c2', '367 days')")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_retention('c2', NULL)")));
  EXPECT_EQ(Sql("SELECT idem.inbox_retention('c2', '366 days')"), "");
  // Written by hand, the bound holds too.
  EXPECT_EQ(Sql("INSERT INTO idem.inbox_consumers VALUES ('c3', '1000 days', '30 days', now())")
                .rfind("ERROR 23514", 0),
            0u);
  for (const std::string args : {"now(), 367", "now(), -1", "now(), NULL", "NULL, 2",
                                 "now() + interval '3661 days', 2",
                                 "now() - interval '3661 days', 2"}) {
    const std::string answer = Sql("SELECT * FROM idem.inbox_sweep_step(" + args + ")");
    EXPECT_TRUE(IsInvalid(answer)) << args << ": " << answer;
  }
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_sweep(now(), 100000)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_ensure_partition(NULL)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_create_partition(date '10000-01-01')")));
  // A claim under the longest retention works, and its partition has an 8-digit name.
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('c2', 'm1')"), "t");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox i JOIN pg_class c ON c.oid = i.tableoid "
                "WHERE c.relname ~ '^inbox_p[0-9]{8}$' AND c.relname = 'inbox_p' || "
                "to_char(i.expires_on, 'YYYYMMDD')"),
            "1");
}

// Names and the drop rule agree at the bounds: the farthest day the sweep can make a partition
// for (p_now 3,660 days ahead, then 2 x 366 + 366 days) is an 8-digit name, found as expired by
// a sweep after it; and a partition of any other name is dropped by its bounds.
TEST_F(PgWorkerTest, SweepDropsEveryPartitionItCanCreateAtTheBounds) {
  const std::string farthest = "(now() AT TIME ZONE 'UTC')::date + 3660 + 3 * 366";
  ASSERT_EQ(Sql("SELECT idem.inbox_create_partition(" + farthest + ")"), "t");
  EXPECT_EQ(Sql(CountPartitions("day = " + farthest)), "1");
  // A partition named otherwise (by hand, or by an earlier version for a year past 9999).
  ASSERT_EQ(Sql("CREATE TABLE idem.inbox_legacy (LIKE idem.inbox INCLUDING DEFAULTS "
                "INCLUDING CONSTRAINTS); ALTER TABLE idem.inbox ATTACH PARTITION "
                "idem.inbox_legacy FOR VALUES FROM ('2001-01-01') TO ('2001-01-03')"),
            "");
  ASSERT_EQ(Sql("INSERT INTO idem.inbox (consumer, message_id, expires_on) VALUES "
                "('old', 'a', '2001-01-01'), ('old', 'b', '2001-01-02')"),
            "");
  EXPECT_EQ(SweepInbox(), 2);
  EXPECT_EQ(Sql("SELECT to_regclass('idem.inbox_legacy') IS NULL"), "t");
  // A sweep at the far bound itself (p_now 3,660 days ahead) leaves only the days after it.
  ASSERT_GE(SweepInbox("now() + interval '3660 days'", 0), 0);
  EXPECT_EQ(Sql(CountPartitions("day IS NULL OR day < (now() + interval '3660 days')::date")),
            "0");
}

TEST_F(PgWorkerTest, IdsAreBoundedWithAClearError) {
  const std::string long_id = "repeat('x', 9000)";
  const std::string claim = Sql("SELECT idem.inbox_claim('c', " + long_id + ")");
  EXPECT_TRUE(IsInvalid(claim)) << claim;  // was 54000, "index row size exceeds maximum"
  EXPECT_NE(claim.find("1024 bytes"), std::string::npos) << claim;
  EXPECT_EQ(Sql("SELECT idem.inbox_claim('c', repeat('x', 1024))"), "t");
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.inbox_claim(" + long_id + ", 'm')")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.ledger_append('a', " + long_id + ", 1)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.ledger_append(" + long_id + ", 't', 1)")));
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.transition('k', " + long_id + ", 's', '{none}')")));
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  auto claimed = worker::InboxClaim(c->get(), "c", std::string(2000, 'm'));
  EXPECT_EQ(claimed.status().code(), StatusCode::kInvalidArgument) << claimed.status().ToString();
  ASSERT_EQ(c->Exec("ROLLBACK"), "");
}

TEST_F(PgWorkerTest, IntentIdsFollowTheRuleForKeysAndLeasesAreBounded) {
  for (const std::string id : {"repeat('a', 300)", "'a b'", "'tab\tin'", "'é'", "''", "NULL"}) {
    const std::string answer = Sql("SELECT outcome FROM idem.intent_begin(" + id + ")");
    EXPECT_TRUE(IsInvalid(answer)) << id << ": " << answer;
  }
  EXPECT_EQ(Sql("SELECT outcome FROM idem.intent_begin(repeat('a', 255))"), "acquired");
  const std::string lease = Sql("SELECT outcome FROM idem.intent_begin('ok', '1000000 years')");
  EXPECT_TRUE(IsInvalid(lease)) << lease;  // was "timestamp out of range"
  EXPECT_NE(lease.find("3650 days"), std::string::npos) << lease;
  EXPECT_EQ(Sql("SELECT outcome FROM idem.intent_begin('ok', '3650 days')"), "acquired");
  EXPECT_TRUE(IsInvalid(Sql("SELECT idem.intent_sent('ok', 1, '1000000 years')")));
  // The C++ calls say so before any round trip.
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(worker::IntentBegin(c->get(), "a b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentBegin(c->get(), std::string(256, 'a')).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentBegin(c->get(), "ok2", std::chrono::hours(24 * 3651)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentSent(c->get(), "a b", 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(worker::IntentRelease(c->get(), "a b", 1).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

// ---- ledger -----------------------------------------------------------------------------------

TEST_F(PgWorkerTest, LedgerRefusesTruncateAndBalancesOnlyMoveWithEntries) {
  ASSERT_EQ(Sql("SELECT idem.ledger_append('w', 't1', 500)"), "t");
  EXPECT_EQ(Sql("TRUNCATE idem.ledger").rfind("ERROR ID002", 0), 0u);
  for (const std::string write :
       {"UPDATE idem.balances SET balance = 1000000", "DELETE FROM idem.balances",
        "INSERT INTO idem.balances VALUES ('other', 5)", "TRUNCATE idem.balances"}) {
    const std::string answer = Sql(write);
    EXPECT_EQ(answer.rfind("ERROR ID002", 0), 0u) << write << ": " << answer;
  }
  // Not even right after an append in the same transaction: the append's permission ends with
  // it.
  EXPECT_EQ(Sql("BEGIN; SELECT idem.ledger_append('w', 't2', 1); "
                "UPDATE idem.balances SET balance = 0")
                .rfind("ERROR ID002", 0),
            0u);
  // An entry inserted without the function still moves its balance, once.
  ASSERT_EQ(Sql("INSERT INTO idem.ledger (txn_id, account, amount) VALUES ('t3', 'w', 7)"), "");
  ASSERT_EQ(Sql("INSERT INTO idem.ledger (txn_id, account, amount) VALUES ('t3', 'w', 7) "
                "ON CONFLICT DO NOTHING"),
            "");
  EXPECT_EQ(Sql("SELECT idem.ledger_balance('w')"), "507");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.ledger"), "2");
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  EXPECT_EQ(*worker::LedgerBalance(c->get(), "w"), 507);
  ASSERT_EQ(c->Exec("COMMIT"), "");
}

// An application role with the privileges docs/reference/sql.md lists appends entries (the balance
// moves through the ledger's trigger, which runs as the schema's owner) and reads balances, but
// cannot write either table otherwise.
TEST_F(PgWorkerTest, AnApplicationRoleAppendsWithoutWritingBalances) {
  const std::string role = "app_" + database_;
  ASSERT_EQ(Sql("DROP ROLE IF EXISTS " + role + "; CREATE ROLE " + role +
                "; GRANT USAGE ON SCHEMA idem TO " + role +
                "; GRANT SELECT, INSERT ON idem.ledger TO " + role +
                "; GRANT SELECT ON idem.balances TO " + role +
                "; GRANT SELECT, INSERT, UPDATE ON idem.states TO " + role),
            "");
  auto c = Connect();
  ASSERT_EQ(c->Exec("SET ROLE " + role), "");
  EXPECT_EQ(c->Exec("SELECT idem.ledger_append('w', 't1', 5)"), "t");
  EXPECT_EQ(c->Exec("SELECT idem.ledger_append('w', 't1', 5)"), "f");
  EXPECT_EQ(c->Exec("SELECT idem.ledger_balance('w')"), "5");
  EXPECT_EQ(c->Exec("UPDATE idem.balances SET balance = 0").rfind("ERROR 42501", 0), 0u);
  EXPECT_EQ(c->Exec("DELETE FROM idem.ledger").rfind("ERROR 42501", 0), 0u);
  EXPECT_EQ(c->Exec("SELECT idem.transition('order', '1', 'PLACED', '{none}')"), "applied");
  ASSERT_EQ(c->Exec("RESET ROLE"), "");
  EXPECT_EQ(Sql("DROP OWNED BY " + role + "; DROP ROLE " + role), "");
}

// ---- the sweep in steps ---------------------------------------------------------------------

// A large sweep (a backlog of expired partitions, a 120-day retention's partitions to create)
// runs in steps while claims go on in other sessions: claims on existing partitions, claims
// that must create their partition (a 7-day retention no sweep prepared), and claims from new
// sessions, which lock idem.inbox itself. None waits for the sweep more than a step.
TEST_F(PgWorkerTest, AClaimIsNeverHeldUpByALargeSweep) {
  ASSERT_GE(SweepInbox(), 0);
  ASSERT_EQ(Sql("SELECT count(*) FROM (SELECT idem.inbox_create_partition("
                "(now() AT TIME ZONE 'UTC')::date - d) FROM generate_series(1, 40) d) x"),
            "40");
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('big', '120 days')"), "");
  ASSERT_EQ(Sql("SELECT idem.inbox_retention('weekly', '7 days')"), "");
  const std::string partitions =
      "SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.inbox'::regclass";
  const int before = std::stoi(Sql(partitions));

  std::atomic<bool> sweeping{true};
  auto sweep = std::async(std::launch::async, [&] {
    Conn c(server_.ConnInfo(database_));
    const auto start = std::chrono::steady_clock::now();
    auto swept = worker::InboxSweep(c.get());
    sweeping = false;
    return std::make_pair(swept, std::chrono::steady_clock::now() - start);
  });
  std::vector<double> latencies_ms;
  {
    auto warm = Connect();
    ASSERT_EQ(warm->Exec("SET statement_timeout = '10s'"), "");
    for (int i = 0; sweeping || i < 20; ++i) {
      std::unique_ptr<Conn> fresh;
      Conn* c = warm.get();
      if (i % 10 == 9) {  // a new session: its first claim locks idem.inbox
        fresh = Connect();
        ASSERT_EQ(fresh->Exec("SET statement_timeout = '10s'"), "");
        c = fresh.get();
      }
      const std::string consumer = i % 2 == 0 ? "billing" : "weekly";
      const auto start = std::chrono::steady_clock::now();
      const std::string claimed =
          c->Exec("SELECT idem.inbox_claim('" + consumer + "', 'm" + std::to_string(i) + "')");
      latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      ASSERT_EQ(claimed, "t") << consumer << " m" << i;
    }
  }
  const auto [swept, took] = sweep.get();
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  std::sort(latencies_ms.begin(), latencies_ms.end());
  const double p50 = latencies_ms[latencies_ms.size() / 2];
  const double max = latencies_ms.back();
  std::cout << "sweep " << std::chrono::duration<double>(took).count() << " s, partitions "
            << before << " -> " << Sql(partitions) << "; " << latencies_ms.size()
            << " claims meanwhile: p50 " << p50 << " ms, max " << max << " ms\n";
  // The sweep did a large job: the backlog is gone, the 120-day retention's days are there.
  EXPECT_EQ(Sql(CountPartitions("day IS NULL OR day < current_date")), "0");
  EXPECT_GE(std::stoi(Sql(partitions)), before - 40 + 100);
  // A step holds its locks for milliseconds, so no claim waits for the sweep as a whole (one
  // transaction for the whole job made a claim wait all of it). Measured against the sweep's
  // own time, which a loaded machine stretches alike.
  const double took_ms = std::chrono::duration<double, std::milli>(took).count();
  EXPECT_LT(max, took_ms / 4) << "p50 " << p50 << " ms";
}

}  // namespace
}  // namespace idem
