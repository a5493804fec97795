// `idem consume` and poison messages, end to end (a real nats-server -js, the real idem binary,
// an in-process HTTP service): a message that keeps failing is given up at --max-deliver or
// --max-retry-time, dead-lettered with headers saying why and terminated; without a usable
// dead-letter subject it is terminated, counted and logged, never redelivered forever. And
// what cannot work fails at start-up (exit 2), while a clean SIGTERM logs no warning.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <thread>

#include "util/consume_process.h"
#include "util/http_client.h"
#include "util/js_client.h"
#include "util/nats_server.h"
#include "util/recording_service.h"
#include "util/wait_for.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

class ConsumePoisonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("ORDERS", {"orders.>"}), "");
  }

  std::unique_ptr<ConsumeProcess> StartConsume(const std::string& deliver,
                                               std::vector<std::string> extra = {}) {
    auto p = std::make_unique<ConsumeProcess>(
        idem::build_tree::kIdemBinary, ConsumeArgs{nats_.Url(), "ORDERS", "svc", deliver, std::move(extra)});
    const std::string error = p->Start();
    EXPECT_EQ(error, "");
    return p;
  }

  // True once the consumer has nothing pending and nothing unacked (a naked message waiting
  // for its redelivery is unacked).
  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("ORDERS", "svc", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  int64_t ConsumeMetric(ConsumeProcess& p, const std::string& series) {
    return MetricValue(Http(p.admin(), "GET", "/metrics").body, series);
  }

  // Runs `idem consume` with `extra` flags to its exit; the exit status and its output.
  std::pair<int, std::string> RunToExit(const std::string& stream, std::vector<std::string> extra,
                                        std::chrono::milliseconds* took = nullptr) {
    std::vector<std::string> argv = {idem::build_tree::kIdemBinary, "consume", "--nats", nats_.Url(), "--stream",
                                     stream, "--consumer", "svc", "--deliver",
                                     "http://127.0.0.1:1/x"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    TempDir dir;
    const auto start = SteadyClock::now();
    Process p(argv, dir.File("out.log"));
    auto status = p.WaitForExit(15s);
    if (took != nullptr) {
      *took = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
    }
    if (!status) {
      p.Stop(SIGKILL, 5s);
      return {-1, p.Output()};
    }
    return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, p.Output()};
  }

  NatsServer nats_;
  JsClient js_;
};

TEST_F(ConsumePoisonTest, ServerErrorForeverIsDeadLetteredAtMaxDeliverAndNeverRedelivered) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  RecordingService service([](const SeenRequest&) { return 500; });  // body "status 500\n"
  auto consume = StartConsume(service.Url("/apply"),
                              {"--dead-letter", "dead.orders", "--max-deliver", "3",
                               "--nak-delay", "20ms", "--max-nak-delay", "50ms"});
  ASSERT_EQ(js_.Publish("orders.created", "poison", "pay-1", {{"X-Trace", "t1"}}), "");
  ASSERT_TRUE(WaitFor([&] { return js_.StreamMessages("DEAD") == 1 && Settled(); }, 10s))
      << consume->Output();
  // Settled: the message is neither pending nor waiting for a redelivery; it was terminated.
  EXPECT_EQ(service.count(), 3u) << consume->Output();
  const auto seen = service.seen();
  EXPECT_EQ(seen.back().Header("Idem-Delivery-Count"), "3");

  const StoredMessage dead = js_.Get("DEAD", 1);
  ASSERT_EQ(dead.error, "");
  EXPECT_EQ(dead.data, "poison");
  auto h = [&](const std::string& name) {
    auto it = dead.headers.find(name);
    return it == dead.headers.end() ? std::string("<none>") : it->second;
  };
  EXPECT_EQ(h("Idem-Dead-Reason"), "max-deliver");
  EXPECT_EQ(h("Idem-Failure"), "http");
  EXPECT_EQ(h("Idem-Status"), "500");
  EXPECT_EQ(h("Idem-Error-Body"), "status 500") << "the body, on one line (NATS trims its end)";
  EXPECT_NE(h("Idem-Reason").find("HTTP 500"), std::string::npos) << h("Idem-Reason");
  EXPECT_EQ(h("Idem-Delivery-Count"), "3");
  EXPECT_EQ(h("Idem-Key"), "pay-1");
  EXPECT_EQ(h("Idem-Subject"), "orders.created");
  EXPECT_EQ(h("Idem-Stream"), "ORDERS");
  EXPECT_EQ(h("Idem-Stream-Sequence"), "1");
  EXPECT_EQ(h("Idem-Original-Msg-Id"), "pay-1");
  EXPECT_EQ(h("Nats-Msg-Id"), "dead:ORDERS:1");
  EXPECT_EQ(h("X-Trace"), "t1");
  EXPECT_NE(h("Idem-Failing-For-Ms"), "<none>");

  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"limit_reached\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"dead_lettered\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"termed\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"dropped\"}"), 0);
  const std::string out = consume->Output();
  EXPECT_NE(out.find("given up after 3 failed deliveries (--max-deliver 3) (published to "
                     "dead.orders), never redelivered"),
            std::string::npos)
      << out;
}

