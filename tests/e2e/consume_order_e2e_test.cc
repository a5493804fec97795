// `idem consume` keeps per-key order (Idem-Ordering-Key) and tells JetStream a message is in
// progress while the service works on it or while it waits for its predecessor: a real
// nats-server -js, the real idem binary, an in-process service that records what it applies.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
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

class ConsumeOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("EVENTS", {"events.>"}), "");
  }

  std::unique_ptr<ConsumeProcess> StartConsume(const std::string& deliver,
                                               std::vector<std::string> extra) {
    auto p = std::make_unique<ConsumeProcess>(
        idem::build_tree::kIdemBinary, ConsumeArgs{nats_.Url(), "EVENTS", "svc", deliver, std::move(extra)});
    const std::string error = p->Start();
    EXPECT_EQ(error, "");
    return p;
  }

  std::string PublishKeyed(const std::string& key, const std::string& body,
                           const std::string& msg_id) {
    return js_.Publish("events." + key, body, msg_id, {{"Idem-Ordering-Key", key}});
  }

  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("EVENTS", "svc", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  NatsServer nats_;
  JsClient js_;
};

// A service that applies events once per Idempotency-Key, as a real one would with an inbox,
// and records the order in which each ordering key's events took effect.
class ApplyingService {
 public:
  ApplyingService()
      : http_([this](const SeenRequest& r) { return Handle(r); }) {}

  std::string Url() const { return http_.Url("/apply"); }

  int Handle(const SeenRequest& r) {
    const std::string id = r.Header("Idempotency-Key");
    const int concurrent = ++concurrent_;
    {
      std::lock_guard lock(mu_);
      max_concurrent_ = std::max(max_concurrent_, concurrent);
      ++deliveries_;
    }
    int status = 200;
    // 30% of first deliveries fail: chosen by the key, so a redelivery is not refused again.
    if (r.Header("Idem-Delivery-Count") == "1" && std::hash<std::string>{}(id) % 10 < 3) {
      status = 503;
    } else {
      std::lock_guard lock(mu_);
      if (applied_ids_.insert(id).second) {
        applied_[r.Header("Idem-Ordering-Key")].push_back(std::stoi(r.body));
      }
    }
    --concurrent_;
    return status;
  }

  size_t applied() const {
    std::lock_guard lock(mu_);
    return applied_ids_.size();
  }
  // For each key, how many events took effect after a later event of the same key.
  std::map<std::string, int> Inversions() const {
    std::lock_guard lock(mu_);
    std::map<std::string, int> out;
    for (const auto& [key, events] : applied_) {
      int highest = -1;
      for (int e : events) {
        if (e < highest) ++out[key];
        highest = std::max(highest, e);
      }
    }
    return out;
  }
  std::map<std::string, std::vector<int>> applied_by_key() const {
    std::lock_guard lock(mu_);
    return applied_;
  }
  int max_concurrent() const {
    std::lock_guard lock(mu_);
    return max_concurrent_;
  }
  int deliveries() const {
    std::lock_guard lock(mu_);
    return deliveries_;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> applied_ids_;
  std::map<std::string, std::vector<int>> applied_;
  std::atomic<int> concurrent_{0};
  int max_concurrent_ = 0;
  int deliveries_ = 0;
  RecordingService http_;  // last: its threads stop before the members above go
};

TEST_F(ConsumeOrderTest, HundredKeysInOrderThroughFailuresAndTwoKillsEachEventAppliedOnce) {
  constexpr int kKeys = 100;
  constexpr int kEvents = 50;
  constexpr size_t kTotal = kKeys * kEvents;
  ApplyingService service;
  // A short ack_wait, so what a killed process had in hand comes back quickly.
  const std::vector<std::string> flags = {"--ack-wait", "2s", "--nak-delay", "20ms",
                                          "--max-nak-delay", "200ms"};
  // Events interleaved across keys, as producers would enqueue them; all stored before the
  // sidecar starts, so that the kills below land mid-run.
  for (int e = 0; e < kEvents; ++e) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "acct-" + std::to_string(k);
      ASSERT_EQ(PublishKeyed(key, std::to_string(e), key + "-ev-" + std::to_string(e)), "");
    }
  }
  auto consume = StartConsume(service.Url(), flags);
  std::string outputs;
  for (size_t kill_at : {kTotal / 3, 2 * kTotal / 3}) {
    ASSERT_TRUE(WaitFor([&] { return service.applied() >= kill_at; }, 20s))
        << service.applied() << "\n" << consume->Output();
    consume->process().Stop(SIGKILL);
    std::cout << "killed with " << service.applied() << " applied\n";
    outputs += consume->Output();
    ASSERT_EQ(consume->Start(), "");
  }
  ASSERT_TRUE(WaitFor([&] { return service.applied() == kTotal && Settled(); }, 30s))
      << "applied " << service.applied() << "\n" << outputs << consume->Output();

  EXPECT_EQ(service.Inversions(), (std::map<std::string, int>{})) << consume->Output();
  const auto applied = service.applied_by_key();
  ASSERT_EQ(applied.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, events] : applied) {
    ASSERT_EQ(events.size(), static_cast<size_t>(kEvents)) << key;
  }
  EXPECT_GT(service.max_concurrent(), 1) << "different keys are delivered concurrently";
  const std::string out = outputs + consume->Output();
  EXPECT_NE(out.find("may still be unsettled (an earlier process had them)"), std::string::npos)
      << out;
  std::cout << "deliveries " << service.deliveries() << " for " << kTotal << " events, "
            << "max concurrent " << service.max_concurrent() << "\n";
}

