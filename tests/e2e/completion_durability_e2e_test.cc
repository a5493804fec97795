// End-to-end: a 2xx whose completion the store could not take is never executed again while the
// gateway that answered it lives. The real `idem gateway` on SQLite in front of the example
// service; the disk "fills" by lowering the running gateway's RLIMIT_FSIZE (a write past it
// fails with EFBIG, which SQLite reports as a disk I/O error, as it would ENOSPC), and is
// "freed" by raising it again.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/process.h"
#include "util/temp_dir.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

class CompletionDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [service, address] = StartExampleService(idem::build_tree::kExampleService, dir_.File("service.log"));
    ASSERT_NE(service, nullptr) << address;
    service_ = std::move(service);
    service_address_ = address;
  }

  // Starts the gateway on SQLite, following a clock offset file; `config` (TOML) if not empty.
  void StartGateway(const std::string& config = "") {
    SetClockOffset("0s");
    std::vector<std::string> args = {"--unsafe-clock-offset-file", dir_.File("clock-offset")};
    if (!config.empty()) {
      std::ofstream(dir_.File("gateway.toml")) << config;
      args.insert(args.end(), {"--config", dir_.File("gateway.toml")});
    }
    GatewayProcess started =
        StartGatewayProcess(idem::build_tree::kIdemBinary, service_address_, "sqlite:" + dir_.File("idem.db"),
                            dir_.File("gateway.log"), args);
    ASSERT_NE(started.process, nullptr) << started.address;
    gateway_ = std::move(started.process);
    address_ = started.address;
    admin_ = started.admin_address;
  }

  // Fills the disk until a key is answered 201 whose completion could not be written (see
  // below); returns that key, and its answer in `answered`.
  //
  // With the log emptied into the database file, the gateway's files may grow no further than
  // that file's size: the database cannot grow at all, so no checkpoint can copy new pages
  // into it and the log can never start over; the log itself takes a few requests, then no
  // more. Whenever a claim fails (a 503: not even its page or two fit), the limit moves up by
  // 16 KiB, room for the next claim but not for its completion's 20,000 bytes. So a key is
  // answered 201 whose completion could not be written, and nothing can be written from then
  // on.
  std::string FillTheDiskUntilACompletionFails(HttpResponse& answered) {
    for (int i = 0; i < 3; ++i) {
      HttpResponse warm = Post("warm-" + std::to_string(i));
      EXPECT_EQ(warm.status, 201) << warm.body;
    }
    CheckpointAndTruncateTheWal();
    rlim_t limit = static_cast<rlim_t>(std::filesystem::file_size(dir_.File("idem.db")));
    LimitFileSize(limit);
    for (int i = 0; i < 100; ++i) {
      const std::string fill = "fill-" + std::to_string(i);
      HttpResponse res = Post(fill);
      if (res.status == 503) {
        limit += 16 * 1024;
        LimitFileSize(limit);
        continue;
      }
      EXPECT_EQ(res.status, 201) << res.body;
      if (res.status == 201 && StoredInFlight(fill)) {
        answered = res;
        return fill;
      }
    }
    ADD_FAILURE() << "no completion failed:\n" << gateway_->Output();
    return "";
  }

  // A POST whose answer (a 20,000-byte body) the gateway stores: its completion writes several
  // pages, where a claim writes one or two.
  HttpResponse Post(const std::string& key) {
    return Http(address_, "POST", "/anything?size=20000", {{"Idempotency-Key", key}}, "x");
  }

  int Executions(const std::string& key) {
    auto r = Http(service_address_, "GET", "/executions?key=" + key);
    EXPECT_EQ(r.status, 200) << r.error;
    return r.status == 200 ? std::stoi(r.body) : -1;
  }

  // Whether the store holds the key in flight (its completion not stored).
  bool StoredInFlight(const std::string& key) {
    return Http(admin_, "GET", "/v1/records?key=" + key).body.find("\"in_flight\"") !=
           std::string::npos;
  }

  // A sample of the gateway's /metrics (the first line starting with `name`), or -1.
  long Metric(const std::string& name) {
    const std::string text = Http(admin_, "GET", "/metrics").body;
    const size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stol(text.substr(at + name.size() + 2));
  }

  void SetClockOffset(const std::string& offset) {
    const std::string file = dir_.File("clock-offset");
    std::ofstream(file + ".tmp") << offset << "\n";
    std::filesystem::rename(file + ".tmp", file);  // atomic: never half-read
  }

  // Copies the whole write-ahead log into the database file and empties it, from a connection
  // of the test's own (as `sqlite3 idem.db 'PRAGMA wal_checkpoint(TRUNCATE)'` would).
  void CheckpointAndTruncateTheWal() {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(dir_.File("idem.db").c_str(), &db, SQLITE_OPEN_READWRITE, nullptr),
              SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    // A connection that has not read the database yet does not know it is in WAL mode, and its
    // checkpoint would do nothing (and still return SQLITE_OK).
    ASSERT_EQ(sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr),
              SQLITE_OK);
    // The gateway's own checkpointer runs a pass every 250 ms. A checkpoint that finds another
    // one running fails at once with SQLITE_BUSY ("database is locked"): SQLite calls no busy
    // handler for that lock. So a busy answer is tried again.
    int frames = 0, copied = 0;
    int rc = SQLITE_BUSY;
    const auto give_up_at = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < give_up_at) {
      rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &frames, &copied);
      if (rc != SQLITE_BUSY) break;
      std::this_thread::sleep_for(10ms);
    }
    const std::string error = sqlite3_errmsg(db);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << error;
    ASSERT_EQ(std::filesystem::file_size(dir_.File("idem.db-wal")), 0u);
  }

  // Sets the running gateway's file size limit (soft; the hard limit is kept).
  void LimitFileSize(rlim_t bytes) {
    rlimit limit{};
    ASSERT_EQ(prlimit(gateway_->pid(), RLIMIT_FSIZE, nullptr, &limit), 0) << std::strerror(errno);
    limit.rlim_cur = bytes;
    ASSERT_EQ(prlimit(gateway_->pid(), RLIMIT_FSIZE, &limit, nullptr), 0) << std::strerror(errno);
  }

  TempDir dir_;
  std::unique_ptr<Process> service_;
  std::unique_ptr<Process> gateway_;
  std::string service_address_, address_, admin_;
};

