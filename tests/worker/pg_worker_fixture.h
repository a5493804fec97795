// The fixture of the worker layer's PostgreSQL tests: a fresh database per test on the
// binary's shared server, migrated to the current schema, and raw libpq connections as a
// service would hold them.
#pragma once

#include <libpq-fe.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "idem/store.h"
#include "store/postgres/postgres_store.h"
#include "util/migrated_database.h"
#include "util/postgres_server.h"

namespace idem::worker_test {

using testing::PostgresServer;
using testing::SharedPostgresServer;

// One raw libpq connection, as a service would hold it.
class Conn {
 public:
  explicit Conn(const std::string& conninfo) : conn_(PQconnectdb(conninfo.c_str())) {}
  ~Conn() { PQfinish(conn_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  PGconn* get() const { return conn_; }
  // Runs `sql`; returns the first value, "" for none, or "ERROR <sqlstate>: message".
  std::string Exec(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    std::string out;
    const auto s = PQresultStatus(r);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      out = std::string("ERROR ") + (state ? state : "?") + ": " + PQresultErrorMessage(r);
    } else if (PQntuples(r) > 0 && PQnfields(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    }
    PQclear(r);
    return out;
  }
  // The backend's pid, to watch it wait.
  int Pid() const { return PQbackendPID(conn_); }

 private:
  PGconn* conn_;
};

class PgWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server_.error(), "");
    database_ = testing::MigratedDatabase(server_);
    ASSERT_NE(database_, "");
  }
  std::unique_ptr<Conn> Connect() {
    auto c = std::make_unique<Conn>(server_.ConnInfo(database_));
    EXPECT_TRUE(c->ok()) << PQerrorMessage(c->get());
    return c;
  }
  // Runs `sql` on a fresh connection (autocommit), as Conn::Exec answers.
  std::string Sql(const std::string& sql) {
    Conn c(server_.ConnInfo(database_));
    return c.ok() ? c.Exec(sql) : std::string("ERROR connect: ") + PQerrorMessage(c.get());
  }
  // True once backend `pid` is waiting on a lock (so a race is really overlapping). Asks on a
  // connection kept for the test, every millisecond: the racing tests ask once a round.
  bool WaitsOnLock(int pid) {
    if (!monitor_) monitor_ = Connect();
    const std::string sql =
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = " + std::to_string(pid);
    return testing::WaitFor([&] { return monitor_->Exec(sql) == "Lock"; }, std::chrono::seconds(5),
                            std::chrono::milliseconds(1));
  }

  // Runs the inbox sweep to its end at `now_sql`, one step per transaction (as the C++ callers
  // and idem.inbox_sweep_all do); returns the claims dropped, -1 after a failure.
  int64_t SweepInbox(const std::string& now_sql = "now()", int horizon_days = 2) {
    Conn c(server_.ConnInfo(database_));
    int64_t claims = 0;
    for (int step = 0; step < 10000; ++step) {
      const std::string row = c.Exec("SELECT claims_dropped || ' ' || done FROM "
                                     "idem.inbox_sweep_step(" + now_sql + ", " +
                                     std::to_string(horizon_days) + ")");
      const size_t space = row.find(' ');
      if (row.rfind("ERROR", 0) == 0 || space == std::string::npos) {
        ADD_FAILURE() << "sweep step: " << row;
        return -1;
      }
      claims += std::stoll(row.substr(0, space));
      if (row.substr(space + 1) == "true") return claims;
    }
    ADD_FAILURE() << "sweep not done after 10000 steps";
    return -1;
  }

  PostgresServer& server_ = SharedPostgresServer();
  std::string database_;
  std::unique_ptr<Conn> monitor_;  // WaitsOnLock's
};

}  // namespace idem::worker_test