TEST_F(ConsumePoisonTest, RefusedWithNoStreamForTheDeadLetterIsDroppedAtTheLimitCountedAndLogged) {
  // The dead-letter stream exists at start (checked), then goes away.
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  RecordingService service([](const SeenRequest&) { return 400; });
  auto consume = StartConsume(service.Url("/apply"),
                              {"--dead-letter", "dead.orders", "--max-deliver", "3",
                               "--nak-delay", "20ms", "--max-nak-delay", "50ms"});
  ASSERT_EQ(js_DeleteStream(js_.js(), "DEAD", nullptr, nullptr), NATS_OK);
  ASSERT_EQ(js_.Publish("orders.created", "refused", "bad-1"), "");
  // Each refusal's dead letter fails; a redelivery tries again while under --max-deliver; at
  // the third delivery the message is terminated without one.
  ASSERT_TRUE(WaitFor([&] { return service.count() == 3 && Settled(); }, 15s))
      << consume->Output();
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"dropped\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"termed\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_errors_total{kind=\"dead_letter_failed\"}"), 3);
  const std::string out = consume->Output();
  EXPECT_NE(out.find("cannot publish to dead.orders"), std::string::npos) << out;
  EXPECT_NE(out.find("DROPPED, not kept anywhere but stream ORDERS at sequence 1"),
            std::string::npos)
      << out;
  EXPECT_EQ(service.count(), 3u);
}

TEST_F(ConsumePoisonTest, WithoutDeadLetterAPoisonMessageIsTerminatedAtTheLimit) {
  RecordingService service([](const SeenRequest&) { return 503; });
  auto consume = StartConsume(service.Url("/apply"), {"--max-deliver", "2", "--nak-delay",
                                                      "20ms", "--max-nak-delay", "50ms"});
  ASSERT_EQ(js_.Publish("orders.created", "x", "p-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 2 && Settled(); }, 10s))
      << consume->Output();
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"dropped\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"limit_reached\"}"), 1);
  EXPECT_NE(consume->Output().find("no --dead-letter subject"), std::string::npos)
      << consume->Output();
}

TEST_F(ConsumePoisonTest, RetryTimeLimitGivesUpAMessageFailingTooLong) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  RecordingService service([](const SeenRequest&) { return 500; });
  auto consume = StartConsume(service.Url("/apply"),
                              {"--dead-letter", "dead.orders", "--max-deliver", "0",
                               "--max-retry-time", "300ms", "--nak-delay", "50ms",
                               "--max-nak-delay", "50ms"});
  const auto published = SteadyClock::now();
  ASSERT_EQ(js_.Publish("orders.created", "slowly poison", "p-2"), "");
  ASSERT_TRUE(WaitFor([&] { return js_.StreamMessages("DEAD") == 1 && Settled(); }, 10s))
      << consume->Output();
  EXPECT_GE(SteadyClock::now() - published, 300ms);
  const StoredMessage dead = js_.Get("DEAD", 1);
  ASSERT_EQ(dead.error, "");
  EXPECT_EQ(dead.headers.at("Idem-Dead-Reason"), "max-retry-time");
  EXPECT_GE(std::stoll(dead.headers.at("Idem-Failing-For-Ms")), 300);
  EXPECT_GE(service.count(), 3u) << "retried meanwhile";
}