TEST_F(CompletionDurabilityTest, A2xxWhoseCompletionHitAFullDiskIsNeverExecutedAgain) {
  StartGateway();
  HttpResponse answered;
  const std::string key = FillTheDiskUntilACompletionFails(answered);
  ASSERT_FALSE(key.empty());
  EXPECT_EQ(Executions(key), 1);

  // An hour later for the gateway: the key's lease is long over, and its completion is still
  // tried (before this was fixed, it was given up here, and the retry below executed again).
  SetClockOffset("1h");
  ASSERT_TRUE(WaitFor(
      [&] { return gateway_->Output().find("clock offset now 3600000 ms") != std::string::npos; },
      5s));
  const std::string failed =
      "idem_gateway_store_write_attempts_total{call=\"complete\",result=\"error\"}";
  const long failed_before = Metric(failed);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Metric(failed) >= failed_before + 2 ||
               Metric("idem_gateway_store_writes_retrying") == 0;
      },
      10s));
  EXPECT_EQ(Metric("idem_gateway_store_writes_abandoned_total{call=\"complete\"}"), 0);

  // The client retries while the disk is still full: answered from the gateway's memory, with
  // the original status, headers and body; the service is not called.
  EXPECT_EQ(Metric("idem_gateway_pending_completions"), 1);
  EXPECT_TRUE(StoredInFlight(key));
  HttpResponse during = Post(key);
  EXPECT_EQ(during.status, 201) << during.body;
  EXPECT_EQ(during.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(during.Header("Content-Type"), answered.Header("Content-Type"));
  EXPECT_EQ(during.body, answered.body);
  EXPECT_EQ(Executions(key), 1);
  // Not ready while the completion is held, so a load balancer sends traffic elsewhere.
  EXPECT_EQ(Http(admin_, "GET", "/readyz").status, 503);

  // Space is freed: the completion lands, the gateway is ready again, and the store replays.
  LimitFileSize(RLIM_INFINITY);
  ASSERT_TRUE(WaitFor([&] { return Metric("idem_gateway_pending_completions") == 0; }, 10s))
      << gateway_->Output();
  EXPECT_TRUE(WaitFor([&] { return Http(admin_, "GET", "/readyz").status == 200; }, 5s));
  EXPECT_FALSE(StoredInFlight(key));
  HttpResponse after = Post(key);
  EXPECT_EQ(after.status, 201);
  EXPECT_EQ(after.Header("Idempotent-Replayed"), "true");
  EXPECT_EQ(after.body, answered.body);
  EXPECT_EQ(Executions(key), 1) << "executed once\n" << gateway_->Output();
}

// The window that remains: a gateway that stops while it still holds a completion the store
// would not take loses it, and says so, key by key, so an operator knows which retries may
// execute again.
TEST_F(CompletionDurabilityTest, AGatewayStoppingWhileItHoldsACompletionLogsItAsLost) {
  StartGateway("[gateway]\nshutdown_grace = \"500ms\"\n");
  HttpResponse answered;
  const std::string key = FillTheDiskUntilACompletionFails(answered);
  ASSERT_FALSE(key.empty());
  ASSERT_EQ(Metric("idem_gateway_pending_completions"), 1);
  const int status = gateway_->Stop(SIGTERM);
  ASSERT_TRUE(WIFEXITED(status)) << gateway_->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string output = gateway_->Output();
  EXPECT_NE(output.find("complete_lost key "), std::string::npos) << output;
  EXPECT_NE(output.find("its completion was never stored"), std::string::npos) << output;
}

}  // namespace
}  // namespace idem::testing
