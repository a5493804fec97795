// `idem relay` end to end: the real binary between a real PostgreSQL and a real
// `nats-server -js`, both started by the fixtures; crashes are real SIGKILLs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "idem/outbox.h"
#include "outbox/emit_test_util.h"
#include "store/postgres/postgres_store.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/tcp_sockets.h"
#include "util/build_tree.h"
#include "util/migrated_database.h"

namespace idem {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ConnectPg;
using testing::Exec;
using testing::HoldsFor;
using testing::PgConn;
using testing::ReadStream;
using testing::RelayProcess;
using testing::SharedPostgresServer;
using testing::StreamMessage;
using testing::WaitFor;

class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg().error(), "");
    database_ = testing::MigratedDatabase(pg());
    ASSERT_NE(database_, "");
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
  }

  static testing::PostgresServer& pg() { return SharedPostgresServer(); }
  std::string Query(const std::string& sql) { return pg().Query(database_, sql); }
  int64_t Count(const std::string& where) {
    return std::atoll(Query("SELECT count(*) FROM idem.outbox WHERE " + where).c_str());
  }

  // Enqueues events `prefix`0 .. `prefix`(n-1), `per_tx` per transaction.
  void Enqueue(const std::string& prefix, int n, int per_tx = 50,
               const std::string& subject = "orders.created") {
    PgConn conn = ConnectPg(pg(), database_);
    for (int i = 0; i < n; i += per_tx) {
      ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
      for (int j = i; j < std::min(n, i + per_tx); ++j) {
        auto r = outbox::Enqueue(conn.get(), {prefix + std::to_string(j), subject,
                                              "payload " + std::to_string(j), {{"X-Test", "1"}}});
        ASSERT_TRUE(r.ok() && *r) << r.status().ToString();
      }
      ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
    }
  }

  std::vector<std::string> RelayArgs(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--store", pg().Url(database_), "--nats", nats_.Url(),
                                     "--stream", "ORDERS", "--poll-interval", "200ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::string Log(const std::string& name) { return dir_.File(name); }

  // Waits until the stream has stored everything a relay sent before it died or hung, then
  // returns how many messages it holds. nats-server has handled every message it read from a
  // dead relay once it has closed its connection (`connections_left`: this test's own, and a
  // hung relay's), and has read everything a hung one sent once no byte waits in a socket. A
  // copy of `stored_id` (an event the stream holds) published then is queued for the stream
  // behind them all: the stream has taken them when it answers that the copy is a duplicate.
  uint64_t StreamMessagesOnceTaken(const std::string& stored_id, int connections_left) {
    EXPECT_TRUE(WaitFor([&] { return nats_.Connections() == connections_left; }, seconds(10)))
        << nats_.Connections() << " connections";
    EXPECT_TRUE(
        WaitFor([&] { return testing::ServerHasReadEverything(nats_.port()); }, seconds(10)));
    bool duplicate = false;
    EXPECT_EQ(js_.Publish("orders.created", "copy", stored_id, {}, &duplicate), "");
    EXPECT_TRUE(duplicate) << stored_id << " is not in the stream";
    return js_.StreamMessages("ORDERS");
  }

  std::string database_;
  testing::TempDir dir_;
  testing::NatsServer nats_;
  testing::JsClient js_;
};

bool ExitedWith(const std::optional<int>& status, int code) {
  return status && WIFEXITED(*status) && WEXITSTATUS(*status) == code;
}

// The sweep keeps at most 366 days (idem.outbox_sweep refuses more): a longer retention is
// refused at start, not by the first sweep an hour later.
TEST_F(RelayTest, RetentionBeyondTheSweepsBoundIsRefusedAtStart) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  testing::Process relay({idem::build_tree::kIdemBinary, "relay", "--store", pg().Url(database_), "--nats", nats_.Url(),
                          "--stream", "ORDERS", "--outbox-retention-days", "367"},
                         Log("retention.log"));
  EXPECT_TRUE(ExitedWith(relay.WaitForExit(seconds(10)), 2)) << relay.Output();
  EXPECT_NE(relay.Output().find("--outbox-retention-days must be 0 to 366"), std::string::npos)
      << relay.Output();
}

