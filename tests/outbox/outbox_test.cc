// The outbox in PostgreSQL: idem.outbox_enqueue / idem::outbox::Enqueue in the caller's
// transaction, the claim's ordering-key rule, retention by day partitions; and the relay's
// subject matching. Against a real PostgreSQL started by the fixture.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "idem/outbox.h"
#include "outbox/emit_test_util.h"
#include "outbox/outbox_db.h"
#include "outbox/subject_match.h"
#include "pg/pg_binary_array.h"
#include "pg/pg_schema.h"
#include "pg/pg_sql_files.h"
#include "store/postgres/postgres_store.h"
#include "util/migrated_database.h"
#include "util/wait_for.h"

namespace idem {
namespace {

using testing::ConnectPg;
using testing::Exec;
using testing::PgConn;
using testing::SharedPostgresServer;

class OutboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server().error(), "");
    database_ = testing::MigratedDatabase(server());
    ASSERT_NE(database_, "");
  }
  static testing::PostgresServer& server() { return SharedPostgresServer(); }
  PgConn Connect() { return ConnectPg(server(), database_); }
  // Waits (up to 10 s) until the server has ended the session of backend `pid`.
  bool BackendGone(int pid) {
    const std::string sql =
        "SELECT count(*) FROM pg_stat_activity WHERE pid = " + std::to_string(pid);
    return testing::WaitFor([&] { return Query(sql) == "0"; }, std::chrono::seconds(10));
  }
  std::string Query(const std::string& sql) { return server().Query(database_, sql); }

  std::string database_;
};

outbox::Event MakeEvent(const std::string& id, std::optional<std::string> key = std::nullopt) {
  return {id, "orders.created", std::string("payload\0bytes", 13), {{"Content-Type", "application/json"}},
          std::move(key)};
}

