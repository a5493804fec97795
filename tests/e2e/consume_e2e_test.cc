// `idem consume` end to end: a real nats-server -js (started here), the real idem binary, and
// an in-process HTTP service that records what it gets. What the sidecar sends, how each
// answer settles the message, timeouts, oversized messages, dead letters, SIGTERM, and NATS
// going away and coming back. (The effects-once tests with PostgreSQL are in
// consume_ledger_e2e_test.cc.)
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

class ConsumeTest : public ::testing::Test {
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

  // True once the consumer has nothing pending and nothing unacked.
  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("ORDERS", "svc", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  NatsServer nats_;
  JsClient js_;
};

TEST_F(ConsumeTest, PostsEachMessageWithItsKeySubjectHeadersAndDeliveryCount) {
  RecordingService service;
  auto consume = StartConsume(service.Url("/v1/apply?x=1"));
  ASSERT_EQ(js_.Publish("orders.created", "{\"n\":1}", "order-1",
                        {{"Content-Type", "application/json"}, {"X-Trace", "abc"}}),
            "");
  ASSERT_EQ(js_.Publish("orders.created", "no headers at all"), "");  // no Nats-Msg-Id
  ASSERT_TRUE(WaitFor([&] { return service.count() == 2 && Settled(); }, 10s))
      << consume->Output();
  // The sidecar posts messages concurrently, so the service may see them in either order.
  auto seen = service.seen();
  if (seen[0].body != "{\"n\":1}") std::swap(seen[0], seen[1]);
  EXPECT_EQ(seen[0].target, "/v1/apply?x=1");
  EXPECT_EQ(seen[1].target, "/v1/apply?x=1");
  EXPECT_EQ(seen[0].Header("Idempotency-Key"), "order-1");
  EXPECT_EQ(seen[0].Header("Idem-Subject"), "orders.created");
  EXPECT_EQ(seen[0].Header("Idem-Delivery-Count"), "1");
  EXPECT_EQ(seen[0].Header("Idem-Stream"), "ORDERS");
  EXPECT_EQ(seen[0].Header("Idem-Stream-Sequence"), "1");
  EXPECT_EQ(seen[0].Header("X-Trace"), "abc");
  EXPECT_EQ(seen[0].Header("Content-Type"), "application/json");
  EXPECT_EQ(seen[0].Header("Nats-Msg-Id"), "order-1");
  EXPECT_EQ(seen[0].body, "{\"n\":1}");
  // Without a Nats-Msg-Id the key is the stream and sequence, stable across redeliveries.
  EXPECT_EQ(seen[1].Header("Idempotency-Key"), "ORDERS:2");
  EXPECT_EQ(seen[1].Header("Content-Type"), "application/octet-stream");
  EXPECT_EQ(seen[1].body, "no headers at all");

  const HttpResponse metrics = Http(consume->admin(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("idem_consume_messages_total{outcome=\"acked\"} 2"),
            std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("idem_consume_in_flight 0"), std::string::npos);
  EXPECT_EQ(Http(consume->admin(), "GET", "/healthz").status, 200);
  EXPECT_EQ(Http(consume->admin(), "GET", "/readyz").status, 200);
}

TEST_F(ConsumeTest, ServerErrorsAndThrottlingAreRedeliveredUnderTheSameKey) {
  std::atomic<int> calls{0};
  RecordingService service([&](const SeenRequest&) {
    const int n = ++calls;
    return n == 1 ? 503 : n == 2 ? 429 : n == 3 ? 408 : 201;
  });
  auto consume = StartConsume(service.Url("/apply"), {"--nak-delay", "20ms"});
  ASSERT_EQ(js_.Publish("orders.created", "pay 5", "pay-5"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 4 && Settled(); }, 10s))
      << consume->Output();
  const auto seen = service.seen();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(seen[i].Header("Idempotency-Key"), "pay-5");
    EXPECT_EQ(seen[i].Header("Idem-Delivery-Count"), std::to_string(i + 1));
  }
  // Acked after the 201: no further delivery, over many times the 20 ms nak delay.
  EXPECT_TRUE(HoldsFor([&] { return service.count() == 4u; }, 200ms))
      << service.count() << " deliveries";
  EXPECT_NE(consume->Output().find("HTTP 503"), std::string::npos) << consume->Output();
}