TEST_F(RelayTest, MissingStreamIsAClearErrorAndCreateStreamCreatesIt) {
  testing::Process missing({idem::build_tree::kIdemBinary, "relay", "--store", pg().Url(database_), "--nats",
                            nats_.Url(), "--stream", "NOPE"},
                           Log("missing.log"));
  const auto status = missing.WaitForExit(seconds(30));
  EXPECT_TRUE(ExitedWith(status, 2)) << missing.Output();
  EXPECT_NE(missing.Output().find("stream 'NOPE' does not exist"), std::string::npos)
      << missing.Output();

  Enqueue("created-", 10);
  RelayProcess relay(
      {"--store", pg().Url(database_), "--nats", nats_.Url(), "--create-stream", "FRESH",
       "--subjects", "orders.>", "--duplicate-window", "45s"},
      Log("create.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 10; }, seconds(20)))
      << relay.process().Output();
  EXPECT_EQ(relay.Metric("idem_relay_duplicate_window_seconds"), 45);
  const auto messages = ReadStream(js_.js(), "FRESH");
  ASSERT_EQ(messages.size(), 10u);
  EXPECT_EQ(messages[0].msg_id, "created-0");
  EXPECT_EQ(messages[0].headers.at("X-Test"), "1");
  EXPECT_EQ(messages[0].data, "payload 0");
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0) << relay.process().Output();
}

// A NATS server that refuses the relay's token will never take its connection: the relay stops
// at start with exit 2 and says why (as `idem consume` does), rather than retrying forever.
TEST_F(RelayTest, ANatsServerThatRefusesTheTokenEndsTheRelayAtStart) {
  testing::NatsServer guarded(testing::NatsServer::Options{.auth_token = "the-right-token"});
  ASSERT_EQ(guarded.Start(), "");
  const std::string token_file = dir_.File("wrong-token");
  std::ofstream(token_file) << "a-wrong-token\n";
  testing::Process relay({idem::build_tree::kIdemBinary, "relay", "--store", pg().Url(database_),
                          "--nats", guarded.Url(), "--nats-token-file", token_file, "--stream",
                          "ORDERS"},
                         Log("refused.log"));
  EXPECT_TRUE(ExitedWith(relay.WaitForExit(seconds(10)), 2)) << relay.Output();
  EXPECT_NE(relay.Output().find("the connection cannot be made"), std::string::npos)
      << relay.Output();
  EXPECT_NE(relay.Output().find("--nats-token-file"), std::string::npos) << relay.Output();
  EXPECT_EQ(relay.Output().find("a-wrong-token"), std::string::npos) << relay.Output();
}

// SIGKILL after the PubAcks and before the mark: on restart the rows go out again, the stream
// answers duplicate: true, and a consumer sees each event once.
TEST_F(RelayTest, KilledBetweenPublishAndMarkRepublishesAsDuplicates) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  Enqueue("evt-", 200);
  {
    RelayProcess crashing(RelayArgs({"--batch", "50", "--claim-lease", "1s"}), Log("crash.log"),
                          "relay.after_publish");
    const auto status = crashing.process().WaitForExit(seconds(30));
    ASSERT_TRUE(status && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL)
        << crashing.process().Output();
  }
  EXPECT_EQ(Count("state = 1"), 0) << "nothing was marked";
  // The crash point fires when the first batch's PubAcks are collected. The relay publishes the
  // next batch before collecting them (pipelined), so by then part or all of the second batch
  // may have reached the stream too: every one of those is published and unmarked.
  const uint64_t published = StreamMessagesOnceTaken("evt-0", 1);
  EXPECT_GE(published, 50u) << "the first batch reached the stream";
  EXPECT_LE(published, 100u) << "at most the batch in flight behind it";

  RelayProcess relay(RelayArgs({"--batch", "50", "--claim-lease", "1s"}), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 200; }, seconds(30)))
      << relay.process().Output();
  EXPECT_TRUE(
      WaitFor([&] { return relay.Metric("idem_relay_published_total") == 200; }, seconds(5)));
  EXPECT_EQ(relay.Metric("idem_relay_duplicates_total"), static_cast<double>(published));
  EXPECT_EQ(relay.Metric("idem_relay_beyond_window_total"), 0);
  EXPECT_EQ(Count("duplicate"), static_cast<int64_t>(published));
  const auto messages = ReadStream(js_.js(), "ORDERS");
  std::set<std::string> ids;
  for (const auto& m : messages) ids.insert(m.msg_id);
  EXPECT_EQ(messages.size(), 200u);
  EXPECT_EQ(ids.size(), 200u);
  // Each row's recorded sequence is the stream's.
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox WHERE stream_seq BETWEEN 1 AND 200"), "200");
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
  // What the crashed relay left in idem.outbox_attempts (its batches in flight, one or two) is
  // all that is left, and goes once its rows are published: the table stays bounded.
  const std::string left = Query("SELECT count(*) FROM idem.outbox_attempts");
  EXPECT_TRUE(left == "1" || left == "2") << left;
  EXPECT_EQ(Query("SELECT idem.outbox_forget_attempts(0)"), left);
  EXPECT_EQ(Query("SELECT count(*) FROM idem.outbox_attempts"), "0");
}