TEST_F(ConsumeOrderTest, SlowServiceGetsOneDeliveryPerMessageAndHeldOnesAreNotRedelivered) {
  // The service takes 3x the ack wait to answer the first message of key a, and an unkeyed one.
  std::mutex mu;
  std::vector<std::string> events;
  auto note = [&](const std::string& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  };
  RecordingService* self = nullptr;
  RecordingService service([&](const SeenRequest& r) {
    note("start " + r.body);
    if (r.body == "a1" || r.body == "slow") self->WaitUntilStopped(3000);
    note("end " + r.body);
    return 200;
  });
  self = &service;
  auto consume = StartConsume(service.Url("/apply"), {"--ack-wait", "1s", "--timeout", "5s"});
  ASSERT_EQ(PublishKeyed("a", "a1", "a1"), "");
  ASSERT_EQ(PublishKeyed("a", "a2", "a2"), "");
  ASSERT_EQ(js_.Publish("events.other", "u", "u"), "");  // no ordering key
  ASSERT_EQ(js_.Publish("events.other", "slow", "slow"), "");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Http(consume->admin(), "GET", "/metrics").body.find("idem_consume_held 1\n") !=
               std::string::npos;
      },
      5s))
      << Http(consume->admin(), "GET", "/metrics").body;
  ASSERT_TRUE(WaitFor([&] { return service.count() >= 4 && Settled(); }, 10s))
      << consume->Output();
  EXPECT_EQ(service.count(), 4u) << "one delivery of each message";
  std::lock_guard lock(mu);
  const auto at = [&](const std::string& e) {
    return std::find(events.begin(), events.end(), e) - events.begin();
  };
  EXPECT_LT(at("start u"), at("end a1")) << "the unkeyed message did not wait";
  EXPECT_LT(at("end a1"), at("start a2")) << "a2 waited for a1";
  for (const SeenRequest& r : service.seen()) {
    // A redelivery while a1 was delivered or a2 held would show as a second copy or count 2.
    EXPECT_EQ(r.Header("Idem-Delivery-Count"), "1") << r.body;
    if (r.body.starts_with("a")) {
      EXPECT_EQ(r.Header("Idem-Ordering-Key"), "a");
    }
  }
}

TEST_F(ConsumeOrderTest, NakedHeadKeepsItsSuccessorsWaitingUntilItSucceeds) {
  std::atomic<int> head_calls{0};
  RecordingService service([&](const SeenRequest& r) {
    if (r.body == "k1" && ++head_calls < 3) return 503;
    return 200;
  });
  auto consume = StartConsume(service.Url("/apply"), {"--nak-delay", "50ms"});
  for (int i = 1; i <= 5; ++i) {
    const std::string body = "k" + std::to_string(i);
    ASSERT_EQ(PublishKeyed("k", body, body), "");
  }
  ASSERT_TRUE(WaitFor([&] { return service.count() == 7 && Settled(); }, 10s))
      << consume->Output();
  std::vector<std::string> order;
  for (const SeenRequest& r : service.seen()) order.push_back(r.body);
  EXPECT_EQ(order, (std::vector<std::string>{"k1", "k1", "k1", "k2", "k3", "k4", "k5"}));
  EXPECT_NE(consume->Output().find("later message(s) wait until EVENTS #1 comes back"),
            std::string::npos)
      << consume->Output();
}

TEST_F(ConsumeOrderTest, SigtermGivesHeldMessagesBackSoTheNextProcessGetsThemAtOnce) {
  RecordingService* self = nullptr;
  RecordingService service([&](const SeenRequest& r) {
    if (r.body == "a1") self->WaitUntilStopped(1000);
    return 200;
  });
  self = &service;
  // The default ack_wait (30 s): a held message left unacked would come back only after it.
  auto consume = StartConsume(service.Url("/apply"), {});
  ASSERT_EQ(PublishKeyed("a", "a1", "a1"), "");
  ASSERT_EQ(PublishKeyed("a", "a2", "a2"), "");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Http(consume->admin(), "GET", "/metrics").body.find("idem_consume_held 1\n") !=
               std::string::npos;
      },
      5s));
  const int status = consume->process().Stop(SIGTERM, 10s);
  ASSERT_TRUE(WIFEXITED(status)) << consume->Output();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // a2 was held until a1 ended, then given back rather than delivered.
  EXPECT_NE(consume->Output().find("given back to NATS"), std::string::npos)
      << consume->Output();
  ASSERT_EQ(service.count(), 1u) << "a1 finished; a2 was not delivered";
  ASSERT_EQ(consume->Start(), "");
  ASSERT_TRUE(WaitFor([&] { return service.count() == 2 && Settled(); }, 5s))
      << consume->Output();
  EXPECT_EQ(service.seen()[1].body, "a2");
}

}  // namespace
}  // namespace idem::testing
