// idem::worker::JetStreamConsumer and poison messages, in-process on a real nats-server -js and
// PostgreSQL: a handler that fails forever gets its message given up at max_deliver, dead-
// lettered with headers saying why and terminated (never redelivered again); a refused message
// goes to the same dead-letter subject at once; and a missing stream or dead-letter stream is
// returned by Run instead of being retried forever.
#include <libpq-fe.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "idem/store.h"
#include "idem/worker_consumer.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/postgres_server.h"
#include "util/wait_for.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;

std::string StoredHeader(JsClient& js, const std::string& stream, uint64_t seq,
                         const char* name) {
  natsMsg* msg = nullptr;
  if (js_GetMsg(&msg, js.js(), stream.c_str(), seq, nullptr, nullptr) != NATS_OK) return "<none>";
  const char* v = nullptr;
  std::string out = natsMsgHeader_Get(msg, name, &v) == NATS_OK && v ? v : "<none>";
  natsMsg_Destroy(msg);
  return out;
}

class RuntimePoisonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pg_.error(), "");
    db_ = pg_.CreateDatabase();
    {
      auto store = OpenStore(pg_.Url(db_));  // installs the worker schema
      ASSERT_TRUE(store.ok()) << store.status().ToString();
    }
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("P", {"p.>"}), "");
    ASSERT_EQ(js_.AddStream("PDEAD", {"p-dead"}), "");
  }

  worker::JetStreamConsumer::Options Options() {
    worker::JetStreamConsumer::Options o;
    o.nats_url = nats_.Url();
    o.stream = "P";
    o.consumer = "poison";
    o.fetch_wait = 100ms;
    o.nak_delay = 20ms;
    o.max_nak_delay = 50ms;
    o.max_deliver = 3;
    o.dead_letter = "p-dead";
    o.log = [this](std::string_view level, std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_ += std::string(level) + " " + std::string(line) + "\n";
    };
    return o;
  }

  // Runs a consumer with `handler` until `done` holds (or 15 s pass); returns Run's status.
  Status RunUntil(const worker::JetStreamConsumer::Options& o,
                  const worker::MessageHandler& handler, const std::function<bool()>& done,
                  worker::JetStreamConsumer::Stats* stats = nullptr) {
    auto consumer = worker::JetStreamConsumer::Create(o, pg_.ConnInfo(db_));
    if (!consumer.ok()) return consumer.status();
    std::atomic<bool> ran{false};
    std::thread stopper([&] {
      WaitFor([&] { return ran.load() || done(); }, 15s);
      (*consumer)->Stop();
    });
    Status run = (*consumer)->Run(handler);
    ran = true;
    stopper.join();
    if (stats != nullptr) *stats = (*consumer)->stats();
    return run;
  }

  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("P", "poison", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  std::string Log() {
    std::lock_guard lock(log_mu_);
    return log_;
  }

  PostgresServer& pg_ = SharedPostgresServer();
  std::string db_;
  NatsServer nats_;
  JsClient js_;
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(RuntimePoisonTest, AHandlerFailingForeverIsDeadLetteredAtMaxDeliverAndTerminated) {
  ASSERT_EQ(js_.Publish("p.x", "poison", "m-1"), "");
  ASSERT_EQ(js_.Publish("p.x", "fine", "m-2"), "");
  std::atomic<int> calls{0};
  worker::JetStreamConsumer::Stats stats;
  const Status run = RunUntil(
      Options(),
      [&](PGconn*, const worker::ConsumedMessage& m) {
        if (m.data != "poison") return Status::Ok();
        ++calls;
        return UnavailableError("cannot parse account");
      },
      [&] { return js_.StreamMessages("PDEAD") == 1 && Settled(); }, &stats);
  ASSERT_TRUE(run.ok()) << run.ToString();
  ASSERT_TRUE(Settled()) << Log();
  EXPECT_EQ(calls.load(), 3) << "delivered max_deliver times, then never again";
  EXPECT_EQ(stats.applied, 1u);
  EXPECT_EQ(stats.limit_reached, 1u);
  EXPECT_EQ(stats.dead_lettered, 1u);
  EXPECT_EQ(stats.termed, 1u);
  EXPECT_EQ(stats.dropped, 0u);
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Dead-Reason"), "max-deliver");
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Failure"), "handler");
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Delivery-Count"), "3");
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Key"), "m-1");
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Stream-Sequence"), "1");
  EXPECT_NE(StoredHeader(js_, "PDEAD", 1, "Idem-Reason").find("cannot parse account"),
            std::string::npos);
  EXPECT_NE(Log().find("given up after 3 failed deliveries"), std::string::npos) << Log();
}

TEST_F(RuntimePoisonTest, ARefusedMessageGoesToTheSameDeadLetterAtOnce) {
  ASSERT_EQ(js_.Publish("p.x", "refused", "r-1"), "");
  worker::JetStreamConsumer::Stats stats;
  const Status run = RunUntil(
      Options(),
      [&](PGconn*, const worker::ConsumedMessage&) { return InvalidArgumentError("no such op"); },
      [&] { return js_.StreamMessages("PDEAD") == 1 && Settled(); }, &stats);
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(stats.dead_lettered, 1u);
  EXPECT_EQ(stats.limit_reached, 0u);
  EXPECT_EQ(stats.termed, 1u);
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Dead-Reason"), "refused");
  EXPECT_EQ(StoredHeader(js_, "PDEAD", 1, "Idem-Delivery-Count"), "1");
}

TEST_F(RuntimePoisonTest, WithoutADeadLetterSubjectTheMessageIsDroppedAndCounted) {
  ASSERT_EQ(js_.Publish("p.x", "poison", "d-1"), "");
  auto o = Options();
  o.dead_letter.clear();
  o.max_deliver = 2;
  worker::JetStreamConsumer::Stats stats;
  const Status run = RunUntil(
      o, [&](PGconn*, const worker::ConsumedMessage&) { return UnavailableError("always"); },
      [&] { return Settled(); }, &stats);
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(stats.dropped, 1u);
  EXPECT_EQ(stats.termed, 1u);
  EXPECT_EQ(stats.naked, 1u);
  EXPECT_NE(Log().find("no dead_letter subject"), std::string::npos) << Log();
}

TEST_F(RuntimePoisonTest, WhatCannotWorkIsReturnedByRunNotRetriedForever) {
  auto missing_stream = Options();
  missing_stream.stream = "NOPE";
  Status run = RunUntil(missing_stream, [](PGconn*, const worker::ConsumedMessage&) {
    return Status::Ok();
  }, [] { return false; });
  EXPECT_EQ(run.code(), StatusCode::kNotFound) << run.ToString();
  EXPECT_NE(run.message().find("stream 'NOPE' does not exist"), std::string::npos) << run.ToString();

  auto no_dead_stream = Options();
  no_dead_stream.dead_letter = "nowhere";
  run = RunUntil(no_dead_stream, [](PGconn*, const worker::ConsumedMessage&) {
    return Status::Ok();
  }, [] { return false; });
  EXPECT_EQ(run.code(), StatusCode::kFailedPrecondition) << run.ToString();

  auto both_off = Options();
  both_off.max_deliver = 0;
  both_off.max_retry_time = 0ms;
  EXPECT_EQ(worker::JetStreamConsumer::Create(both_off, pg_.ConnInfo(db_)).status().code(),
            StatusCode::kInvalidArgument);
  auto wild = Options();
  wild.dead_letter = "p.*";
  EXPECT_EQ(worker::JetStreamConsumer::Create(wild, pg_.ConnInfo(db_)).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace idem::testing