TEST_F(ConsumeTest, ClientErrorIsTerminatedAfterPublishingToTheDeadLetterSubject) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  RecordingService service([](const SeenRequest& r) { return r.body == "bad" ? 422 : 200; });
  auto consume = StartConsume(service.Url("/apply"),
                              {"--dead-letter", "dead.orders", "--nak-delay", "20ms"});
  ASSERT_EQ(js_.Publish("orders.created", "bad", "bad-1"), "");
  ASSERT_EQ(js_.Publish("orders.created", "good", "good-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 2 && Settled(); }, 10s))
      << consume->Output();
  ASSERT_TRUE(WaitFor([&] { return js_.StreamMessages("DEAD") == 1; }, 5s));
  // A terminated message is never redelivered, over many times the 20 ms nak delay.
  EXPECT_TRUE(HoldsFor([&] { return service.count() == 2u; }, 300ms))
      << service.count() << " deliveries";
  const std::string out = consume->Output();
  EXPECT_NE(out.find("key bad-1"), std::string::npos) << out;
  EXPECT_NE(out.find("published to dead.orders"), std::string::npos) << out;
}

TEST_F(ConsumeTest, ClientErrorWithoutDeadLetterIsLoggedAndTerminated) {
  RecordingService service([](const SeenRequest&) { return 400; });
  auto consume = StartConsume(service.Url("/apply"));
  ASSERT_EQ(js_.Publish("orders.created", "x", "refused-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 1 && Settled(); }, 10s));
  EXPECT_NE(consume->Output().find("no --dead-letter subject"), std::string::npos);
  const HttpResponse metrics = Http(consume->admin(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("idem_consume_messages_total{outcome=\"termed\"} 1"),
            std::string::npos) << metrics.body;
}

TEST_F(ConsumeTest, HungServiceTimesOutAndTheMessageIsRedelivered) {
  std::atomic<int> calls{0};
  RecordingService* self = nullptr;
  RecordingService service([&](const SeenRequest&) {
    if (++calls == 1) self->WaitUntilStopped(5000);  // hangs past the timeout
    return 200;
  });
  self = &service;
  auto consume = StartConsume(service.Url("/apply"), {"--timeout", "300ms", "--nak-delay", "20ms"});
  ASSERT_EQ(js_.Publish("orders.created", "slow", "slow-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() >= 2 && Settled(); }, 10s))
      << consume->Output();
  const auto seen = service.seen();
  EXPECT_EQ(seen[1].Header("Idempotency-Key"), "slow-1");
  EXPECT_EQ(seen[1].Header("Idem-Delivery-Count"), "2");
  EXPECT_NE(consume->Output().find("no answer within 300 ms"), std::string::npos)
      << consume->Output();
}

TEST_F(ConsumeTest, OversizedMessageIsDeliveredWhole) {
  RecordingService service;
  auto consume = StartConsume(service.Url("/apply"));
  std::string big(4 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + (i / 4096) % 26);
  ASSERT_EQ(js_.Publish("orders.created", big, "big-1"), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 1 && Settled(); }, 15s))
      << consume->Output();
  EXPECT_TRUE(service.seen()[0].body == big);
}

TEST_F(ConsumeTest, SigtermFinishesTheMessagesInFlightAcksThemAndExitsZero) {
  RecordingService* self = nullptr;
  RecordingService service([&](const SeenRequest&) {
    self->WaitUntilStopped(400);
    return 200;
  });
  self = &service;
  auto consume = StartConsume(service.Url("/apply"), {"--max-in-flight", "8"});
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(js_.Publish("orders.created", "m", "term-" + std::to_string(i)), "");
  }
  ASSERT_TRUE(WaitFor([&] { return service.count() == 5; }, 10s));
  const int status = consume->process().Stop(SIGTERM, 10s);
  ASSERT_TRUE(WIFEXITED(status)) << consume->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(Settled()) << "every delivery in flight was acked before the exit";
  EXPECT_NE(consume->Output().find("finishing 5 message(s) in flight"), std::string::npos)
      << consume->Output();
  EXPECT_EQ(service.count(), 5u);
}

// The sidecar fetches up to three times --max-in-flight messages ahead of the window, so that a settle is
// followed by the next POST without a pull round trip; the window still bounds the POSTs the
// service gets at once, and what was fetched ahead goes back to NATS at SIGTERM (the next
// process gets it at once, not after the ack wait).
TEST_F(ConsumeTest, TheWindowBoundsPostsAndMessagesFetchedAheadGoBackAtSigterm) {
  std::atomic<int> concurrent{0};
  std::atomic<int> most{0};
  std::atomic<bool> release{false};
  RecordingService service([&](const SeenRequest&) {
    const int now = ++concurrent;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    WaitFor([&] { return release.load(); }, 10s);
    --concurrent;
    return 200;
  });
  // The default ack wait (30 s): a message left unsettled would come back only after it.
  auto consume = StartConsume(service.Url("/apply"), {"--max-in-flight", "3"});
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(js_.Publish("orders.created", "m" + std::to_string(i), "ahead-" + std::to_string(i)),
              "");
  }
  // Three being delivered and more fetched ahead, waiting for a slot: up to nine (three times
  // --max-in-flight); the sidecar fetches again once three places are free, so it stops
  // fetching with seven to nine of them, depending on how the pulls were answered.
  JsClient::ConsumerCounts counts;
  ASSERT_TRUE(WaitFor(
      [&] {
        return service.count() == 3 && js_.Counts("ORDERS", "svc", &counts).empty() &&
               counts.ack_pending >= 10;
      },
      10s))
      << consume->Output();
  std::this_thread::sleep_for(300ms);  // no further pull goes out
  ASSERT_EQ(js_.Counts("ORDERS", "svc", &counts), "");
  EXPECT_LE(counts.ack_pending, 12) << "never more than four times --max-in-flight out";
  ASSERT_EQ(kill(consume->process().pid(), SIGTERM), 0);
  ASSERT_TRUE(consume->process().WaitForLine(
      std::to_string(counts.ack_pending - 3) + " message(s) fetched ahead given back", 10s))
      << consume->Output();
  release = true;
  const auto status = consume->process().WaitForExit(10s);
  ASSERT_TRUE(status && WIFEXITED(*status)) << consume->Output();
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_EQ(service.count(), 3u) << "the messages fetched ahead were not delivered while stopping";
  EXPECT_EQ(most.load(), 3) << "never more POSTs at once than --max-in-flight";
  ASSERT_EQ(consume->Start(), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 20 && Settled(); }, 5s))
      << consume->Output();
  EXPECT_EQ(most.load(), 3);
}