TEST_F(OutboxTest, EnqueueIsIdempotentByEventIdAndKeepsTheRow) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto first = outbox::Enqueue(conn.get(), MakeEvent("evt-1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  auto again = outbox::Enqueue(conn.get(), MakeEvent("evt-1"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  // A later re-run of the producer, in another transaction, finds it too.
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto rerun = outbox::Enqueue(conn.get(), MakeEvent("evt-1"));
  ASSERT_TRUE(rerun.ok());
  EXPECT_FALSE(*rerun);
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox"), "1");
  EXPECT_EQ(Query("SELECT length(payload) || ' ' || headers::text || ' ' || state FROM idem.outbox"),
            "13 {\"Content-Type\": \"application/json\"} 0");
  // The SQL function from any language, with named arguments and defaults.
  EXPECT_EQ(Query("BEGIN; SELECT idem.outbox_enqueue(event_id => 'evt-2', subject => 'a.b', "
                  "payload => 'x'); COMMIT"),
            "");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE event_id = 'evt-2'"), "1");
}

// A batch job may enqueue many events in one transaction: event-id uniqueness takes row
// locks, not one lock-table entry per event.
TEST_F(OutboxTest, OneTransactionEnqueuesTwentyThousandEvents) {
  EXPECT_EQ(Query("BEGIN; SELECT count(*) FILTER (WHERE idem.outbox_enqueue('bulk-' || g, "
                  "'orders.created', 'x')) FROM generate_series(1, 20000) g; COMMIT"),
            "");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox"), "20000");
}

TEST_F(OutboxTest, RollbackLeavesNothing) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto queued = outbox::Enqueue(conn.get(), MakeEvent("evt-rolled-back"));
  ASSERT_TRUE(queued.ok() && *queued);
  ASSERT_EQ(Exec(conn.get(), "ROLLBACK"), "");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox"), "0");
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto again = outbox::Enqueue(conn.get(), MakeEvent("evt-rolled-back"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again) << "after a rollback the event id is free again";
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
}

// Two connections enqueue the same event id at once: the second waits for the first's
// transaction, then answers false after a COMMIT, or records it itself after a ROLLBACK.
TEST_F(OutboxTest, ConcurrentDuplicateWaitsForTheFirstTransaction) {
  for (const bool commit_first : {true, false}) {
    SCOPED_TRACE(commit_first ? "first commits" : "first rolls back");
    const std::string id = commit_first ? "race-commit" : "race-rollback";
    PgConn a = Connect();
    PgConn b = Connect();
    ASSERT_EQ(Exec(a.get(), "BEGIN"), "");
    auto first = outbox::Enqueue(a.get(), MakeEvent(id));
    ASSERT_TRUE(first.ok() && *first);
    auto second = std::async(std::launch::async, [&] {
      EXPECT_EQ(Exec(b.get(), "BEGIN"), "");
      auto r = outbox::Enqueue(b.get(), MakeEvent(id));
      EXPECT_EQ(Exec(b.get(), "COMMIT"), "");
      return r;
    });
    EXPECT_EQ(second.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
        << "the duplicate must wait for the first transaction";
    ASSERT_EQ(Exec(a.get(), commit_first ? "COMMIT" : "ROLLBACK"), "");
    auto r = second.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, !commit_first);
    EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE event_id = '" + id + "'"), "1");
  }
}

// Many threads race to enqueue the same ids: each id is recorded exactly once.
TEST_F(OutboxTest, RacingEnqueuesRecordEachIdOnce) {
  constexpr int kThreads = 8;
  constexpr int kIds = 50;
  std::atomic<int> recorded{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      PgConn conn = Connect();
      for (int i = 0; i < kIds; ++i) {
        EXPECT_EQ(Exec(conn.get(), "BEGIN"), "");
        auto r = outbox::Enqueue(conn.get(), MakeEvent("id-" + std::to_string(i), "key-" + std::to_string(i % 3)));
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        if (r.ok() && *r) recorded.fetch_add(1);
        EXPECT_EQ(Exec(conn.get(), "COMMIT"), "");
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(recorded.load(), kIds);
  EXPECT_EQ(Query("SELECT count(DISTINCT event_id) || ' ' || count(*) FROM idem.outbox"), "50 50");
}

TEST_F(OutboxTest, BadInputAndWrongTransactionStateAreClearErrors) {
  PgConn conn = Connect();
  auto outside = outbox::Enqueue(conn.get(), MakeEvent("evt"));
  EXPECT_EQ(outside.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(outbox::Enqueue(nullptr, MakeEvent("evt")).status().code(), StatusCode::kInvalidArgument);

  struct Case {
    outbox::Event event;
    std::string message;
  } cases[] = {
      {{"", "orders.created", "x", {}, {}}, "event_id"},
      {{std::string(256, 'a'), "orders.created", "x", {}, {}}, "event_id"},
      {{"e", "orders created", "x", {}, {}}, "NATS subject"},
      {{"e", "orders.*", "x", {}, {}}, "NATS subject"},
      {{"e", "orders..x", "x", {}, {}}, "NATS subject"},
      {{"e", "orders.x", "x", {{"Bad: name", "v"}}, {}}, "header"},
      {{"e", "orders.x", "x", {{"Nats-Expected-Stream", "X"}}, {}}, "not Nats-*"},
      {{"e", "orders.x", "x", {{"X-Multi", "a\r\nInjected: b"}}, {}}, "line breaks"},
  };
  for (const auto& c : cases) {
    ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
    auto r = outbox::Enqueue(conn.get(), c.event);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
    ASSERT_EQ(Exec(conn.get(), "ROLLBACK"), "");
  }
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox"), "0");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_ids"), "0");
}

// Above READ COMMITTED a concurrent duplicate is a serialization failure (the caller retries
// its transaction and then gets false), never a second row.
TEST_F(OutboxTest, SerializableDuplicateIsASerializationFailureNotASecondRow) {
  PgConn a = Connect();
  PgConn b = Connect();
  ASSERT_EQ(Exec(a.get(), "BEGIN ISOLATION LEVEL SERIALIZABLE"), "");
  ASSERT_EQ(Exec(b.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ"), "");
  ASSERT_EQ(Exec(b.get(), "SELECT 1"), "1");  // b's snapshot predates a's commit
  auto first = outbox::Enqueue(a.get(), MakeEvent("ser"));
  ASSERT_TRUE(first.ok() && *first) << first.status().ToString();
  ASSERT_EQ(Exec(a.get(), "COMMIT"), "");
  auto second = outbox::Enqueue(b.get(), MakeEvent("ser"));
  // 40001 maps to kUnavailable ("retry"), as every driver error of class 40 does.
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_NE(second.status().message().find("40001"), std::string::npos) << second.status().ToString();
  ASSERT_EQ(Exec(b.get(), "ROLLBACK"), "");
  ASSERT_EQ(Exec(b.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ"), "");
  auto retried = outbox::Enqueue(b.get(), MakeEvent("ser"));
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_FALSE(*retried);
  ASSERT_EQ(Exec(b.get(), "COMMIT"), "");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox"), "1");
}

// The claim's ordering-key rule: a relay never takes an event while an earlier pending event
// of its key is held by another relay; events without a key are taken freely.
TEST_F(OutboxTest, ClaimKeepsAKeyWithOneRelayAndInOrder) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  for (const auto& [id, key] : std::vector<std::pair<std::string, std::optional<std::string>>>{
           {"k1-a", "k1"}, {"k1-b", "k1"}, {"free-1", std::nullopt}, {"k1-c", "k1"}, {"k2-a", "k2"}}) {
    ASSERT_TRUE(outbox::Enqueue(conn.get(), MakeEvent(id, key)).ok());
  }
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  auto claim = [&](const std::string& relay, int limit) {
    return Query("SELECT coalesce(string_agg(event_id, ',' ORDER BY id), '') FROM "
                 "idem.outbox_claim('" + relay + "', " + std::to_string(limit) + ", 60000)");
  };
  EXPECT_EQ(claim("r1", 1), "k1-a");
  // r2 skips k1-b and k1-c (k1-a, earlier, is r1's) but takes the rest.
  EXPECT_EQ(claim("r2", 10), "free-1,k2-a");
  EXPECT_EQ(claim("r3", 10), "");
  // Once k1-a is published, the rest of k1 is free, in order.
  EXPECT_EQ(Query("SELECT idem.outbox_mark_published(ARRAY[id], ARRAY[day], ARRAY[7::bigint], "
                  "ARRAY[false]) FROM idem.outbox WHERE event_id = 'k1-a'"),
            "1");
  EXPECT_EQ(claim("r3", 10), "k1-b,k1-c");
  // A lapsed lease makes rows claimable again, first attempt kept.
  EXPECT_EQ(Query("UPDATE idem.outbox SET claim_until = now() - interval '1 s' WHERE event_id = 'k2-a'"), "");
  EXPECT_EQ(Query("SELECT event_id || ' ' || attempts FROM idem.outbox_claim('r4', 10, 60000)"),
            "k2-a 2");
  EXPECT_EQ(Query("SELECT state || ' ' || stream_seq FROM idem.outbox WHERE event_id = 'k1-a'"), "1 7");
}

// Schema version 12: a relay's batch is held by row locks. Two lockers get disjoint rows; a
// key's later events wait for its earlier one; the settle marks and commits; rows of a locker
// that rolls back (or dies) are free at once.
TEST_F(OutboxTest, LockedBatchesAreDisjointKeepKeysInOrderAndFreeOnRollback) {
  PgConn producer = Connect();
  ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
  for (const auto& [id, key] : std::vector<std::pair<std::string, std::optional<std::string>>>{
           {"k1-a", "k1"}, {"k1-b", "k1"}, {"free-1", std::nullopt}, {"k1-c", "k1"},
           {"k2-a", "k2"}, {"free-2", std::nullopt}}) {
    ASSERT_TRUE(outbox::Enqueue(producer.get(), MakeEvent(id, key)).ok());
  }
  ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  PgConn a = Connect(), b = Connect(), c = Connect();
  auto lock = [](PGconn* conn, int limit, int64_t after = 0) {
    return Exec(conn, "SELECT coalesce(string_agg(event_id || ':' || attempts, ',' ORDER BY id), '') "
                      "FROM idem.outbox_lock(" + std::to_string(limit) + ", " +
                      std::to_string(after) + ")");
  };
  ASSERT_EQ(Exec(a.get(), "BEGIN"), "");
  EXPECT_EQ(lock(a.get(), 1), "k1-a:1");
  ASSERT_EQ(Exec(b.get(), "BEGIN"), "");
  // b skips k1-a (a holds it) and, with it, k1-b and k1-c; it takes the rest.
  EXPECT_EQ(lock(b.get(), 10), "free-1:1,k2-a:1,free-2:1");
  ASSERT_EQ(Exec(c.get(), "BEGIN"), "");
  EXPECT_EQ(lock(c.get(), 10), "");
  ASSERT_EQ(Exec(c.get(), "ROLLBACK"), "");
  // a publishes k1-a and settles: marked, committed; k1's rest is free, in order.
  EXPECT_EQ(Exec(a.get(), "SELECT idem.outbox_settle('a-1', ARRAY[id], ARRAY[day], ARRAY[7::bigint], "
                          "ARRAY[false], '{}', '{}', NULL) FROM idem.outbox WHERE event_id = 'k1-a'"),
            "1");
  ASSERT_EQ(Exec(a.get(), "COMMIT"), "");
  EXPECT_EQ(Query("SELECT state || ' ' || stream_seq || ' ' || attempts FROM idem.outbox "
                  "WHERE event_id = 'k1-a'"),
            "1 7 1");
  // k1-b and k1-c are still b's: its lock took them and left them out (k1-a was a's), and
  // they stay locked until b's transaction ends.
  ASSERT_EQ(Exec(c.get(), "BEGIN"), "");
  EXPECT_EQ(lock(c.get(), 10), "");
  ASSERT_EQ(Exec(c.get(), "ROLLBACK"), "");
  // b dies without settling: its rows are free as soon as the server sees it gone.
  const int b_pid = PQbackendPID(b.get());
  b.reset();
  ASSERT_TRUE(BackendGone(b_pid));
  ASSERT_EQ(Exec(c.get(), "BEGIN"), "");
  EXPECT_EQ(lock(c.get(), 10, 0), "k1-b:1,free-1:1,k1-c:1,k2-a:1,free-2:1");
  ASSERT_EQ(Exec(c.get(), "ROLLBACK"), "");
  // Past an id: only the rows above it.
  const std::string k1c = Query("SELECT id FROM idem.outbox WHERE event_id = 'k1-c'");
  ASSERT_EQ(Exec(c.get(), "BEGIN"), "");
  EXPECT_EQ(lock(c.get(), 10, std::stoll(k1c)), "k2-a:1,free-2:1");
  ASSERT_EQ(Exec(c.get(), "ROLLBACK"), "");
}

// Schema version 18: a lock takes only the rows on its subjects (another relay's stay free
// for it), and rows of a key whose earlier row the caller's own earlier batch holds (p_held)
// are taken, where an earlier row held anywhere else, or on a subject the lock does not take,
// holds them back (returned flagged, locked until the transaction ends). Unkeyed rows are
// never held back.
TEST_F(OutboxTest, LockTakesItsSubjectsAndKeysHeldByItsOwnBatchesOnly) {
  PgConn producer = Connect();
  ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
  struct Row {
    const char* id;
    const char* subject;
    std::optional<std::string> key;
  };
  for (const Row& r : std::vector<Row>{{"k1-a", "orders.x", "k1"},
                                       {"free-1", "orders.x", std::nullopt},
                                       {"s-1", "short.x", std::nullopt},
                                       {"k1-b", "orders.x", "k1"},
                                       {"k2-a", "short.x", "k2"},
                                       {"k2-b", "orders.x", "k2"},
                                       {"free-2", "orders.x", std::nullopt}}) {
    auto queued = outbox::Enqueue(producer.get(), {r.id, r.subject, "p", {}, r.key});
    ASSERT_TRUE(queued.ok() && *queued) << queued.status().ToString();
  }
  ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  auto id_of = [&](const std::string& event) {
    return Query("SELECT id FROM idem.outbox WHERE event_id = '" + event + "'");
  };
  // event_id, with ":held" when held back, in id order.
  auto lock = [](PGconn* conn, int limit, const std::string& subjects, const std::string& held,
                 const std::string& floor = "0") {
    return Exec(conn, "SELECT coalesce(string_agg(event_id || CASE WHEN held_back THEN ':held' "
                      "ELSE '' END, ',' ORDER BY id), '') FROM idem.outbox_lock(" +
                          std::to_string(limit) + ", 0, " + subjects + ", " + held + ", " +
                          floor + ")");
  };
  PgConn a = Connect(), b = Connect(), c = Connect();
  ASSERT_EQ(Exec(a.get(), "BEGIN"), "");
  EXPECT_EQ(lock(a.get(), 1, "'{orders.>}'", "'{}'"), "k1-a");
  // b: k1-b waits for k1-a (a's), k2-b for k2-a (on a subject b does not take); the unkeyed
  // rows go; the short.x rows are not b's to lock.
  ASSERT_EQ(Exec(b.get(), "BEGIN"), "");
  EXPECT_EQ(lock(b.get(), 10, "'{orders.>}'", "'{}'"), "free-1,k1-b:held,k2-b:held,free-2");
  ASSERT_EQ(Exec(c.get(), "BEGIN"), "");
  EXPECT_EQ(lock(c.get(), 10, "'{short.*}'", "'{}'"), "s-1,k2-a");
  ASSERT_EQ(Exec(b.get(), "ROLLBACK"), "");
  // The relay holding k1-a locks its next batch: with k1-a as held, k1-b is in line behind
  // it. A NULL among the held ids or a NULL floor does not let anything through.
  ASSERT_EQ(Exec(b.get(), "BEGIN"), "");
  EXPECT_EQ(lock(b.get(), 10, "'{orders.>}'", "ARRAY[NULL]::bigint[]", "NULL"),
            "free-1,k1-b:held,k2-b:held,free-2");
  ASSERT_EQ(Exec(b.get(), "ROLLBACK"), "");
  ASSERT_EQ(Exec(b.get(), "BEGIN"), "");
  EXPECT_EQ(lock(b.get(), 10, "'{orders.>}'", "ARRAY[" + id_of("k1-a") + "]::bigint[]"),
            "free-1,k1-b,k2-b:held,free-2");
  ASSERT_EQ(Exec(b.get(), "ROLLBACK"), "");
  // Once k2-a is published, k2-b goes too.
  EXPECT_EQ(Exec(c.get(), "SELECT idem.outbox_settle('c-1', array_agg(id), array_agg(day), "
                          "array_agg(id), array_agg(false), '{}', '{}', NULL) FROM idem.outbox "
                          "WHERE subject = 'short.x'"),
            "2");
  ASSERT_EQ(Exec(c.get(), "COMMIT"), "");
  ASSERT_EQ(Exec(b.get(), "BEGIN"), "");
  EXPECT_EQ(lock(b.get(), 10, "'{orders.>}'", "ARRAY[" + id_of("k1-a") + "]::bigint[]"),
            "free-1,k1-b,k2-b,free-2");
  ASSERT_EQ(Exec(b.get(), "ROLLBACK"), "");
  ASSERT_EQ(Exec(a.get(), "ROLLBACK"), "");
  // Subject patterns that are not: a clear 22023, nothing locked.
  for (const char* bad : {"'{}'", "NULL", "'{orders..x}'", "'{\">.orders\"}'", "'{\"a b\"}'"}) {
    const std::string error = Exec(c.get(), "SELECT count(*) FROM idem.outbox_lock(10, 0, " +
                                                std::string(bad) + ", '{}', 0)");
    EXPECT_NE(error.find("ERROR:  idem.outbox_subjects_regex:"), std::string::npos)
        << bad << ": " << error;
  }
}

// idem.outbox_subjects_regex, which the lock filters with, matches exactly what the relay's
// own NATS matching does, metacharacters in tokens included.
TEST_F(OutboxTest, SubjectRegexMatchesAsNatsMatches) {
  const std::vector<std::string> patterns = {
      "orders.>", "orders.*", "*.created", ">", "*", "a.*.c", "orders.created", "a$b.>",
      "x(1).y", "p+q.*", "a\\b", "r[1]", "t|u", "v^w", "n{2}", "caf\u00e9.*", "a?b"};
  const std::vector<std::string> subjects = {
      "orders.created", "orders.eu.created", "orders", "a.b.c", "a.b.b.c", "a$b.x", "ab.x",
      "x(1).y", "x1.y", "p+q.r", "ppq.r", "a\\b", "ab", "r[1]", "r1", "t|u", "t", "v^w",
      "n{2}", "nn", "caf\u00e9.x", "cafe.x", "a?b", "b", "x"};
  PgConn conn = Connect();
  for (const auto& pattern : patterns) {
    for (const auto& subject : subjects) {
      const char* values[] = {subject.c_str(), pattern.c_str()};
      PGresult* r = PQexecParams(conn.get(),
                                 "SELECT $1::text ~ idem.outbox_subjects_regex(ARRAY[$2::text])",
                                 2, nullptr, values, nullptr, nullptr, 0);
      ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
      const bool matched = std::string(PQgetvalue(r, 0, 0)) == "t";
      PQclear(r);
      EXPECT_EQ(matched, outbox::SubjectMatches(pattern, subject))
          << "pattern '" << pattern << "', subject '" << subject << "'";
    }
  }
  EXPECT_EQ(Query("SELECT 'short.x' ~ idem.outbox_subjects_regex('{orders.>,short.*}')"), "t");
}

// The relay sends its settle's and attempt's arrays in PostgreSQL's binary format: what the
// server reads back is what was meant, at the edges of each type, and an empty array is '{}'.
TEST_F(OutboxTest, BinaryArraysReachTheServerAsWritten) {
  using internal::pg::BinaryArray;
  using internal::pg::PgArrayElement;
  PgConn conn = Connect();
  auto echo = [&](const std::string& cast, const std::string& bytes) {
    const std::string sql = "SELECT ($1::" + cast + ")::text";
    const char* values[] = {bytes.data()};
    const int lengths[] = {static_cast<int>(bytes.size())};
    const int formats[] = {1};
    PGresult* r = PQexecParams(conn.get(), sql.c_str(), 1, nullptr, values, lengths, formats, 0);
    std::string out = PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0)
                                                            : PQresultErrorMessage(r);
    PQclear(r);
    return out;
  };
  const std::vector<int64_t> big = {0, 1, -1, INT64_MAX, INT64_MIN, 1234567890123};
  EXPECT_EQ(echo("bigint[]", BinaryArray(PgArrayElement::kInt8, big.size(),
                                         [&](size_t i) { return big[i]; })),
            "{0,1,-1,9223372036854775807,-9223372036854775808,1234567890123}");
  const std::vector<int32_t> days = {20000, -3, INT32_MAX, INT32_MIN};
  EXPECT_EQ(echo("integer[]", BinaryArray(PgArrayElement::kInt4, days.size(),
                                          [&](size_t i) { return days[i]; })),
            "{20000,-3,2147483647,-2147483648}");
  const std::vector<bool> flags = {true, false, true};
  EXPECT_EQ(echo("boolean[]", BinaryArray(PgArrayElement::kBool, flags.size(),
                                          [&](size_t i) { return flags[i]; })),
            "{t,f,t}");
  EXPECT_EQ(echo("bigint[]", BinaryArray(PgArrayElement::kInt8, 0, [](size_t) { return 0; })),
            "{}");
  // The element type travels with the array: the server refuses one of another type.
  const std::string mismatched =
      echo("integer[]", BinaryArray(PgArrayElement::kInt8, 1, [](size_t) { return 7; }));
  EXPECT_NE(mismatched.find("instead of expected 23"), std::string::npos) << mismatched;
}

// The floor below which no row can be pending (schema version 16): it never passes a pending
// row (one another relay holds included), it waits for a transaction that drew an id before
// the mark and has not committed, and with nothing pending it is one above the last id drawn.
TEST_F(OutboxTest, FloorNeverPassesARowThatIsOrMayYetBePending) {
  PgConn producer = Connect(), late = Connect(), holder = Connect(), relay = Connect();
  auto enqueue = [&](PGconn* conn, const std::string& id) {
    auto enqueued = outbox::Enqueue(conn, MakeEvent(id));
    ASSERT_TRUE(enqueued.ok()) << id << ": " << enqueued.status().ToString();
    EXPECT_TRUE(*enqueued) << id;
  };
  auto commit_one = [&](const std::string& id) {
    ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
    enqueue(producer.get(), id);
    ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  };
  auto id_of = [&](const std::string& event) {
    return std::stoll(Query("SELECT id FROM idem.outbox WHERE event_id = '" + event + "'"));
  };
  auto publish = [&](const std::string& event) {
    EXPECT_EQ(Query("UPDATE idem.outbox SET state = 1 WHERE event_id = '" + event + "'"), "");
  };
  auto mark = [&] {  // in this order, each statement a transaction of its own
    const std::string last = Exec(relay.get(), "SELECT idem.outbox_last_id()");
    const std::string xid = Exec(relay.get(), "SELECT idem.outbox_floor_xid()");
    return std::make_pair(last, xid);
  };
  auto floor = [&](const std::pair<std::string, std::string>& m, int64_t from) {
    return Exec(relay.get(), "SELECT coalesce(idem.outbox_floor(" + m.first + ", '" + m.second +
                                 "'::xid8, " + std::to_string(from) + ")::text, 'wait')");
  };
  // No id drawn yet: the floor is the first id the sequence will hand out.
  EXPECT_EQ(floor(mark(), 0), "1");

  commit_one("e1");
  ASSERT_EQ(Exec(late.get(), "BEGIN"), "");
  enqueue(late.get(), "late");  // drawn, not committed
  // Marked while that transaction is the last to have begun, and nothing has finished since
  // it began (a snapshot's xmax would be its own id here, and would not wait for it).
  const auto right_after = mark();
  EXPECT_EQ(floor(right_after, 0), "wait");
  commit_one("e3");
  publish("e1");
  publish("e3");
  const auto before_commit = mark();
  EXPECT_EQ(floor(before_commit, 0), "wait") << "the open transaction may commit a lower id";
  ASSERT_EQ(Exec(late.get(), "COMMIT"), "");
  EXPECT_EQ(floor(before_commit, 0), std::to_string(id_of("late")));

  // A pending row another session holds locked counts as pending. (A transaction holding
  // row locks has a transaction id: one that began before a mark makes its floor wait.)
  ASSERT_EQ(Exec(holder.get(), "BEGIN"), "");
  ASSERT_EQ(Exec(holder.get(), "SELECT count(*) FROM idem.outbox_lock(10, 0)"), "1");
  const auto while_held = mark();
  EXPECT_EQ(floor(while_held, id_of("late")), "wait");
  ASSERT_EQ(Exec(holder.get(), "ROLLBACK"), "");
  const auto before_held = mark();
  ASSERT_EQ(Exec(holder.get(), "BEGIN"), "");
  ASSERT_EQ(Exec(holder.get(), "SELECT count(*) FROM idem.outbox_lock(10, 0)"), "1");
  EXPECT_EQ(floor(before_held, id_of("late")), std::to_string(id_of("late")));
  ASSERT_EQ(Exec(holder.get(), "ROLLBACK"), "");

  // Published, nothing open: one above the last id drawn, whatever floor came before.
  publish("late");
  const auto settled = mark();
  EXPECT_EQ(floor(settled, id_of("late")), std::to_string(id_of("e3") + 1));
  // A row enqueued after the mark is above the floor that mark gives.
  commit_one("e4");
  EXPECT_GT(id_of("e4"), id_of("e3"));
  EXPECT_EQ(floor(mark(), id_of("e3") + 1), std::to_string(id_of("e4")));
  // The gauges count from a floor; below it there is nothing pending to count.
  EXPECT_EQ(Query("SELECT pending FROM idem.outbox_stats(" + std::to_string(id_of("e4")) + ")"), "1");
}

// A batch taken around midnight holds rows of two day partitions (and a relay catching up
// after an outage, of several): the settle marks each row in its own partition with its own
// stream sequence, and counts them all.
TEST_F(OutboxTest, SettleMarksABatchSpanningDayPartitions) {
  ASSERT_EQ(Query("SELECT idem.outbox_ensure_partition(idem.outbox_today() - 1)"), "t");
  ASSERT_EQ(Query("INSERT INTO idem.outbox (day, event_id, subject, payload, enqueued_at, state) "
                  "VALUES (idem.outbox_today() - 1, 'yesterday', 'a.b', 'x', now(), 0); "
                  "INSERT INTO idem.outbox_ids VALUES ('yesterday', idem.outbox_today() - 1)"),
            "");
  PgConn producer = Connect();
  ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
  for (const char* id : {"today-1", "today-2"}) {
    ASSERT_TRUE(outbox::Enqueue(producer.get(), MakeEvent(id)).ok());
  }
  ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  PgConn relay = Connect();
  ASSERT_EQ(Exec(relay.get(), "BEGIN"), "");
  ASSERT_EQ(Exec(relay.get(), "CREATE TEMP TABLE held AS SELECT id, day, event_id "
                              "FROM idem.outbox_lock(10, 0)"),
            "");
  ASSERT_EQ(Exec(relay.get(), "SELECT count(DISTINCT day) || ' ' || count(*) FROM held"), "2 3");
  // Stream sequences 100 + position, in id order; one copy reported a duplicate.
  EXPECT_EQ(Exec(relay.get(), "SELECT idem.outbox_settle('two-days', array_agg(id ORDER BY id), "
                              "array_agg(day ORDER BY id), array_agg(100 + rn ORDER BY id), "
                              "array_agg(event_id = 'today-2' ORDER BY id), '{}', '{}', NULL) "
                              "FROM (SELECT *, row_number() OVER (ORDER BY id) rn FROM held) h"),
            "3");
  ASSERT_EQ(Exec(relay.get(), "COMMIT"), "");
  EXPECT_EQ(Query("SELECT string_agg(event_id || ':' || state || ':' || stream_seq || ':' || "
                  "duplicate || ':' || (day = idem.outbox_today()), ',' ORDER BY id) "
                  "FROM idem.outbox"),
            "yesterday:1:101:false:false,today-1:1:102:false:true,today-2:1:103:true:true");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE state = 0"), "0");
}

// The first publish attempt survives the relay that made it: the attempt record, committed
// before the publish, tells the next locker how old the first copy is (the duplicate window
// accounting) and counts the attempt. A failed publish is stamped on its rows by the settle.
// Records of finished batches go: the settle deletes its own, and outbox_forget_attempts those
// a dead relay left once their rows are published, so the table stays bounded.
TEST_F(OutboxTest, AttemptRecordsOutliveADeadRelayAndAreForgottenOnceSettled) {
  PgConn producer = Connect();
  ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
  for (const char* id : {"e1", "e2", "e3"}) {
    ASSERT_TRUE(outbox::Enqueue(producer.get(), MakeEvent(id)).ok());
  }
  ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  const std::string ids = Query("SELECT array_agg(id ORDER BY id) FROM idem.outbox");
  {
    PgConn dying = Connect();
    ASSERT_EQ(Exec(dying.get(), "BEGIN"), "");
    ASSERT_EQ(Exec(dying.get(), "SELECT count(*) FROM idem.outbox_lock(10)"), "3");
    // On another connection, committed before the (never settled) publish.
    ASSERT_EQ(Exec(producer.get(), "SELECT idem.outbox_attempt('dead/1', '" + ids + "')"), "");
    const int pid = PQbackendPID(dying.get());
    dying.reset();  // the relay dies: its connection closes, its transaction is rolled back
    ASSERT_TRUE(BackendGone(pid));
  }
  // The first attempt ages a while on the server's clock, so that the next locker's figure
  // shows it counts from that attempt: the time is what this test is about.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_attempts"), "1");
  EXPECT_EQ(Query("SELECT idem.outbox_forget_attempts(0)"), "0") << "its rows are still pending";

  PgConn next = Connect();
  ASSERT_EQ(Exec(next.get(), "BEGIN"), "");
  EXPECT_EQ(Exec(next.get(),
                 "SELECT string_agg(event_id || ':' || attempts || ':' || "
                 "(first_attempt_age_ms >= 50), ',' ORDER BY id) FROM idem.outbox_lock(10)"),
            "e1:2:true,e2:2:true,e3:2:true");
  ASSERT_EQ(Exec(producer.get(), "SELECT idem.outbox_attempt('next/1', '" + ids + "')"), "");
  // e1 and e2 published, e3's publish failed.
  EXPECT_EQ(Exec(next.get(), "SELECT idem.outbox_settle('next/1', a.ids[1:2], a.days[1:2], "
                             "ARRAY[1, 2]::bigint[], ARRAY[false, true], a.ids[3:3], a.days[3:3], "
                             "'nats: timeout') FROM (SELECT array_agg(id ORDER BY id) ids, "
                             "array_agg(day ORDER BY id) days FROM idem.outbox) a"),
            "2");
  ASSERT_EQ(Exec(next.get(), "COMMIT"), "");
  EXPECT_EQ(Query("SELECT string_agg(batch, ',') FROM idem.outbox_attempts"), "dead/1");
  EXPECT_EQ(Query("SELECT string_agg(event_id || ':' || state || ':' || attempts || ':' || "
                  "coalesce(error, '-') || ':' || (first_attempt_at IS NOT NULL), ',' ORDER BY id) "
                  "FROM idem.outbox"),
            "e1:1:2:-:true,e2:1:2:-:true,e3:0:1:nats: timeout:true")
      << "published rows count the dead relay's attempt and their own";
  // e3 counts both attempts the next time, and is as old as the first.
  ASSERT_EQ(Exec(next.get(), "BEGIN"), "");
  EXPECT_EQ(Exec(next.get(),
                 "SELECT event_id || ':' || attempts || ':' || (first_attempt_age_ms >= 50) "
                 "FROM idem.outbox_lock(10)"),
            "e3:3:true");
  EXPECT_EQ(Exec(next.get(), "SELECT idem.outbox_settle('next/2', ARRAY[id], ARRAY[day], "
                             "ARRAY[3::bigint], ARRAY[false], '{}', '{}', NULL) FROM idem.outbox "
                             "WHERE event_id = 'e3'"),
            "1");
  ASSERT_EQ(Exec(next.get(), "COMMIT"), "");
  // Every row published: the dead relay's record goes (not before it is older than asked).
  EXPECT_EQ(Query("SELECT idem.outbox_forget_attempts(3600000)"), "0");
  EXPECT_EQ(Query("SELECT idem.outbox_forget_attempts(0)"), "1");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_attempts"), "0");
}

// The relay's side: a batch connection that sits on its locks longer than the claim lease (a
// relay that hangs) is cut off by the server, its rows go to the next locker, and its late
// settle fails instead of marking anything.
TEST_F(OutboxTest, ABatchHeldIdleBeyondTheLeaseIsCutOffAndItsRowsTakenOver) {
  PgConn producer = Connect();
  ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
  for (const char* id : {"h1", "h2"}) ASSERT_TRUE(outbox::Enqueue(producer.get(), MakeEvent(id)).ok());
  ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
  logging::Log log(/*json=*/false);  // the server's notices, if any
  auto hung = outbox::OutboxDb::Open(server().Url(database_), log, /*listen=*/false);
  ASSERT_TRUE(hung.ok()) << hung.status().ToString();
  // Long enough for the second relay's first try to land within it on a loaded machine (opened
  // first: a connection takes longer than a lock).
  ASSERT_TRUE((*hung)->LimitIdleHold(std::chrono::milliseconds(1000)).ok());
  auto next = outbox::OutboxDb::Open(server().Url(database_), log, /*listen=*/false);
  ASSERT_TRUE(next.ok());
  const std::vector<std::string> all = {">"};
  auto held = (*hung)->LockBatch(10, 0, all);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->rows.size(), 2u);
  EXPECT_TRUE((*hung)->InTransaction());

  auto none = (*next)->LockBatch(10, 0, all);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->rows.empty()) << "held by the first, within its lease";
  EXPECT_FALSE((*next)->InTransaction()) << "an empty lock ends its transaction";
  std::vector<outbox::ClaimedRow> taken;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        auto locked = (*next)->LockBatch(10, 0, all);
        if (!locked.ok() || locked->rows.empty()) return false;
        taken = std::move(locked->rows);
        return true;
      },
      std::chrono::seconds(10)));
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].event_id, "h1");

  const outbox::PublishedRow late{held->rows[0].id, held->rows[0].day, 1, false};
  auto settled = (*hung)->SettleBatch("hung/1", {late}, {}, "");
  EXPECT_FALSE(settled.ok());
  const outbox::PublishedRow first{taken[0].id, taken[0].day, 1, false};
  const outbox::PublishedRow second{taken[1].id, taken[1].day, 2, false};
  auto marked = (*next)->SettleBatch("next/1", {first, second}, {}, "");
  ASSERT_TRUE(marked.ok()) << marked.status().ToString();
  EXPECT_EQ(*marked, 2);
  EXPECT_EQ(Query("SELECT string_agg(event_id || ':' || stream_seq, ',' ORDER BY id) FROM "
                  "idem.outbox WHERE state = 1"),
            "h1:1,h2:2");
}