// A relay that hangs (SIGSTOP after a batch's PubAcks, before its settle) holds its rows only
// for --claim-lease (3 s here): PostgreSQL then ends its idle sessions, another relay publishes the rows
// (the stream drops the copies), and the hung relay, resumed, marks nothing and carries on.
TEST_F(RelayTest, AHungRelaysRowsGoToAnotherRelayAfterTheLease) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  Enqueue("evt-", 200);
  // The hung relay's rows are free once its batch connections sat idle for the lease; the last
  // statement on them came after this moment.
  const auto hung_started = std::chrono::steady_clock::now();
  RelayProcess hung(RelayArgs({"--batch", "50", "--claim-lease", "3s"}), Log("hung.log"),
                    "relay.after_publish:stop");
  const pid_t pid = hung.process().pid();
  auto state = [pid] {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    return paren == std::string::npos || paren + 2 >= line.size() ? '?' : line[paren + 2];
  };
  ASSERT_TRUE(WaitFor([&] { return state() == 'T'; }, seconds(30))) << hung.process().Output();
  const uint64_t published = StreamMessagesOnceTaken("evt-0", 2);
  EXPECT_GE(published, 50u);
  EXPECT_EQ(Count("state = 1"), 0);

  RelayProcess relay(RelayArgs({"--batch", "50", "--claim-lease", "1s"}), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  // Within the lease the rows the hung relay holds (the batches it published and those it
  // locked ahead) stay where they are, however many rounds the new relay makes meanwhile.
  if (std::chrono::steady_clock::now() - hung_started < milliseconds(2200)) {
    EXPECT_TRUE(
        HoldsFor([&] { return Count("state = 1") < 200; }, milliseconds(300), milliseconds(50)))
        << "every row was taken while the hung relay held some";
  }
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 200; }, seconds(30)))
      << relay.process().Output();
  EXPECT_GE(std::chrono::steady_clock::now() - hung_started, milliseconds(2900))
      << "the hung relay's rows were taken before its lease ran out";
  EXPECT_TRUE(WaitFor(
      [&] { return relay.Metric("idem_relay_duplicates_total") == static_cast<double>(published); },
      seconds(5)))
      << relay.Metric("idem_relay_duplicates_total") << " duplicates, " << published
      << " published by the hung relay";
  EXPECT_EQ(js_.StreamMessages("ORDERS"), 200u);

  // Resumed: its sessions are gone, so its settle fails and changes nothing; it carries on.
  ASSERT_EQ(kill(pid, SIGCONT), 0);
  EXPECT_TRUE(hung.process().WaitForLine("published but not marked", seconds(20)))
      << hung.process().Output();
  // Nothing it does next changes a row or the stream, over a few of its poll intervals.
  EXPECT_TRUE(HoldsFor(
      [&] {
        return Count("state = 1") == 200 &&
               Query("SELECT count(*) FROM idem.outbox WHERE stream_seq BETWEEN 1 AND 200") ==
                   "200" &&
               js_.StreamMessages("ORDERS") == 200u;
      },
      milliseconds(500), milliseconds(50)));
  EXPECT_EQ(hung.process().Stop(SIGTERM), 0) << hung.process().Output();
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// Three relays at once over 10,000 events: each published once, every ordering key in
// enqueue order in the stream.
TEST_F(RelayTest, ThreeRelaysPublishEachEventOnceAndKeysInOrder) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  constexpr int kEvents = 10000;
  constexpr int kProducers = 4;
  constexpr int kKeys = 40;
  std::vector<std::unique_ptr<RelayProcess>> relays;
  for (int i = 0; i < 3; ++i) {
    relays.push_back(std::make_unique<RelayProcess>(
        RelayArgs({"--batch", "100", "--relay-id", "relay-" + std::to_string(i)}),
        Log("relay" + std::to_string(i) + ".log")));
    ASSERT_EQ(relays.back()->WaitReady(), "");
  }
  // Producers share the keys, so one key's events come from several producers at once. Each
  // transaction takes its keys in ascending order (as a service should, or retry on deadlock).
  std::atomic<int> next{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      PgConn conn = ConnectPg(pg(), database_);
      std::mt19937 rng(p);
      for (;;) {
        const int first = next.fetch_add(5);
        if (first >= kEvents) break;
        std::vector<std::pair<int, int>> batch;  // (key, event)
        for (int j = first; j < std::min(kEvents, first + 5); ++j) {
          batch.emplace_back(static_cast<int>(rng() % kKeys), j);
        }
        std::sort(batch.begin(), batch.end());
        ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
        for (const auto& [k, j] : batch) {
          const std::string key = "k" + std::to_string(k);
          auto r = outbox::Enqueue(conn.get(), {"e" + std::to_string(j), "orders.created",
                                                key + ":" + std::to_string(j), {}, key});
          ASSERT_TRUE(r.ok() && *r) << r.status().ToString();
        }
        ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
      }
    });
  }
  for (auto& t : producers) t.join();
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == kEvents; }, seconds(90)))
      << Count("state = 1") << " published; " << relays[0]->process().Output();
  double published = 0;
  for (auto& r : relays) {
    const double n = r->Metric("idem_relay_published_total");
    EXPECT_GT(n, 0) << "every relay took a share";
    published += n;
  }
  EXPECT_EQ(published, kEvents);

  const auto messages = ReadStream(js_.js(), "ORDERS");
  ASSERT_EQ(messages.size(), static_cast<size_t>(kEvents));
  std::set<std::string> ids;
  std::map<std::string, std::vector<std::string>> stream_order;
  for (const auto& m : messages) {
    ids.insert(m.msg_id);
    stream_order[m.data.substr(0, m.data.find(':'))].push_back(m.msg_id);
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kEvents));
  // Per key, the stream's order is the outbox's id order (the commit order of the key).
  PgConn conn = ConnectPg(pg(), database_);
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "k" + std::to_string(k);
    const std::string expected = Exec(conn.get(),
        "SELECT string_agg(event_id, ',' ORDER BY id) FROM idem.outbox WHERE ordering_key = '" + key + "'");
    std::string actual;
    for (const auto& id : stream_order[key]) actual += (actual.empty() ? "" : ",") + id;
    EXPECT_EQ(actual, expected) << "key " << key;
  }
  for (auto& r : relays) EXPECT_EQ(r->process().Stop(SIGTERM), 0) << r->process().Output();
}

