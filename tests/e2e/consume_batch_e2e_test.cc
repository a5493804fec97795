// `idem consume --batch-size N` end to end (a real nats-server -js, the real idem binary, an
// in-process service that reads the JSON envelope and answers per item): what the envelope
// carries, each per-item outcome settled on its own (ack, retry, reject -> dead letter), answers
// that must fail safe (unreadable 2xx, a non-2xx, an item left out), and per-key order.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <set>

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
using Json = nlohmann::json;

// One item of a batch the service received.
struct Item {
  std::string key;
  std::string subject;
  std::string stream;
  uint64_t sequence = 0;
  uint64_t delivery = 0;
  std::string ordering_key;  // "" when none
  Json headers;
  std::string body;  // "body", or "b64:" + "body_base64"
};

std::vector<Item> Items(const SeenRequest& r) {
  std::vector<Item> out;
  const Json doc = Json::parse(r.body);
  for (const Json& m : doc.at("messages")) {
    Item i;
    i.key = m.at("idempotency_key");
    i.subject = m.at("subject");
    i.stream = m.at("stream");
    i.sequence = m.at("stream_sequence");
    i.delivery = m.at("delivery_count");
    i.ordering_key = m.value("ordering_key", "");
    i.headers = m.at("headers");
    i.body = m.contains("body") ? m.at("body").get<std::string>()
                                : "b64:" + m.at("body_base64").get<std::string>();
    out.push_back(std::move(i));
  }
  return out;
}

// {"results":[...]} from (key, outcome[, error]) triples.
Reply Results(const std::vector<std::vector<std::string>>& results) {
  Json list = Json::array();
  for (const auto& r : results) {
    Json entry = {{"idempotency_key", r[0]}, {"outcome", r[1]}};
    if (r.size() > 2) entry["error"] = r[2];
    list.push_back(entry);
  }
  return Reply{200, Json{{"results", list}}.dump(), {{"Content-Type", "application/json"}}};
}

Reply AckAll(const SeenRequest& r) {
  std::vector<std::vector<std::string>> results;
  for (const Item& i : Items(r)) results.push_back({i.key, "ack"});
  return Results(results);
}

class ConsumeBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nats_.Start(), "");
    ASSERT_EQ(js_.Connect(nats_.Url()), "");
    ASSERT_EQ(js_.AddStream("ORDERS", {"orders.>"}), "");
  }

  std::unique_ptr<ConsumeProcess> StartConsume(const std::string& deliver,
                                               std::vector<std::string> extra) {
    auto p = std::make_unique<ConsumeProcess>(
        idem::build_tree::kIdemBinary, ConsumeArgs{nats_.Url(), "ORDERS", "svc", deliver, std::move(extra)});
    const std::string error = p->Start();
    EXPECT_EQ(error, "");
    return p;
  }

  bool Settled() {
    JsClient::ConsumerCounts c;
    return js_.Counts("ORDERS", "svc", &c).empty() && c.ack_pending == 0 && c.pending == 0;
  }

  int64_t ConsumeMetric(ConsumeProcess& p, const std::string& series) {
    return MetricValue(Http(p.admin(), "GET", "/metrics").body, series);
  }

  // Every item the service was sent, in the order it received them.
  static std::vector<Item> AllItems(const RecordingService& service) {
    std::vector<Item> out;
    for (const SeenRequest& r : service.seen()) {
      for (Item& i : Items(r)) out.push_back(std::move(i));
    }
    return out;
  }

  NatsServer nats_;
  JsClient js_;
};