// Schema version 8: the claim rewrites every row it takes, a whole page of rows at a time,
// and each of those updates stays on its page (HOT: no new index entries). Counted by
// PostgreSQL for this transaction only, so the assertion is exact.
TEST_F(OutboxTest, ClaimUpdatesAreHotUpdates) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "SELECT count(idem.outbox_enqueue('hot-' || g, 'orders.created', "
                             "convert_to(repeat('p', 128), 'UTF8'))) FROM generate_series(1, 3000) g"),
            "3000");
  const std::string part =
      Exec(conn.get(), "SELECT DISTINCT tableoid::regclass FROM idem.outbox");
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  ASSERT_EQ(Exec(conn.get(), "SELECT count(*) FROM idem.outbox_claim('r1', 1000, 60000)"), "1000");
  ASSERT_EQ(Exec(conn.get(), "SELECT count(*) FROM idem.outbox_claim('r1', 1000, 60000)"), "1000");
  EXPECT_EQ(Exec(conn.get(), "SELECT pg_stat_get_xact_tuples_updated('" + part + "'::regclass) || ' ' || "
                             "pg_stat_get_xact_tuples_hot_updated('" + part + "'::regclass)"),
            "2000 2000");
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
}

// A database at version 6 (partitions at fillfactor 80, version 3's partition function) keeps
// its rows through the upgrade; its partitions, existing and new, then leave room for HOT
// claims, and the rows enqueued before are claimed and marked as before.
TEST_F(OutboxTest, UpgradeFromVersion6LeavesRoomForHotClaims) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "SET client_min_messages TO warning"), "");
  // Turn this database back into a version 6 one.
  ASSERT_EQ(Exec(conn.get(), std::string(internal::pg::MigrationFiles()[2].sql) +  // version 3
                                 std::string(internal::pg::MigrationFiles()[5].sql)),  // 6
            "");
  ASSERT_EQ(Exec(conn.get(), "DO $$ DECLARE p regclass; BEGIN FOR p IN SELECT inhrelid::regclass "
                             "FROM pg_inherits WHERE inhparent = 'idem.outbox'::regclass LOOP "
                             "EXECUTE format('ALTER TABLE %s SET (fillfactor = 80)', p); END LOOP; END $$; "
                             "UPDATE public.idem_schema SET version = 6"),
            "");
  auto fillfactors = [&] {
    return Exec(conn.get(), "SELECT string_agg(DISTINCT array_to_string(c.reloptions, ','), ';') "
                            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                            "WHERE i.inhparent = 'idem.outbox'::regclass");
  };
  ASSERT_EQ(fillfactors(), "fillfactor=80");
  ASSERT_EQ(Exec(conn.get(), "SELECT count(idem.outbox_enqueue('old-' || g, 'orders.created', "
                             "'\\x01')) FROM generate_series(1, 10) g"),
            "10");

  auto version = MigratePostgresSchema(server().Url(database_));
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, internal::pg::kSchemaVersion);
  EXPECT_EQ(Query("SELECT max(version) FROM public.idem_schema"),
            std::to_string(internal::pg::kSchemaVersion));
  EXPECT_EQ(fillfactors(), "fillfactor=45");
  EXPECT_EQ(Query("SELECT idem.outbox_ensure_partition(idem.outbox_today() + 9)"), "t");
  EXPECT_EQ(fillfactors(), "fillfactor=45");
  // The rows from before the upgrade are claimed and marked as before.
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_claim('r1', 100, 60000)"), "10");
  EXPECT_EQ(Query("SELECT idem.outbox_mark_published(array_agg(id), array_agg(day), array_agg(id), "
                  "array_agg(false)) FROM idem.outbox"),
            "10");
}