// A few busy ordering keys must not slow the rest down: rows without a key never wait behind
// keyed ones, and the relay does not take a batch short of its held-back keyed rows for an
// empty outbox. Here the poll interval is a minute, so a relay that stops for it (as one did
// when one row in ten was over 7 keys, each batch losing its keyed rows to the one before it
// and coming back short) misses the bound by far. Both of the mixes, the second
// enqueued while the relay runs; per key, the stream keeps the outbox's order.
TEST_F(RelayTest, KeyedRowsDrainWithoutWaitingForThePollInterval) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  ASSERT_EQ(Query("SELECT count(idem.outbox_enqueue('a' || g, 'orders.z', convert_to('p' || g, "
                  "'UTF8'), '{}', CASE WHEN g % 10 = 0 THEN 'ok-' || (g % 7) END)) "
                  "FROM generate_series(1, 3000) g"),
            "3000");
  RelayProcess relay({"--store", pg().Url(database_), "--nats", nats_.Url(), "--stream", "ORDERS",
                      "--poll-interval", "60s", "--batch", "100"},
                     Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 3000; }, seconds(30)))
      << Count("state = 1") << " of 3000 published (10% of rows over 7 keys)\n"
      << relay.process().Output();
  // Every row over 50 keys, enqueued in one transaction: its one notification wakes the relay.
  ASSERT_EQ(Query("SELECT count(idem.outbox_enqueue('b' || g, 'orders.z', convert_to('p' || g, "
                  "'UTF8'), '{}', 'k-' || (g % 50))) FROM generate_series(1, 2000) g"),
            "2000");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 5000; }, seconds(30)))
      << Count("state = 1") - 3000 << " of 2000 published (every row over 50 keys)\n"
      << relay.process().Output();
  const auto messages = ReadStream(js_.js(), "ORDERS");
  ASSERT_EQ(messages.size(), 5000u);
  std::set<std::string> ids;
  for (const auto& m : messages) ids.insert(m.msg_id);
  EXPECT_EQ(ids.size(), 5000u);
  std::map<std::string, std::vector<int64_t>> stream_order;  // key -> outbox ids, stream order
  std::map<std::string, std::pair<std::string, int64_t>> rows;  // event -> key, id
  PgConn conn = ConnectPg(pg(), database_);
  PGresult* r = PQexec(conn.get(), "SELECT event_id, ordering_key, id FROM idem.outbox "
                                   "WHERE ordering_key IS NOT NULL");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
  for (int i = 0; i < PQntuples(r); ++i) {
    rows[PQgetvalue(r, i, 0)] = {PQgetvalue(r, i, 1), std::atoll(PQgetvalue(r, i, 2))};
  }
  PQclear(r);
  ASSERT_EQ(rows.size(), 2300u);
  for (const auto& m : messages) {
    auto row = rows.find(m.msg_id);
    if (row != rows.end()) stream_order[row->second.first].push_back(row->second.second);
  }
  ASSERT_EQ(stream_order.size(), 57u);
  for (const auto& [key, order] : stream_order) {
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "key " << key;
  }
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// Sequence order is not commit order: a row that commits late with a lower id than rows
// already published is still published (the relay never tracks "the last id").
TEST_F(RelayTest, LateCommittedLowerIdIsPublished) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  RelayProcess relay(RelayArgs(), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  PgConn slow = ConnectPg(pg(), database_);
  ASSERT_EQ(Exec(slow.get(), "BEGIN"), "");
  ASSERT_TRUE(*outbox::Enqueue(slow.get(), {"late", "orders.created", "late"}));
  Enqueue("early-", 20);
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 20; }, seconds(20)));
  const int64_t late_id =
      std::atoll(Exec(slow.get(), "SELECT id FROM idem.outbox WHERE event_id = 'late'").c_str());
  EXPECT_LT(late_id,
            std::atoll(Query("SELECT min(id) FROM idem.outbox WHERE event_id LIKE 'early-%'").c_str()));
  // The relay's floor (where its scans start) waits for the open transaction, which may yet
  // commit a row below it: for a few of its rounds of mark and floor (a second each) it stays
  // at or below the late row's id, although every row above it is published. The rounds'
  // time is what this test is about.
  EXPECT_TRUE(HoldsFor(
      [&] { return relay.Metric("idem_relay_pending_floor") <= static_cast<double>(late_id); },
      seconds(4), milliseconds(500)))
      << relay.Metric("idem_relay_pending_floor") << " against the late id " << late_id;
  ASSERT_EQ(Exec(slow.get(), "COMMIT"), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 21; }, seconds(20)))
      << relay.process().Output();
  const auto messages = ReadStream(js_.js(), "ORDERS");
  ASSERT_EQ(messages.size(), 21u);
  EXPECT_EQ(messages.back().msg_id, "late");
  // Everything published and nothing open: the floor rises past every id.
  const double last_id = std::atof(Query("SELECT max(id) FROM idem.outbox").c_str());
  EXPECT_TRUE(
      WaitFor([&] { return relay.Metric("idem_relay_pending_floor") > last_id; }, seconds(10)))
      << relay.Metric("idem_relay_pending_floor") << " against the last id " << last_id;
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// The database is set back under a running relay (a restore, or a failover to a replica that
// missed the last commits, without the relay's session breaking): ids are drawn again below
// the floor the relay read before. The relay notices the sequence went back, drops its floor,
// and publishes the new rows.
TEST_F(RelayTest, RowsBelowTheFloorAfterTheSequenceWentBackArePublished) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  RelayProcess relay(RelayArgs(), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  Enqueue("before-", 60);
  ASSERT_TRUE(WaitFor([&] { return relay.Metric("idem_relay_pending_floor") > 60; }, seconds(10)))
      << relay.Metric("idem_relay_pending_floor");
  // As the database was after its first ten events.
  ASSERT_EQ(Query("DELETE FROM idem.outbox WHERE id > 10; "
                  "DELETE FROM idem.outbox_ids i WHERE NOT EXISTS "
                  "(SELECT 1 FROM idem.outbox o WHERE o.event_id = i.event_id); "
                  "SELECT setval('idem.outbox_id_seq', 10)"),
            "10");
  Enqueue("after-", 5);
  EXPECT_EQ(Query("SELECT max(id) FROM idem.outbox"), "15");
  ASSERT_TRUE(
      WaitFor([&] { return Count("state = 1 AND event_id LIKE 'after-%'") == 5; }, seconds(15)))
      << relay.process().Output();
  EXPECT_NE(relay.process().Output().find("went back below the floor"), std::string::npos);
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// The same while the relay is busy: its batches locked ahead start past the rows it holds, so
// a row committed late below them is found by the lock from the first pending row that comes
// every few batches, well before the backlog drains.
TEST_F(RelayTest, LateCommittedLowerIdIsPublishedWhileTheRelayIsBusy) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  PgConn slow = ConnectPg(pg(), database_);
  ASSERT_EQ(Exec(slow.get(), "BEGIN"), "");
  ASSERT_TRUE(*outbox::Enqueue(slow.get(), {"late", "orders.created", "late"}));
  Enqueue("backlog-", 3000, 500);
  RelayProcess relay(RelayArgs({"--batch", "20"}), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") >= 300; }, seconds(30)));
  ASSERT_EQ(Exec(slow.get(), "COMMIT"), "");
  const int64_t published_before = Count("state = 1");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 3001; }, seconds(60)))
      << relay.process().Output();
  const int64_t late_seq = std::atoll(Query("SELECT stream_seq FROM idem.outbox WHERE event_id = 'late'").c_str());
  EXPECT_LT(late_seq, 2500) << "published only as the backlog drained";
  EXPECT_LT(late_seq - published_before, 600)
      << "published " << late_seq - published_before << " events after its commit";
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// Bad rows are parked with a clear, counted error, kept, and not retried; the rows around
// them go out. A row on a subject the stream does not take is not bad: it is left pending
// (untouched, no attempt) for a relay that takes it, and shows in the uncovered gauges.
TEST_F(RelayTest, BadRowsAreParkedNotRetriedNotLost) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120), 1024), "");
  PgConn conn = ConnectPg(pg(), database_);
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  ASSERT_TRUE(*outbox::Enqueue(conn.get(), {"good-1", "orders.created", "ok", {}, {}}));
  ASSERT_TRUE(*outbox::Enqueue(conn.get(), {"too-big", "orders.created", std::string(4096, 'x'), {}, {}}));
  ASSERT_TRUE(*outbox::Enqueue(conn.get(), {"wrong-subject", "payments.created", "x", {}, {}}));
  ASSERT_TRUE(*outbox::Enqueue(conn.get(), {"good-2", "orders.created", "ok", {}, {}}));
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  RelayProcess relay(RelayArgs(), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(
      WaitFor([&] { return Count("state = 1") == 2 && Count("state = 2") == 1; }, seconds(20)))
      << relay.process().Output();
  EXPECT_EQ(Query("SELECT error FROM idem.outbox WHERE event_id = 'too-big'"),
            "message of 4130 bytes exceeds the largest stream ORDERS accepts (1024 bytes)");
  EXPECT_EQ(relay.Metric("idem_relay_parked_total{reason=\"too_large\"}"), 1);
  EXPECT_TRUE(WaitFor([&] { return relay.Metric("idem_relay_parked_rows") == 1; }, seconds(5)));
  EXPECT_TRUE(
      WaitFor([&] { return relay.Metric("idem_relay_uncovered_pending_rows") == 1; }, seconds(5)));
  // Not retried: over several poll intervals (200 ms) it stays attempted once; the row on
  // another subject is never touched.
  const std::string parked_attempts =
      "SELECT string_agg(attempts::text, ',') FROM idem.outbox WHERE state = 2";
  const std::string wrong_subject =
      "SELECT state || ' ' || attempts || ' ' || coalesce(error, '-') FROM idem.outbox "
      "WHERE event_id = 'wrong-subject'";
  EXPECT_TRUE(
      HoldsFor([&] { return Query(parked_attempts) == "1" && Query(wrong_subject) == "0 0 -"; },
               milliseconds(800), milliseconds(100)))
      << Query(parked_attempts) << "; " << Query(wrong_subject);
  EXPECT_NE(relay.process().Output().find("parked event too-big"), std::string::npos);
  EXPECT_EQ(relay.process().Output().find("wrong-subject"), std::string::npos)
      << "no relay publishes it, but it has not waited --warn-uncovered-after (1 min) yet";
  // An operator stops the relay, widens the stream's subjects and raises its size limit,
  // and un-parks: both go out.
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  const char* subjects[] = {"orders.>", "payments.>"};
  cfg.Name = "ORDERS";
  cfg.Subjects = subjects;
  cfg.SubjectsLen = 2;
  cfg.MaxMsgSize = 8192;
  cfg.Duplicates = 120'000'000'000;
  jsStreamInfo* si = nullptr;
  ASSERT_EQ(js_UpdateStream(&si, js_.js(), &cfg, nullptr, nullptr), NATS_OK);
  jsStreamInfo_Destroy(si);
  ASSERT_EQ(Query("SELECT idem.outbox_unpark('too-big')"), "t");
  RelayProcess again(RelayArgs(), Log("relay2.log"));
  ASSERT_EQ(again.WaitReady(), "");
  EXPECT_TRUE(WaitFor([&] { return Count("state = 1") == 4; }, seconds(20)))
      << again.process().Output();
  EXPECT_TRUE(
      WaitFor([&] { return again.Metric("idem_relay_uncovered_pending_rows") == 0; }, seconds(5)));
  EXPECT_EQ(again.process().Stop(SIGTERM), 0);
}

