// `idem sweep` keeps the inbox and the outbox bounded where no gateway runs: against a real
// PostgreSQL, on a moved clock (the sweep's test-only clock offset, as the SQL sweep's p_now),
// both through the library call the command makes (sweep::SweepOnce) and through the real
// binary, as a CronJob or a systemd unit would run it.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include "sweep/sweeper.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "worker/pg_worker_fixture.h"
#include "util/build_tree.h"

namespace idem::worker_test {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

constexpr auto kDay = hours(24);

class SweepTest : public PgWorkerTest {
 protected:
  sweep::SweepOptions Options(std::chrono::milliseconds offset = {}) {
    sweep::SweepOptions o;
    o.db_url = server_.Url(database_);
    o.unsafe_clock_offset = offset;
    return o;
  }
  int InboxPartitions() {
    return std::stoi(Sql("SELECT count(*) FROM pg_inherits WHERE inhparent = 'idem.inbox'::regclass"));
  }
  // Runs the binary; returns its exit code (-1: no exit within 30 s, or killed).
  int Run(const std::vector<std::string>& args, std::string* output = nullptr) {
    std::vector<std::string> argv = {idem::build_tree::kIdemBinary, "sweep"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::Process p(argv, dir_.File("sweep-" + std::to_string(++runs_) + ".log"));
    const auto status = p.WaitForExit(seconds(30));
    if (output != nullptr) *output = p.Output();
    if (!status || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }

  testing::TempDir dir_;
  int runs_ = 0;
};

// The real binary, once, on a moved clock: nothing has expired today; sixteen days on the
// 7-day consumer's claims are gone and the 30-day ones kept; sixty-one days on, all. Each run
// says what it dropped and created, and exits 0.
TEST_F(SweepTest, OnceDropsTheExpiredInboxPartitionsAndKeepsTheRecentOnes) {
  auto c = Connect();
  ASSERT_EQ(c->Exec("BEGIN"), "");
  ASSERT_TRUE(worker::InboxRetention(c->get(), "week", hours(24 * 7)).ok());
  ASSERT_EQ(c->Exec("COMMIT"), "");
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Sql("SELECT idem.inbox_claim('week', 'w" + std::to_string(i) + "')"), "t");
    ASSERT_EQ(Sql("SELECT idem.inbox_claim('month', 'm" + std::to_string(i) + "')"), "t");
  }
  const std::string db = server_.Url(database_);
  std::string out;
  ASSERT_EQ(Run({"--store", db, "--once"}, &out), 0) << out;
  EXPECT_NE(out.find("inbox: dropped 0 claim(s) in 0 expired day partition(s), created "),
            std::string::npos)
      << out;
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "10");
  // As JSON: the event log's fields, the event "sweep".
  ASSERT_EQ(Run({"--store", db, "--once", "--log-format", "json"}, &out), 0) << out;
  EXPECT_NE(out.find(R"({"event":"sweep","level":"info","message":"inbox: dropped 0 claim(s))"),
            std::string::npos)
      << out;

  ASSERT_EQ(Run({"--store", db, "--once", "--unsafe-clock-offset", "16d"}, &out), 0) << out;
  EXPECT_NE(out.find("UNSAFE, FOR TESTING ONLY"), std::string::npos) << out;
  EXPECT_NE(out.find("inbox: dropped 5 claim(s)"), std::string::npos) << out;
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE consumer = 'week'"), "0");
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE consumer = 'month'"), "5");

  ASSERT_EQ(Run({"--store", db, "--once", "--unsafe-clock-offset", "61d"}, &out), 0) << out;
  EXPECT_NE(out.find("inbox: dropped 5 claim(s)"), std::string::npos) << out;
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox"), "0");
  // No partition of a day before the moved "today" is left. (The CASE: PostgreSQL may apply
  // the date test to a table of another name before the join has left it out.)
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'idem.inbox'::regclass AND CASE WHEN c.relname ~ "
                "'^inbox_p[0-9]{8}$' THEN to_date(substring(c.relname FROM 8), 'YYYYMMDD') END "
                "< ((now() + interval '61 days') AT TIME ZONE 'UTC')::date"),
            "0");
}