TEST_F(ConsumeBatchTest, TheEnvelopeCarriesEachMessagesKeySubjectStreamCountHeadersAndBody) {
  // Stored before the sidecar starts, so that they are ready at once and go in one batch.
  ASSERT_EQ(js_.Publish("orders.created", "{\"n\":1}", "order-1",
                        {{"Content-Type", "application/json"},
                         {"X-Trace", "abc"},
                         {"Idem-Ordering-Key", "acct-7"}}),
            "");
  ASSERT_EQ(js_.Publish("orders.binary", std::string("\x00\xFF\xFE", 3)), "");
  ASSERT_EQ(js_.Publish("orders.created", "plain"), "");
  RecordingService service{RecordingService::Responder(AckAll)};
  auto consume = StartConsume(service.Url("/v1/batch?x=1"), {"--batch-size", "8"});
  ASSERT_TRUE(WaitFor([&] { return AllItems(service).size() == 3 && Settled(); }, 10s))
      << consume->Output();
  for (const SeenRequest& r : service.seen()) {
    EXPECT_EQ(r.target, "/v1/batch?x=1");
    EXPECT_EQ(r.Header("Content-Type"), "application/json");
    EXPECT_EQ(r.Header("Idem-Batch"), std::to_string(Items(r).size()));
    EXPECT_EQ(r.Header("Idempotency-Key"), "") << "the batch itself has no key";
  }
  std::vector<Item> items = AllItems(service);
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.sequence < b.sequence; });
  EXPECT_EQ(items[0].key, "order-1");
  EXPECT_EQ(items[0].subject, "orders.created");
  EXPECT_EQ(items[0].stream, "ORDERS");
  EXPECT_EQ(items[0].sequence, 1u);
  EXPECT_EQ(items[0].delivery, 1u);
  EXPECT_EQ(items[0].ordering_key, "acct-7");
  EXPECT_EQ(items[0].headers.value("Content-Type", ""), "application/json");
  EXPECT_EQ(items[0].headers.value("X-Trace", ""), "abc");
  EXPECT_EQ(items[0].headers.value("Nats-Msg-Id", ""), "order-1");
  EXPECT_FALSE(items[0].headers.contains("Idem-Ordering-Key")) << "it has its own field";
  EXPECT_EQ(items[0].body, "{\"n\":1}");
  EXPECT_EQ(items[1].key, "ORDERS:2");
  EXPECT_EQ(items[1].subject, "orders.binary");
  EXPECT_EQ(items[1].ordering_key, "");
  EXPECT_EQ(items[1].body, "b64:AP/+") << "a body that is not UTF-8 goes as base64";
  EXPECT_EQ(items[2].key, "ORDERS:3");
  EXPECT_EQ(items[2].body, "plain");
  EXPECT_EQ(service.count(), 1u) << "three messages ready at once: one POST";
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"acked\"}"), 3);
}

TEST_F(ConsumeBatchTest, EachItemIsAckedRetriedOrRejectedToTheDeadLetterAsTheServiceSays) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_EQ(js_.Publish("orders.x", id, id), "");
  // a: ack. b: retry once, then ack. c: reject. d: left out once, then ack.
  RecordingService service(RecordingService::Responder([](const SeenRequest& r) {
    std::vector<std::vector<std::string>> results;
    for (const Item& i : Items(r)) {
      if (i.key == "b" && i.delivery == 1) {
        results.push_back({i.key, "retry", "database busy"});
      } else if (i.key == "c") {
        results.push_back({i.key, "reject", "no such account"});
      } else if (i.key == "d" && i.delivery == 1) {
        continue;
      } else {
        results.push_back({i.key, "ack"});
      }
    }
    return Results(results);
  }));
  auto consume = StartConsume(service.Url("/batch"), {"--batch-size", "16", "--nak-delay",
                                                      "20ms", "--dead-letter", "dead.orders"});
  ASSERT_TRUE(WaitFor([&] { return AllItems(service).size() == 6 && Settled(); }, 10s))
      << consume->Output();
  std::map<std::string, std::vector<uint64_t>> deliveries;
  for (const Item& i : AllItems(service)) deliveries[i.key].push_back(i.delivery);
  EXPECT_EQ(deliveries["a"], (std::vector<uint64_t>{1}));
  EXPECT_EQ(deliveries["b"], (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(deliveries["c"], (std::vector<uint64_t>{1})) << "rejected: never redelivered";
  EXPECT_EQ(deliveries["d"], (std::vector<uint64_t>{1, 2})) << "left out: retried";

  ASSERT_EQ(js_.StreamMessages("DEAD"), 1u);
  StoredMessage dead = js_.Get("DEAD", 1);
  ASSERT_EQ(dead.error, "");
  EXPECT_EQ(dead.data, "c");
  EXPECT_EQ(dead.headers["Idem-Dead-Reason"], "refused");
  EXPECT_EQ(dead.headers["Idem-Failure"], "batch-item");
  EXPECT_EQ(dead.headers["Idem-Status"], "200");
  EXPECT_EQ(dead.headers["Idem-Error-Body"], "no such account");
  EXPECT_EQ(dead.headers["Idem-Key"], "c");
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"acked\"}"), 3);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"naked\"}"), 2);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"dead_lettered\"}"), 1);
  const std::string out = consume->Output();
  EXPECT_NE(out.find("key b (ORDERS #2, delivery 1): the service answered retry: database busy"),
            std::string::npos) << out;
  EXPECT_NE(out.find("key d (ORDERS #4, delivery 1): left out of the answer to a batch of"),
            std::string::npos) << out;
  EXPECT_NE(out.find("the service answered reject: no such account"), std::string::npos) << out;
}