// Every message of a keyed row carries its ordering key in the header Idem-Ordering-Key (the
// consumer orders by it); an unkeyed row's carries none. A header of that name the row set
// itself never overrides or duplicates it (any case), and is dropped from an unkeyed row's.
// A key holding a control character (a row from before schema version 20, which refuses
// them now) goes out percent-encoded, never as a broken header line.
TEST_F(RelayTest, KeyedRowsCarryTheirOrderingKeyHeader) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  PgConn conn = ConnectPg(pg(), database_);
  ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
  const std::vector<outbox::Event> events = {
      {"keyed-1", "orders.created", "a", {{"X-Test", "1"}}, "account-7"},
      {"plain-1", "orders.created", "b", {{"X-Test", "2"}}, std::nullopt},
      {"keyed-2", "orders.created", "c", {{"Idem-Ordering-Key", "spoofed"}}, "account-7"},
      {"keyed-3", "orders.created", "d", {{"idem-ordering-key", "spoofed"}}, "konto ä/50%"},
      {"plain-2", "orders.created", "e", {{"Idem-Ordering-Key", "spoofed"}}, std::nullopt},
  };
  for (const auto& event : events) {
    auto queued = outbox::Enqueue(conn.get(), event);
    ASSERT_TRUE(queued.ok() && *queued) << event.event_id << ": " << queued.status().ToString();
  }
  ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  // A row enqueued before version 20 with a line break and a tab in its key.
  ASSERT_EQ(Query("INSERT INTO idem.outbox (day, event_id, subject, payload, enqueued_at, "
                  "ordering_key) VALUES (idem.outbox_today(), 'legacy-1', 'orders.created', "
                  "'f', now(), E'line\\r\\nNats-Msg-Id: x\\t%'); "
                  "INSERT INTO idem.outbox_ids VALUES ('legacy-1', idem.outbox_today())"),
            "");
  RelayProcess relay(RelayArgs(), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 6; }, seconds(20)))
      << relay.process().Output();
  const auto messages = ReadStream(js_.js(), "ORDERS");
  ASSERT_EQ(messages.size(), 6u);
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> keys;  // by event
  for (const auto& m : messages) {
    for (const auto& [name, value] : m.header_lines) {
      std::string lower = name;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "idem-ordering-key") keys[m.msg_id].emplace_back(name, value);
    }
  }
  using Lines = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(keys["keyed-1"], (Lines{{"Idem-Ordering-Key", "account-7"}}));
  EXPECT_EQ(keys["keyed-2"], (Lines{{"Idem-Ordering-Key", "account-7"}}));
  EXPECT_EQ(keys["keyed-3"], (Lines{{"Idem-Ordering-Key", "konto ä/50%"}}));
  EXPECT_EQ(keys["legacy-1"], (Lines{{"Idem-Ordering-Key", "line%0D%0ANats-Msg-Id: x%09%25"}}));
  EXPECT_EQ(keys.count("plain-1"), 0u);
  EXPECT_EQ(keys.count("plain-2"), 0u);
  for (const auto& m : messages) {
    EXPECT_EQ(m.headers.count("X-Test"), m.msg_id == "keyed-1" || m.msg_id == "plain-1" ? 1u : 0u)
        << m.msg_id;
  }
  EXPECT_EQ(messages[5].msg_id, "legacy-1") << "its line break did not become a header line";
  EXPECT_NE(relay.process().Output().find("set the header Idem-Ordering-Key itself"),
            std::string::npos)
      << relay.process().Output();
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0) << relay.process().Output();
}