// A hundred and twenty simulated days of claims, a sweep every third day (the function the
// command calls, on the moved clock): every claim within its retention is kept, and the inbox
// never holds more than the days a retention needs (2K + 1 days of claims, the days ahead and
// the horizon), where without a sweep it gains a partition a day, forever.
TEST_F(SweepTest, ThePartitionCountStaysBoundedOverManySimulatedDays) {
  constexpr int kKeep = 30;    // the default retention
  constexpr int kClaims = 20;  // a simulated day's claims
  constexpr int kLast = 120, kStep = 3;
  // Simulated day N is noon UTC, N days after the day the test starts: the sweep (on its moved
  // clock) and the claims (dated here) agree on "today" even when a run crosses midnight.
  using std::chrono::system_clock;
  const auto first_day = std::chrono::floor<std::chrono::days>(system_clock::now());
  auto offset_to = [&](int day) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(first_day + hours(12) +
                                                                 kDay * day - system_clock::now());
  };
  auto date_of = [&](int day) {  // 'YYYY-MM-DD'::date, day N
    const std::chrono::year_month_day ymd{first_day + std::chrono::days(day)};
    char text[32];
    std::snprintf(text, sizeof text, "'%04d-%02u-%02u'::date", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
    return std::string(text);
  };
  int most = 0;
  for (int day = 0; day <= kLast; day += kStep) {
    auto report = sweep::SweepOnce(Options(offset_to(day)));
    ASSERT_TRUE(report.ok()) << "day " << day << ": " << report.status().ToString();
    // The day's claims, as idem.inbox_claim places them: a day from K to 2K - 1 days ahead.
    std::string values;
    for (int i = 0; i < kClaims; ++i) {
      if (!values.empty()) values += ",";
      values += "('month', 'd" + std::to_string(day) + "-" + std::to_string(i) + "', " +
                date_of(day) + " + " + std::to_string(kKeep + i % kKeep) + ")";
    }
    ASSERT_EQ(Sql("INSERT INTO idem.inbox (consumer, message_id, expires_on) VALUES " + values),
              "")
        << "day " << day;
    // Every claim of the last K days (the retention) is still there.
    int recent_days = 0;
    for (int d = 0; d <= day; d += kStep) recent_days += d >= day - kKeep ? 1 : 0;
    EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE substring(message_id FROM 2 FOR "
                  "position('-' IN message_id) - 2)::integer >= " +
                  std::to_string(day - kKeep)),
              std::to_string(recent_days * kClaims))
        << "day " << day;
    most = std::max(most, InboxPartitions());
  }
  // 2K + 1 days of claims, the days ahead up to 2K + horizon: about 2K + 3 partitions.
  EXPECT_LE(most, 2 * kKeep + 4);
  // Claims whose day has passed are gone.
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.inbox WHERE expires_on < " + date_of(kLast)), "0");
}

// The outbox: day partitions of published rows past --outbox-retention-days go; a recent one,
// or an old one still holding a pending row, stays. --no-outbox leaves it alone.
TEST_F(SweepTest, OnceDropsTheOutboxsOldPublishedDays) {
  auto old_row = [&](int days_ago, const std::string& id, int state) {
    const std::string day = "idem.outbox_today() - " + std::to_string(days_ago);
    return Sql("SELECT idem.outbox_ensure_partition(" + day + "); INSERT INTO idem.outbox (day, "
               "event_id, subject, payload, enqueued_at, state) VALUES (" + day + ", '" + id +
               "', 'a.b', 'x', now(), " + std::to_string(state) + "); INSERT INTO "
               "idem.outbox_ids VALUES ('" + id + "', " + day + ")");
  };
  ASSERT_EQ(old_row(40, "old-published", 1), "");
  ASSERT_EQ(old_row(35, "old-pending", 0), "");
  ASSERT_EQ(old_row(10, "recent-published", 1), "");
  const std::string db = server_.Url(database_);
  std::string out;
  ASSERT_EQ(Run({"--store", db, "--once", "--no-outbox"}, &out), 0) << out;
  EXPECT_NE(out.find("outbox: left alone"), std::string::npos) << out;
  EXPECT_EQ(Sql("SELECT count(*) FROM idem.outbox"), "3");
  ASSERT_EQ(Run({"--store", db, "--once", "--outbox-retention-days", "30"}, &out), 0) << out;
  EXPECT_NE(out.find("outbox: dropped 1 day partition(s) of published rows older than 30 days"),
            std::string::npos)
      << out;
  EXPECT_EQ(Sql("SELECT string_agg(event_id, ',' ORDER BY event_id) FROM idem.outbox"),
            "old-pending,recent-published");
}

// Exit codes: 2 for bad flags (before touching the database), 1 when the database fails, 0
// for --help; the daemon sweeps at once, then ends on SIGTERM with 0 without waiting for its
// next sweep.
TEST_F(SweepTest, FlagsExitCodesAndTheDaemon) {
  const std::string db = server_.Url(database_);
  std::string out;
  EXPECT_EQ(Run({"--once"}, &out), 2) << out;  // --store is required
  EXPECT_EQ(Run({"--store", "mysql://x", "--once"}, &out), 2) << out;
  EXPECT_NE(out.find("--store"), std::string::npos) << out;
  EXPECT_EQ(Run({"--store", db, "--every", "0s"}, &out), 2) << out;
  EXPECT_NE(out.find("--every must be 1s to 24h"), std::string::npos) << out;
  EXPECT_EQ(Run({"--store", db, "--once", "--outbox-retention-days", "367"}, &out), 2) << out;
  EXPECT_EQ(Run({"--store", db, "--once", "--unsafe-clock-offset", "soon"}, &out), 2) << out;
  EXPECT_EQ(Run({"--help"}, &out), 0) << out;
  EXPECT_NE(out.find("CronJob"), std::string::npos) << out;
  // A database nobody listens on: a clear error, exit 1.
  EXPECT_EQ(Run({"--store", "postgresql://idem@127.0.0.1:1/none?connect_timeout=2", "--once"},
                &out),
            1)
      << out;
  EXPECT_NE(out.find("error"), std::string::npos) << out;

  testing::Process daemon({idem::build_tree::kIdemBinary, "sweep", "--store", db, "--every", "1h"},
                          dir_.File("daemon.log"));
  ASSERT_TRUE(daemon.WaitForLine("sweep inbox: dropped", seconds(30))) << daemon.Output();
  const int status = daemon.Stop(SIGTERM, seconds(10));
  EXPECT_TRUE(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon.Output();
  EXPECT_NE(daemon.Output().find("SIGTERM received"), std::string::npos) << daemon.Output();
}

}  // namespace
}  // namespace idem::worker_test