// Retention drops whole day partitions past the horizon, but never one holding a pending or
// parked row.
TEST_F(OutboxTest, SweepDropsOldPublishedDaysOnly) {
  auto old_row = [&](int days_ago, const std::string& id, int state) {
    return Query("SELECT idem.outbox_ensure_partition(idem.outbox_today() - " + std::to_string(days_ago) +
                 "); INSERT INTO idem.outbox (day, event_id, subject, payload, enqueued_at, state) "
                 "VALUES (idem.outbox_today() - " + std::to_string(days_ago) + ", '" + id +
                 "', 'a.b', 'x', now(), " + std::to_string(state) + "); "
                 "INSERT INTO idem.outbox_ids VALUES ('" + id + "', idem.outbox_today() - " +
                 std::to_string(days_ago) + ")");
  };
  ASSERT_EQ(old_row(40, "old-published", 1), "");
  ASSERT_EQ(old_row(35, "old-pending", 0), "");
  ASSERT_EQ(old_row(33, "old-parked", 2), "");
  ASSERT_EQ(old_row(10, "recent-published", 1), "");
  EXPECT_EQ(Query("SELECT idem.outbox_sweep(30, 2)"), "1");
  EXPECT_EQ(Query("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM idem.outbox"),
            "old-parked,old-pending,recent-published");
  EXPECT_EQ(Query("SELECT idem.outbox_sweep(5, 2)"), "1");
  EXPECT_EQ(Query("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM idem.outbox"),
            "old-parked,old-pending");
  EXPECT_EQ(Query("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM idem.outbox_ids"),
            "old-parked,old-pending");
  // Partitions for today and the next two days exist.
  EXPECT_EQ(Query("SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.outbox'::regclass "
                  "AND inhrelid::regclass::text >= 'idem.outbox_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')"),
            "3");
}