TEST_F(ConsumeTest, NatsRestartIsSurvivedAndReadyzSaysSoMeanwhile) {
  RecordingService service;
  // A SIGKILLed nats-server may forget acks it had not written out yet; what it then thinks is
  // unacked comes back after ack_wait, kept short here.
  auto consume = StartConsume(service.Url("/apply"), {"--nak-delay", "20ms", "--timeout", "1s",
                                                      "--ack-wait", "2s"});
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(js_.Publish("orders.created", "before", "before-" + std::to_string(i)), "");
  }
  ASSERT_TRUE(WaitFor([&] { return Settled(); }, 10s));
  ASSERT_EQ(Http(consume->admin(), "GET", "/readyz").status, 200);

  nats_.Kill();
  EXPECT_TRUE(WaitFor([&] { return Http(consume->admin(), "GET", "/readyz").status == 503; }, 5s));
  EXPECT_EQ(Http(consume->admin(), "GET", "/healthz").status, 200);
  EXPECT_TRUE(consume->process().WaitForLine("disconnected from", 5s)) << consume->Output();
  ASSERT_EQ(nats_.Restart(), "");
  EXPECT_TRUE(WaitFor([&] { return Http(consume->admin(), "GET", "/readyz").status == 200; }, 10s))
      << consume->Output();
  ASSERT_TRUE(WaitFor([&] { return js_.Publish("orders.created", "probe", "after-0").empty(); },
                      10s));
  for (int i = 1; i < 20; ++i) {
    ASSERT_EQ(js_.Publish("orders.created", "after", "after-" + std::to_string(i)), "");
  }
  JsClient::ConsumerCounts counts;
  ASSERT_TRUE(WaitFor([&] { return Settled(); }, 15s))
      << consume->Output() << js_.Counts("ORDERS", "svc", &counts) << " ack_pending "
      << counts.ack_pending << " pending " << counts.pending << " seen " << service.count();
  std::map<std::string, int> keys;
  for (const auto& r : service.seen()) ++keys[r.Header("Idempotency-Key")];
  EXPECT_EQ(keys.size(), 40u) << "no message lost across the restart";
  const std::string out = consume->Output();
  EXPECT_NE(out.find("disconnected from"), std::string::npos) << out;
  EXPECT_NE(out.find("connected to"), std::string::npos) << out;
}

TEST_F(ConsumeTest, BadFlagsAreReportedWithExitCode2) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--ack-wait", "500ms"},
        std::vector<std::string>{"--max-in-flight", "0"}}) {
    std::vector<std::string> argv = {idem::build_tree::kIdemBinary, "consume", "--nats", nats_.Url(), "--stream",
                                     "ORDERS", "--consumer", "svc", "--deliver",
                                     "http://127.0.0.1:1/x"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    TempDir dir;
    Process p(argv, dir.File("out.log"));
    auto status = p.WaitForExit(10s);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(WEXITSTATUS(*status), 2) << p.Output();
    EXPECT_NE(p.Output().find("must"), std::string::npos) << p.Output();
  }
  TempDir dir;
  Process p({idem::build_tree::kIdemBinary, "consume", "--nats", nats_.Url(), "--stream", "ORDERS", "--consumer",
             "svc", "--deliver", "ftp://127.0.0.1/x"},
            dir.File("out.log"));
  auto status = p.WaitForExit(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(p.Output().find("must be http://HOST:PORT/PATH"), std::string::npos) << p.Output();
}

}  // namespace
}  // namespace idem::testing