// After a service whose first answer failed a whole batch and acked every later one: each
// message of the first batch came back once, as delivery 2, and all `messages` were seen.
void ExpectFirstBatchRedeliveredOnce(const RecordingService& service, size_t messages) {
  ASSERT_TRUE(WaitFor([&] { return service.count() >= 2; }, 10s));
  const auto seen = service.seen();
  const std::vector<Item> first = Items(seen[0]);
  ASSERT_FALSE(first.empty());
  std::map<std::string, std::vector<uint64_t>> deliveries;
  for (size_t r = 0; r < seen.size(); ++r) {
    for (const Item& i : Items(seen[r])) deliveries[i.key].push_back(i.delivery);
  }
  for (const Item& i : first) {
    EXPECT_EQ(deliveries[i.key], (std::vector<uint64_t>{1, 2})) << i.key;
  }
  EXPECT_EQ(deliveries.size(), messages);
}

TEST_F(ConsumeBatchTest, AnUnreadable2xxAnswerNaksEveryMessageOfTheBatch) {
  for (int i = 0; i < 5; ++i) ASSERT_EQ(js_.Publish("orders.x", "m" + std::to_string(i)), "");
  std::atomic<int> calls{0};
  RecordingService service(RecordingService::Responder([&](const SeenRequest& r) {
    if (++calls == 1) return Reply{200, "OK, all done", {}};
    return AckAll(r);
  }));
  auto consume = StartConsume(service.Url("/batch"), {"--batch-size", "16", "--nak-delay",
                                                      "20ms", "--max-nak-delay", "50ms"});
  ASSERT_TRUE(WaitFor([&] { return Settled() && AllItems(service).size() > 5; }, 10s))
      << consume->Output();
  ExpectFirstBatchRedeliveredOnce(service, 5);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_errors_total{kind=\"batch_response\"}"), 1);
  EXPECT_EQ(ConsumeMetric(*consume, "idem_consume_messages_total{outcome=\"acked\"}"), 5);
  EXPECT_NE(consume->Output().find("with a body that cannot be used (the batch response is "
                                   "not JSON); every message of it is naked"),
            std::string::npos)
      << consume->Output();
}

TEST_F(ConsumeBatchTest, AClientErrorForTheWholeBatchNaksEveryMessageRatherThanGivingThemUp) {
  ASSERT_EQ(js_.AddStream("DEAD", {"dead.orders"}), "");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(js_.Publish("orders.x", "m" + std::to_string(i)), "");
  std::atomic<int> calls{0};
  RecordingService service(RecordingService::Responder([&](const SeenRequest& r) {
    if (++calls == 1) return Reply{400, "unknown format", {}};
    return AckAll(r);
  }));
  auto consume = StartConsume(service.Url("/batch"),
                              {"--batch-size", "16", "--nak-delay", "20ms", "--max-nak-delay",
                               "50ms", "--dead-letter", "dead.orders"});
  ASSERT_TRUE(WaitFor([&] { return Settled() && AllItems(service).size() > 5; }, 10s))
      << consume->Output();
  ExpectFirstBatchRedeliveredOnce(service, 5);
  EXPECT_EQ(js_.StreamMessages("DEAD"), 0u) << "a refused envelope gives no message up";
  EXPECT_NE(consume->Output().find("answered HTTP 400: unknown format"), std::string::npos)
      << consume->Output();
}

// Records, per ordering key, the events applied (once per Idempotency-Key) in the order the
// service saw them, and whether any batch held two messages of one key.
class KeyedBatchService {
 public:
  explicit KeyedBatchService(bool fail_some)
      : fail_some_(fail_some),
        http_(RecordingService::Responder([this](const SeenRequest& r) { return Handle(r); })) {}

  std::string Url() const { return http_.Url("/batch"); }