// ---- schema version 19: every building block fails closed ---------------------------------

// The SQLSTATE `sql` ends with on `conn`, "" when it succeeds.
std::string SqlState(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  std::string state;
  const ExecStatusType s = PQresultStatus(r);
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
    const char* code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    state = code != nullptr ? code : "?";
  }
  PQclear(r);
  return state;
}

// A floor with half a mark used to skip its safety check (a NULL transaction id compares
// neither way), and a NULL start scanned nothing and answered last id + 1: both above a row
// that was about to commit. Now half a mark, or a last id never drawn, is 22023, and a NULL
// start is "no floor known", a scan from the first pending row.
TEST_F(OutboxTest, FloorRefusesHalfAMarkAndANullStartScansFromTheFirstRow) {
  PgConn producer = Connect(), late = Connect(), relay = Connect();
  auto commit_published = [&](const std::string& id) {
    ASSERT_EQ(Exec(producer.get(), "BEGIN"), "");
    ASSERT_TRUE(outbox::Enqueue(producer.get(), MakeEvent(id)).ok());
    ASSERT_EQ(Exec(producer.get(), "COMMIT"), "");
    ASSERT_EQ(Query("UPDATE idem.outbox SET state = 1 WHERE event_id = '" + id + "'"), "");
  };
  commit_published("e1");
  ASSERT_EQ(Exec(late.get(), "BEGIN"), "");
  ASSERT_TRUE(outbox::Enqueue(late.get(), MakeEvent("late")).ok());  // drawn, not committed
  commit_published("e3");
  const std::string last = Exec(relay.get(), "SELECT idem.outbox_last_id()");
  const std::string xid = "'" + Exec(relay.get(), "SELECT idem.outbox_floor_xid()") + "'::xid8";
  const std::string subjects = "'{orders.>}'";
  for (const std::string& call :
       {"idem.outbox_floor(" + last + ", NULL, 0)", "idem.outbox_floor(NULL, " + xid + ", 0)",
        "idem.outbox_floor(" + last + " + 1000, " + xid + ", 0)",
        "idem.outbox_floor(-1, " + xid + ", 0)",
        "idem.outbox_floors(" + last + ", NULL, 0, 0, " + subjects + ")",
        "idem.outbox_floors(NULL, " + xid + ", 0, 0, " + subjects + ")",
        "idem.outbox_floors(" + last + " + 1000, " + xid + ", 0, 0, " + subjects + ")"}) {
    EXPECT_EQ(SqlState(relay.get(), "SELECT * FROM " + call), "22023") << call;
  }
  // A whole mark taken while "late" may yet commit: no floor.
  EXPECT_EQ(Exec(relay.get(), "SELECT coalesce(idem.outbox_floor(" + last + ", " + xid +
                                  ", NULL)::text, 'wait')"),
            "wait");
  ASSERT_EQ(Exec(late.get(), "COMMIT"), "");
  const std::string late_id = Query("SELECT id FROM idem.outbox WHERE event_id = 'late'");
  EXPECT_EQ(Exec(relay.get(), "SELECT idem.outbox_floor(" + last + ", " + xid + ", NULL)"), late_id);
  EXPECT_EQ(Exec(relay.get(), "SELECT any_floor || ' ' || covered_floor FROM idem.outbox_floors(" +
                                  last + ", " + xid + ", NULL, NULL, " + subjects + ")"),
            late_id + " " + late_id);
}