// Two streams on one outbox, a relay for each (as docs/emit.md recommends): each relay takes
// only the rows its stream's subjects cover and leaves the others pending for the other, so
// every event reaches exactly its stream, once, and nothing is parked. A row no running relay
// covers stays pending, and both relays show it: the uncovered gauges, and a warning naming
// it once it has waited --warn-uncovered-after.
TEST_F(RelayTest, TwoStreamsOnOneOutboxEachRelayTakesItsOwnRows) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORD", {"orders.>"}, seconds(120)), "");
  ASSERT_EQ(testing::AddStream(js_.js(), "SHORT", {"short.>"}, seconds(120)), "");
  auto args = [&](const std::string& stream) {
    return std::vector<std::string>{"--store", pg().Url(database_), "--nats", nats_.Url(),
                                    "--stream", stream, "--poll-interval", "200ms",
                                    "--batch", "40", "--warn-uncovered-after", "1s"};
  };
  RelayProcess ord(args("ORD"), Log("ord.log"));
  RelayProcess short_relay(args("SHORT"), Log("short.log"));
  ASSERT_EQ(ord.WaitReady(), "");
  ASSERT_EQ(short_relay.WaitReady(), "");
  constexpr int kEvents = 600;
  // The row nobody covers goes first, so that it is the oldest row either relay leaves to
  // others at every moment: the warning names it, not a row the other relay has yet to take
  // (on a slow machine the other relay may take more than --warn-uncovered-after to drain).
  ASSERT_EQ(Query("SELECT idem.outbox_enqueue('nobody-1', 'other.y', 'x'); "
                  "SELECT count(idem.outbox_enqueue('e' || g, CASE WHEN g % 3 = 0 THEN 'short.x' "
                  "ELSE 'orders.z' END, convert_to('p' || g, 'UTF8'), '{}', "
                  "CASE WHEN g % 5 = 0 THEN 'key-' || (g % 3) || '-' || (g % 4) END)) "
                  "FROM generate_series(1, " + std::to_string(kEvents) + ") g"),
            std::to_string(kEvents));
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == kEvents; }, seconds(30)))
      << Count("state = 1") << " published\n"
      << ord.process().Output() << "\n"
      << short_relay.process().Output();
  EXPECT_EQ(Count("state = 2"), 0) << "parked:\n"
                                   << Query("SELECT string_agg(event_id || ': ' || error, E'\\n') "
                                            "FROM idem.outbox WHERE state = 2");
  EXPECT_EQ(Query("SELECT state || ' ' || attempts FROM idem.outbox WHERE event_id = 'nobody-1'"),
            "0 0");
  for (const auto& [stream, subject] :
       std::vector<std::pair<std::string, std::string>>{{"ORD", "orders.z"}, {"SHORT", "short.x"}}) {
    std::set<std::string> expected;
    for (int g = 1; g <= kEvents; ++g) {
      if ((g % 3 == 0) == (subject == "short.x")) expected.insert("e" + std::to_string(g));
    }
    const auto messages = ReadStream(js_.js(), stream);
    std::set<std::string> ids;
    for (const auto& m : messages) {
      ids.insert(m.msg_id);
      EXPECT_EQ(m.subject, subject) << m.msg_id;
    }
    EXPECT_EQ(messages.size(), expected.size()) << stream << ": each event once";
    EXPECT_EQ(ids, expected) << stream;
  }
  for (RelayProcess* relay : {&ord, &short_relay}) {
    EXPECT_EQ(relay->Metric("idem_relay_parked_total{reason=\"too_large\"}"), 0);
    EXPECT_TRUE(WaitFor([&] { return relay->Metric("idem_relay_uncovered_pending_rows") == 1; },
                        seconds(10)))
        << relay->Metric("idem_relay_uncovered_pending_rows");
    EXPECT_TRUE(WaitFor([&] { return relay->Metric("idem_relay_uncovered_lag_seconds") >= 1; },
                        seconds(10)));
    EXPECT_TRUE(relay->process().WaitForLine("event nobody-1 on subject 'other.y'", seconds(10)))
        << relay->process().Output();
    // The gauges are read about every second: the warning may have come from a read taken
    // while this relay still had rows to publish.
    EXPECT_TRUE(WaitFor([&] { return relay->Metric("idem_relay_pending_rows") == 0; },
                        seconds(10)))
        << relay->Metric("idem_relay_pending_rows");
  }
  EXPECT_EQ(ord.process().Stop(SIGTERM), 0);
  EXPECT_EQ(short_relay.process().Stop(SIGTERM), 0);
}