TEST_F(ConsumePoisonTest, ABacklogOlderThanTheRetryTimeIsNotGivenUpForItsAge) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  ASSERT_EQ(js_.Publish("orders.created", "old", "old-1"), "");
  // The backlog ages past the retry time before any consumer runs (the point of the test).
  std::this_thread::sleep_for(400ms);
  std::atomic<int> calls{0};
  RecordingService service([&](const SeenRequest&) { return ++calls <= 2 ? 503 : 200; });
  auto consume = StartConsume(service.Url("/apply"),
                              {"--dead-letter", "dead.orders", "--max-retry-time", "300ms",
                               "--nak-delay", "20ms", "--max-nak-delay", "20ms"});
  ASSERT_TRUE(WaitFor([&] { return service.count() == 3 && Settled(); }, 10s))
      << consume->Output();
  EXPECT_EQ(js_.StreamMessages("DEAD"), 0u);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"acked\"}"), 1);
}

TEST_F(ConsumePoisonTest, AServiceThatCannotBeReachedGivesNoMessageUp) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  // Nothing listens on port 1: every delivery is refused before it reaches a service.
  auto consume = StartConsume("http://127.0.0.1:1/apply",
                              {"--dead-letter", "dead.orders", "--max-deliver", "2",
                               "--nak-delay", "20ms", "--max-nak-delay", "20ms"});
  ASSERT_EQ(js_.Publish("orders.created", "waits", "w-1"), "");
  ASSERT_TRUE(WaitFor([&] { return consume->Output().find("delivery 5)") != std::string::npos; },
                      10s))
      << consume->Output();
  EXPECT_EQ(js_.StreamMessages("DEAD"), 0u);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"limit_reached\"}"), 0);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"termed\"}"), 0);
}

TEST_F(ConsumePoisonTest, AMisspeltStreamExitsTwoAtOnceWithAClearMessage) {
  std::chrono::milliseconds took{};
  auto [code, out] = RunToExit("ORDRES", {}, &took);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("stream 'ORDRES' does not exist"), std::string::npos) << out;
  EXPECT_LT(took, 5s);
}

TEST_F(ConsumePoisonTest, ADeadLetterSubjectNoStreamStoresExitsTwo) {
  auto [code, out] = RunToExit("ORDERS", {"--dead-letter", "nowhere.dead"});
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("no stream stores subject 'nowhere.dead'"), std::string::npos) << out;
}

TEST_F(ConsumePoisonTest, BadSubjectsAndLimitsExitTwo) {
  for (const auto& [flags, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--dead-letter", "dead.*"}, "--dead-letter 'dead.*' must be a NATS subject"},
           {{"--dead-letter", "dead..x"}, "--dead-letter 'dead..x' must be a NATS subject"},
           {{"--filter-subject", "orders.>.x"}, "--filter-subject 'orders.>.x' must be"},
           {{"--max-deliver", "0", "--max-retry-time", "0"}, "forever"},
           // Well-formed, but outside the stream's subjects: the server refuses the consumer.
           {{"--filter-subject", "invoices.>"}, "filter subject 'invoices.>'"}}) {
    auto [code, out] = RunToExit("ORDERS", flags);
    EXPECT_EQ(code, 2) << out;
    EXPECT_NE(out.find(says), std::string::npos) << says << "\n" << out;
  }
}

TEST_F(ConsumePoisonTest, NatsNotReachableAtStartIsWaitedFor) {
  TempDir dir;
  Process p({idem::build_tree::kIdemBinary, "consume", "--nats", "nats://127.0.0.1:1", "--stream", "ORDERS",
             "--consumer", "svc", "--deliver", "http://127.0.0.1:1/x"},
            dir.File("out.log"));
  ASSERT_TRUE(p.WaitForLine("cannot reach", 10s)) << p.Output();
  EXPECT_FALSE(p.WaitForExit(1s).has_value()) << "a server may be starting: " << p.Output();
  const int status = p.Stop(SIGTERM, 10s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << p.Output();
}

TEST_F(ConsumePoisonTest, ACleanSigtermLogsNoWarning) {
  RecordingService service;
  auto consume = StartConsume(service.Url("/apply"));
  ASSERT_EQ(js_.Publish("orders.created", "m", "m-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 1 && Settled(); }, 10s));
  const int status = consume->process().Stop(SIGTERM, 10s);
  ASSERT_TRUE(WIFEXITED(status)) << consume->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string out = consume->Output();
  EXPECT_EQ(out.find(" warning "), std::string::npos) << out;
  EXPECT_EQ(out.find(" error "), std::string::npos) << out;
  EXPECT_NE(out.find("(shutting down)"), std::string::npos) << out;
}

}  // namespace
}  // namespace idem::testing