// LIMIT NULL is no limit: a NULL limit locked (or, with the legacy claim, leased) every
// pending row, and a NULL start locked none, which a relay takes for an empty outbox. Every
// overload still installed refuses them now, and the claim a NULL relay or lease.
TEST_F(OutboxTest, LockAndClaimRefuseANullOrOutOfRangeLimitAndANullStart) {
  EXPECT_EQ(Query("SELECT count(*) FILTER (WHERE idem.outbox_enqueue('e' || g, 'orders.created', "
                  "'x')) FROM generate_series(1, 3) g"),
            "3");
  PgConn relay = Connect();
  for (const char* call :
       {"idem.outbox_lock(NULL, 0, '{orders.>}', '{}', 0)",
        "idem.outbox_lock(0, 0, '{orders.>}', '{}', 0)",
        "idem.outbox_lock(10001, 0, '{orders.>}', '{}', 0)",
        "idem.outbox_lock(10, NULL, '{orders.>}', '{}', 0)", "idem.outbox_lock(NULL)",
        "idem.outbox_lock(-1, 0)", "idem.outbox_lock(10, NULL)",
        "idem.outbox_claim('r1', NULL, 60000)", "idem.outbox_claim('r1', 10, NULL)",
        "idem.outbox_claim('r1', 10, 0)", "idem.outbox_claim(NULL, 10, 60000)"}) {
    ASSERT_EQ(Exec(relay.get(), "BEGIN"), "");
    EXPECT_EQ(SqlState(relay.get(), std::string("SELECT count(*) FROM ") + call), "22023") << call;
    ASSERT_EQ(Exec(relay.get(), "ROLLBACK"), "");
  }
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE claim_until IS NULL AND attempts = 0 "
                  "AND claimed_by IS NULL"),
            "3");
  // A NULL held list and floor are "none" and "unknown", as before.
  ASSERT_EQ(Exec(relay.get(), "BEGIN"), "");
  EXPECT_EQ(Exec(relay.get(), "SELECT count(*) FROM idem.outbox_lock(10, 0, '{orders.>}', NULL, "
                              "NULL)"),
            "3");
  ASSERT_EQ(Exec(relay.get(), "ROLLBACK"), "");
}