// --subjects narrows what a relay takes to a part of its stream's subjects, and one outside
// them is a clear error at start.
TEST_F(RelayTest, SubjectsFlagNarrowsWhatARelayTakes) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORD", {"orders.>"}, seconds(120)), "");
  for (const auto& [subjects, message] : std::vector<std::pair<std::string, std::string>>{
           {"short.>", "--subjects 'short.>' is not within stream ORD's subjects (orders.>)"},
           {"orders..x", "--subjects: 'orders..x' is not a NATS subject pattern"}}) {
    testing::Process refused({idem::build_tree::kIdemBinary, "relay", "--store", pg().Url(database_), "--nats",
                              nats_.Url(), "--stream", "ORD", "--subjects", subjects},
                             Log("refused.log"));
    const auto status = refused.WaitForExit(seconds(30));
    EXPECT_TRUE(ExitedWith(status, 2)) << refused.Output();
    EXPECT_NE(refused.Output().find(message), std::string::npos) << refused.Output();
  }
  Enqueue("eu-", 30, 30, "orders.eu.created");
  Enqueue("us-", 30, 30, "orders.us.created");
  RelayProcess relay({"--store", pg().Url(database_), "--nats", nats_.Url(), "--stream", "ORD",
                      "--subjects", "orders.eu.>", "--poll-interval", "200ms"},
                     Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 30; }, seconds(20)))
      << relay.process().Output();
  EXPECT_TRUE(WaitFor([&] { return relay.Metric("idem_relay_uncovered_pending_rows") == 30; },
                      seconds(10)));
  EXPECT_EQ(Count("state = 1 AND subject = 'orders.eu.created'"), 30);
  EXPECT_EQ(Count("state = 0 AND attempts = 0 AND subject = 'orders.us.created'"), 30);
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// nats-server gone for longer than the duplicate window, with rows published but not marked:
// the relay republishes them, counts beyond_window, and the stream holds copies that the
// consumer's inbox (idem.inbox_claim) keeps from taking effect twice. Meanwhile /readyz is 503.
TEST_F(RelayTest, OutageLongerThanTheDuplicateWindowCountsBeyondWindow) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, milliseconds(250)), "");
  Enqueue("evt-", 30);
  {
    RelayProcess crashing(RelayArgs({"--batch", "30", "--claim-lease", "500ms"}), Log("crash.log"),
                          "relay.after_publish");
    const auto status = crashing.process().WaitForExit(seconds(30));
    ASSERT_TRUE(status && WIFSIGNALED(*status)) << crashing.process().Output();
  }
  ASSERT_EQ(js_.StreamMessages("ORDERS"), 30u);
  nats_.Kill();
  // This relay's own claims must not lapse while it publishes (a sanitizer build on a loaded
  // machine may take longer than 500 ms), so each row is republished, and counted, once.
  RelayProcess relay(RelayArgs({"--batch", "30", "--claim-lease", "5s"}), Log("relay.log"));
  // The relay starts while NATS is down: it keeps retrying, not ready.
  ASSERT_TRUE(relay.process().WaitForLine("connected to postgresql", seconds(20)))
      << relay.process().Output();
  // Down for twice the duplicate window: the outage's length is what this test is about.
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(relay.process().Running());
  EXPECT_EQ(Count("state = 1"), 0);
  ASSERT_EQ(nats_.Restart(), "");
  ASSERT_EQ(relay.WaitReady(), "");
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == 30; }, seconds(30)))
      << relay.process().Output();
  EXPECT_EQ(relay.Metric("idem_relay_beyond_window_total"), 30) << relay.process().Output();
  EXPECT_NE(relay.process().Output().find("beyond stream ORDERS's duplicate window"),
            std::string::npos);
  EXPECT_EQ(relay.AdminStatus("/readyz"), 200);

  // The stream now holds each event twice; a consumer guarded by the worker inbox applies
  // each once.
  testing::JsClient reader;
  ASSERT_EQ(reader.Connect(nats_.Url()), "");
  const auto messages = ReadStream(reader.js(), "ORDERS");
  EXPECT_EQ(messages.size(), 60u);
  PgConn conn = ConnectPg(pg(), database_);
  ASSERT_EQ(Exec(conn.get(), "CREATE TABLE effects (event_id text PRIMARY KEY)"), "");
  int applied = 0;
  for (const auto& m : messages) {
    ASSERT_EQ(Exec(conn.get(), "BEGIN"), "");
    const std::string first = Exec(conn.get(), "SELECT idem.inbox_claim('billing', '" + m.msg_id + "')");
    ASSERT_TRUE(first == "t" || first == "f") << first;
    if (first == "t") {
      ASSERT_EQ(Exec(conn.get(), "INSERT INTO effects VALUES ('" + m.msg_id + "')"), "");
      ++applied;
    }
    ASSERT_EQ(Exec(conn.get(), "COMMIT"), "");
  }
  EXPECT_EQ(applied, 30);
  EXPECT_EQ(Query("SELECT count(*) FROM effects"), "30");
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