  Reply Handle(const SeenRequest& r) {
    const std::vector<Item> items = Items(r);
    std::vector<std::vector<std::string>> results;
    std::lock_guard lock(mu_);
    ++batches_;
    max_batch_ = std::max(max_batch_, items.size());
    std::set<std::string> keys_here;
    uint64_t last_sequence = 0;
    for (const Item& i : items) {
      if (!i.ordering_key.empty() && !keys_here.insert(i.ordering_key).second) {
        ++same_key_in_one_batch_;
      }
      if (i.sequence < last_sequence) ++out_of_sequence_;
      last_sequence = i.sequence;
      // 30% of first deliveries fail: chosen by the key, so a redelivery is not refused again.
      if (fail_some_ && i.delivery == 1 && std::hash<std::string>{}(i.key) % 10 < 3) {
        results.push_back({i.key, "retry", "try later"});
        continue;
      }
      if (applied_ids_.insert(i.key).second) {
        applied_[i.ordering_key].push_back(std::stoi(i.body));
      }
      results.push_back({i.key, "ack"});
    }
    return Results(results);
  }

  size_t applied() const {
    std::lock_guard lock(mu_);
    return applied_ids_.size();
  }
  std::map<std::string, std::vector<int>> applied_by_key() const {
    std::lock_guard lock(mu_);
    return applied_;
  }
  int same_key_in_one_batch() const {
    std::lock_guard lock(mu_);
    return same_key_in_one_batch_;
  }
  int out_of_sequence() const {
    std::lock_guard lock(mu_);
    return out_of_sequence_;
  }
  size_t max_batch() const {
    std::lock_guard lock(mu_);
    return max_batch_;
  }
  int batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }

 private:
  const bool fail_some_;
  mutable std::mutex mu_;
  std::set<std::string> applied_ids_;
  std::map<std::string, std::vector<int>> applied_;
  int same_key_in_one_batch_ = 0;
  int out_of_sequence_ = 0;
  size_t max_batch_ = 0;
  int batches_ = 0;
  RecordingService http_;  // last: its threads stop before the members above go
};

int Inversions(const std::vector<int>& events) {
  int n = 0, highest = -1;
  for (int e : events) {
    if (e < highest) ++n;
    highest = std::max(highest, e);
  }
  return n;
}

TEST_F(ConsumeBatchTest, ABatchNeverHoldsTwoMessagesOfOneOrderingKeyAndKeepsEachKeysOrder) {
  constexpr int kKeys = 5;
  constexpr int kEvents = 8;
  for (int e = 0; e < kEvents; ++e) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "acct-" + std::to_string(k);
      ASSERT_EQ(js_.Publish("orders." + key, std::to_string(e), key + "-" + std::to_string(e),
                            {{"Idem-Ordering-Key", key}}),
                "");
    }
  }
  KeyedBatchService service(/*fail_some=*/false);
  auto consume = StartConsume(service.Url(), {"--batch-size", "16"});
  ASSERT_TRUE(WaitFor([&] { return service.applied() == kKeys * kEvents && Settled(); }, 10s))
      << consume->Output();
  EXPECT_EQ(service.same_key_in_one_batch(), 0);
  EXPECT_EQ(service.out_of_sequence(), 0) << "each batch lists its items in stream order";
  EXPECT_GT(service.max_batch(), 1u) << "different keys do share a batch";
  for (const auto& [key, events] : service.applied_by_key()) {
    EXPECT_EQ(events.size(), static_cast<size_t>(kEvents)) << key;
    EXPECT_EQ(Inversions(events), 0) << key;
  }
}

TEST_F(ConsumeBatchTest, HundredKeysInOrderThroughRetriesAndTwoKillsEachEventAppliedOnce) {
  constexpr int kKeys = 100;
  constexpr int kEvents = 50;
  constexpr size_t kTotal = kKeys * kEvents;
  KeyedBatchService service(/*fail_some=*/true);
  const std::vector<std::string> flags = {"--batch-size", "16", "--ack-wait", "2s",
                                          "--nak-delay", "20ms", "--max-nak-delay", "200ms"};
  for (int e = 0; e < kEvents; ++e) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "acct-" + std::to_string(k);
      ASSERT_EQ(js_.Publish("orders." + key, std::to_string(e), key + "-ev-" + std::to_string(e),
                            {{"Idem-Ordering-Key", key}}),
                "");
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
  EXPECT_EQ(service.same_key_in_one_batch(), 0);
  const auto applied = service.applied_by_key();
  ASSERT_EQ(applied.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, events] : applied) {
    ASSERT_EQ(events.size(), static_cast<size_t>(kEvents)) << key;
    EXPECT_EQ(Inversions(events), 0) << key;
  }
  EXPECT_GT(service.max_batch(), 1u);
  std::cout << service.batches() << " batches for " << kTotal << " events, the largest "
            << service.max_batch() << "\n";
}

}  // namespace
}  // namespace idem::testing