// A gauge read with a NULL floor (what idem.outbox_floor answers while none is known) counted
// 0 pending rows and 0 s of lag; it counts from the first pending row now, the one answer that
// cannot under-report.
TEST_F(OutboxTest, GaugesCountFromTheStartForANullFloor) {
  EXPECT_EQ(Query("SELECT count(*) FILTER (WHERE idem.outbox_enqueue('e' || g, "
                  "CASE WHEN g = 1 THEN 'short.x' ELSE 'orders.created' END, 'x')) "
                  "FROM generate_series(1, 3) g"),
            "3");
  ASSERT_EQ(Query("UPDATE idem.outbox SET enqueued_at = now() - interval '1 hour'"), "");
  const std::string above = Query("SELECT max(id) + 1 FROM idem.outbox");
  EXPECT_EQ(Query("SELECT pending || ' ' || (lag_seconds >= 3600) FROM idem.outbox_stats(NULL)"),
            "3 true");
  EXPECT_EQ(Query("SELECT idem.outbox_lag(NULL, '{orders.>}') >= 3600"), "t");
  EXPECT_EQ(Query("SELECT pending || ' ' || (lag_seconds >= 3600) || ' ' || other_pending "
                  "FROM idem.outbox_stats(NULL, '{orders.>}', 0)"),
            "2 true 1");
  EXPECT_EQ(Query("SELECT pending || ' ' || other_pending || ' ' || other_event_id "
                  "FROM idem.outbox_stats(" + above + ", '{orders.>}', NULL)"),
            "0 1 e1");
}

// The arrays of one batch line up, or nothing happens: unnest() pads a shorter array with
// NULLs, which marked rows published without a stream sequence. An attempt record's span is
// its ids' lowest and highest, whatever their order (reversed ids hid it from the next lock,
// which then lost the attempt); a park needs a reason; forgetting needs an age.
TEST_F(OutboxTest, SettleAttemptParkAndForgetRefuseWhatDoesNotLineUp) {
  EXPECT_EQ(Query("SELECT count(*) FILTER (WHERE idem.outbox_enqueue('e' || g, 'orders.created', "
                  "'x')) FROM generate_series(1, 3) g"),
            "3");
  const std::string ids = Query("SELECT array_agg(id ORDER BY id) FROM idem.outbox");
  const std::string days = Query("SELECT array_agg(day ORDER BY id) FROM idem.outbox");
  const std::string a = "'" + ids + "'::bigint[], '" + days + "'::integer[]";
  PgConn relay = Connect();
  for (const std::string& call : std::vector<std::string>{
           "idem.outbox_settle('b', " + a + ", '{1,2}', '{f,f,f}', '{}', '{}', '')",
           "idem.outbox_settle('b', " + a + ", '{1,2,3}', '{f,f}', '{}', '{}', '')",
           "idem.outbox_settle('b', " + a + ", '{1,NULL,3}', '{f,f,f}', '{}', '{}', '')",
           "idem.outbox_settle('b', " + a + ", NULL, '{f,f,f}', '{}', '{}', '')",
           "idem.outbox_settle(NULL, " + a + ", '{1,2,3}', '{f,f,f}', '{}', '{}', '')",
           "idem.outbox_settle('b', '{}', '{}', '{}', '{}', " + a + ", NULL)",
           "idem.outbox_settle('b', '{}', '{}', '{}', '{}', '" + ids + "', '{1}', 'x')",
           "idem.outbox_mark_published(" + a + ", '{1,2}', '{f,f,f}')",
           "idem.outbox_attempt(NULL, '" + ids + "')", "idem.outbox_attempt('b', NULL)",
           "idem.outbox_attempt('b', '{}')", "idem.outbox_attempt('b', '{1,NULL}')",
           "idem.outbox_park(" + Query("SELECT min(id) FROM idem.outbox") + ", " +
               Query("SELECT min(day) FROM idem.outbox") + ", NULL)",
           "idem.outbox_forget_attempts(NULL)", "idem.outbox_forget_attempts(-1)"}) {
    ASSERT_EQ(Exec(relay.get(), "BEGIN"), "");
    EXPECT_EQ(SqlState(relay.get(), "SELECT * FROM " + call), "22023") << call;
    ASSERT_EQ(Exec(relay.get(), "ROLLBACK"), "");
  }
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE state = 0 AND attempts = 0"), "3");

  // A record of the ids in descending order is found by a lock of the first row alone.
  ASSERT_EQ(Query("SELECT idem.outbox_attempt('dead/1', (SELECT array_agg(id ORDER BY id DESC) "
                  "FROM idem.outbox))"),
            "");
  ASSERT_EQ(Exec(relay.get(), "BEGIN"), "");
  EXPECT_EQ(Exec(relay.get(), "SELECT attempts FROM idem.outbox_lock(1, 0, '{orders.>}', '{}', 0)"),
            "2");
  ASSERT_EQ(Exec(relay.get(), "ROLLBACK"), "");
}

// An ordering key goes into an index: at most 1,024 bytes, a clear 22023 beyond (a longer one
// was stored when it compressed well, and failed with an index-size error when not).
TEST_F(OutboxTest, EnqueueBoundsTheOrderingKey) {
  PgConn conn = Connect();
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto at_bound = outbox::Enqueue(conn.get(), MakeEvent("at-bound", std::string(1024, 'k')));
  ASSERT_TRUE(at_bound.ok()) << at_bound.status().ToString();
  EXPECT_TRUE(*at_bound);
  auto beyond = outbox::Enqueue(conn.get(), MakeEvent("beyond", std::string(1025, 'k')));
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidArgument) << beyond.status().ToString();
  EXPECT_NE(beyond.status().message().find("ordering_key"), std::string::npos);
  ASSERT_EQ(Exec(conn.get(), "ROLLBACK"), "");
}