// /readyz follows NATS; PostgreSQL killed and restarted under load: nothing lost, no
// duplicate in the stream, the relay catches up.
TEST_F(RelayTest, PostgresRestartedUnderLoadLosesNothing) {
  ASSERT_EQ(testing::AddStream(js_.js(), "ORDERS", {"orders.>"}, seconds(120)), "");
  RelayProcess relay(RelayArgs({"--batch", "50", "--claim-lease", "2s"}), Log("relay.log"));
  ASSERT_EQ(relay.WaitReady(), "");
  EXPECT_TRUE(WaitFor([&] { return relay.AdminStatus("/readyz") == 200; }, seconds(10)));
  EXPECT_EQ(relay.AdminStatus("/healthz"), 200);

  std::mutex mu;
  std::set<std::string> committed;  // ids whose enqueue answered (true or false)
  std::thread producer([&] {
    PgConn conn;
    for (int i = 0; i < 400; ++i) {
      const std::string id = "load-" + std::to_string(i);
      for (;;) {  // the producer retries each event until an enqueue answers
        if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
          WaitFor(
              [&] {
                conn.reset(PQconnectdb(pg().ConnInfo(database_).c_str()));
                return PQstatus(conn.get()) == CONNECTION_OK;
              },
              seconds(60), milliseconds(50));
          if (PQstatus(conn.get()) != CONNECTION_OK) continue;
        }
        if (Exec(conn.get(), "BEGIN") != "") continue;
        auto r = outbox::Enqueue(conn.get(), {id, "orders.created", id});
        if (r.ok() && Exec(conn.get(), "COMMIT") == "") {
          std::lock_guard lock(mu);
          committed.insert(id);
          break;
        }
        Exec(conn.get(), "ROLLBACK");
      }
      std::this_thread::sleep_for(milliseconds(3));  // a steady load, not one burst
    }
  });
  // Under load: the relay has published some of it when PostgreSQL dies.
  EXPECT_TRUE(WaitFor([&] { return Count("state = 1") >= 50; }, seconds(20)));
  pg().Kill();
  EXPECT_TRUE(WaitFor([&] { return relay.AdminStatus("/readyz") == 503; }, seconds(10)));
  ASSERT_TRUE(pg().Restart());
  producer.join();
  ASSERT_TRUE(WaitFor([&] { return Count("state = 1") == static_cast<int64_t>(committed.size()); },
                      seconds(60)))
      << Count("state = 1") << " of " << committed.size() << "\n"
      << relay.process().Output();
  EXPECT_TRUE(WaitFor([&] { return relay.AdminStatus("/readyz") == 200; }, seconds(10)));
  EXPECT_GT(relay.Metric("idem_relay_postgres_errors_total"), 0);
  const auto messages = ReadStream(js_.js(), "ORDERS");
  std::set<std::string> ids;
  for (const auto& m : messages) ids.insert(m.msg_id);
  EXPECT_EQ(ids, committed);
  EXPECT_EQ(messages.size(), committed.size()) << "copies within the window are dropped";
  EXPECT_EQ(relay.process().Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace idem