// The relay sends an ordering key as the header Idem-Ordering-Key, whose value cannot hold a
// line break (it would end the header line): a key with a control character is a clear 22023
// (schema version 20); spaces, '%' and non-ASCII letters are keys like any other.
TEST_F(OutboxTest, EnqueueRefusesOrderingKeysAHeaderCannotCarry) {
  PgConn conn = Connect();
  for (const std::string key : {"a\nb", "a\r", "tab\there", "del\x7f"}) {
    ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
    auto refused = outbox::Enqueue(conn.get(), MakeEvent("bad", key));
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(refused.status().message().find("Idem-Ordering-Key"), std::string::npos)
        << refused.status().ToString();
    ASSERT_EQ(Exec(conn.get(), "ROLLBACK"), "");
  }
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  auto fine = outbox::Enqueue(conn.get(), MakeEvent("fine", " konto ä 50% "));
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_TRUE(*fine);
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  // The relay's lock answers the key.
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  EXPECT_EQ(Exec(conn.get(),
                 "SELECT ordering_key FROM idem.outbox_lock_keyed(1, 0, '{>}', '{}', 0)"),
            " konto ä 50% ");
  ASSERT_EQ(Exec(conn.get(), "ROLLBACK"), "");
}

// The sweep's days are 0 to 366 (every partition from today to today + ahead_days is created
// in one transaction), a partition's day within 3,660 days before and 366 after today: a
// clear 22023 beyond, and for NULLs, which did nothing or failed with another error.
TEST_F(OutboxTest, SweepAndPartitionsRefuseDaysOutOfBounds) {
  PgConn conn = Connect();
  for (const char* call :
       {"idem.outbox_sweep(30, 367)", "idem.outbox_sweep(30, -1)", "idem.outbox_sweep(30, NULL)",
        "idem.outbox_sweep(367, 2)", "idem.outbox_sweep(-1, 2)", "idem.outbox_sweep(NULL, 2)",
        "idem.outbox_ensure_partition(NULL)",
        "idem.outbox_ensure_partition(idem.outbox_today() + 367)",
        "idem.outbox_ensure_partition(idem.outbox_today() - 3661)"}) {
    EXPECT_EQ(SqlState(conn.get(), std::string("SELECT ") + call), "22023") << call;
  }
  const std::string partitions =
      "SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.outbox'::regclass";
  EXPECT_EQ(Query(partitions), "3");
  EXPECT_EQ(Query("SELECT idem.outbox_sweep(0, 5)"), "0");
  EXPECT_EQ(Query(partitions), "6");
  EXPECT_EQ(Query("SELECT idem.outbox_ensure_partition(idem.outbox_today() - 3660)"), "t");
}

// A row committed into an old partition after the sweep checked it, while the sweep waits for
// the partition's lock, keeps the partition (it used to be dropped with it).
TEST_F(OutboxTest, SweepNeverDropsARowCommittedWhileItWaitsForTheLock) {
  ASSERT_EQ(Query("SELECT idem.outbox_ensure_partition(idem.outbox_today() - 40)"), "t");
  PgConn writer = Connect(), sweeper = Connect();
  ASSERT_EQ(Exec(writer.get(), "BEGIN"), "");
  ASSERT_EQ(Exec(writer.get(),
                 "INSERT INTO idem.outbox (day, event_id, subject, payload, enqueued_at) VALUES "
                 "(idem.outbox_today() - 40, 'late', 'a.b', 'x', now()); "
                 "INSERT INTO idem.outbox_ids VALUES ('late', idem.outbox_today() - 40)"),
            "");
  const int sweeper_pid = PQbackendPID(sweeper.get());
  auto swept = std::async(std::launch::async,
                          [&] { return Exec(sweeper.get(), "SELECT idem.outbox_sweep(30, 2)"); });
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        return Query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                     "AND pid = " + std::to_string(sweeper_pid)) == "1";
      },
      std::chrono::milliseconds(1500)));
  ASSERT_EQ(Exec(writer.get(), "COMMIT"), "");
  EXPECT_EQ(swept.get(), "0");
  EXPECT_EQ(Query("SELECT event_id || ' ' || state FROM idem.outbox"), "late 0");
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_ids WHERE event_id = 'late'"), "1");
}

TEST(SubjectMatchTest, WildcardsAsNatsDefinesThem) {
  using outbox::SubjectMatches;
  EXPECT_TRUE(SubjectMatches("orders.>", "orders.created"));
  EXPECT_TRUE(SubjectMatches("orders.>", "orders.eu.created"));
  EXPECT_FALSE(SubjectMatches("orders.>", "orders"));
  EXPECT_TRUE(SubjectMatches("orders.*", "orders.created"));
  EXPECT_FALSE(SubjectMatches("orders.*", "orders.eu.created"));
  EXPECT_TRUE(SubjectMatches("*.created", "orders.created"));
  EXPECT_TRUE(SubjectMatches("orders.created", "orders.created"));
  EXPECT_FALSE(SubjectMatches("orders.created", "orders.created.x"));
  EXPECT_FALSE(SubjectMatches("orders.created", "orders"));
  EXPECT_FALSE(SubjectMatches("payments.>", "orders.created"));
  EXPECT_TRUE(SubjectMatches(">", "a.b.c"));
  EXPECT_TRUE(outbox::AnySubjectMatches({"a.>", "b.*"}, "b.x"));
  EXPECT_FALSE(outbox::AnySubjectMatches({}, "b.x"));
}

TEST(SubjectMatchTest, PatternsAndWhetherOneLiesWithinAnother) {
  using outbox::IsSubjectPattern;
  using outbox::PatternWithin;
  EXPECT_TRUE(IsSubjectPattern("orders.>"));
  EXPECT_TRUE(IsSubjectPattern("*.created"));
  EXPECT_TRUE(IsSubjectPattern("a*b.c"));  // a literal token, as NATS reads it
  EXPECT_FALSE(IsSubjectPattern(""));
  EXPECT_FALSE(IsSubjectPattern("orders..x"));
  EXPECT_FALSE(IsSubjectPattern(".orders"));
  EXPECT_FALSE(IsSubjectPattern("orders."));
  EXPECT_FALSE(IsSubjectPattern(">.orders"));
  EXPECT_FALSE(IsSubjectPattern("orders x"));
  EXPECT_TRUE(PatternWithin("orders.eu.>", "orders.>"));
  EXPECT_TRUE(PatternWithin("orders.*", "orders.>"));
  EXPECT_TRUE(PatternWithin("orders.created", "orders.*"));
  EXPECT_TRUE(PatternWithin("orders.>", "orders.>"));
  EXPECT_TRUE(PatternWithin("a.b", ">"));
  EXPECT_FALSE(PatternWithin("orders.>", "orders.*"));
  EXPECT_FALSE(PatternWithin("orders", "orders.>"));
  EXPECT_FALSE(PatternWithin("orders.*", "orders.created"));
  EXPECT_FALSE(PatternWithin("short.>", "orders.>"));
  EXPECT_FALSE(PatternWithin("a.b.c", "a.*"));
  EXPECT_FALSE(PatternWithin("a.b", "a.b.c"));
  EXPECT_TRUE(outbox::AnyPatternCovers({"orders.>", "short.*"}, "short.x"));
  EXPECT_FALSE(outbox::AnyPatternCovers({"orders.>", "short.*"}, "short.>"));
}

}  // namespace
}  // namespace idem
