// JetStreamPublisher against a real nats-server -js: the PubAck window and the wake-ups. An
// answer wakes the sending thread only when it waits for a window slot, and Wait only when
// the answer completes its batch; with a window far smaller than the batches, both waits are
// exercised thousands of times, with PubAcks arriving on nats.c's thread meanwhile.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "outbox/emit_test_util.h"
#include "outbox/jetstream_publisher.h"
#include "util/free_port.h"
#include "util/js_client.h"
#include "util/nats_server.h"

namespace idem {
namespace {

TEST(JetStreamPublisherTest, SmallWindowPipelinedBatchesAreAllAckedOnce) {
  testing::NatsServer nats;
  ASSERT_EQ(nats.Start(), "");
  testing::JsClient js;
  ASSERT_EQ(js.Connect(nats.Url()), "");
  ASSERT_EQ(testing::AddStream(js.js(), "PUB", {"pub.>"}, std::chrono::seconds(60)), "");
  // A long ack timeout: a missed wake-up shows as a wait of that long (every answer arrives
  // well before it), which the elapsed-time check below catches.
  constexpr auto kAckTimeout = std::chrono::seconds(30);
  auto publisher = outbox::JetStreamPublisher::Connect(nats.Url(), kAckTimeout);
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();

  constexpr int kBatches = 6, kPerBatch = 500, kWindow = 16;
  std::vector<outbox::JetStreamPublisher::BatchId> ids;
  std::vector<std::vector<outbox::PublishResult>> results;
  const auto start = std::chrono::steady_clock::now();
  for (int b = 0; b < kBatches; ++b) {
    std::vector<outbox::OutMessage> batch;
    for (int i = 0; i < kPerBatch; ++i) {
      const std::string id = "m-" + std::to_string(b) + "-" + std::to_string(i);
      batch.push_back({id, "pub.x", "payload " + id, {{"X-Batch", std::to_string(b)}}});
    }
    // Two batches in flight at a time, as the relay keeps them.
    ids.push_back((*publisher)->Send(batch, kWindow));
    if (ids.size() >= 2) results.push_back((*publisher)->Wait(ids[ids.size() - 2]));
  }
  results.push_back((*publisher)->Wait(ids.back()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, kAckTimeout / 2) << "a wake-up was missed";

  ASSERT_EQ(results.size(), static_cast<size_t>(kBatches));
  std::set<uint64_t> sequences;
  for (const auto& batch : results) {
    ASSERT_EQ(batch.size(), static_cast<size_t>(kPerBatch));
    for (const auto& r : batch) {
      ASSERT_EQ(r.kind, outbox::PublishResult::Kind::kAcked) << r.error;
      EXPECT_FALSE(r.duplicate);
      sequences.insert(r.stream_seq);
    }
  }
  EXPECT_EQ(sequences.size(), static_cast<size_t>(kBatches * kPerBatch));
  EXPECT_EQ(*sequences.begin(), 1u);
  EXPECT_EQ(*sequences.rbegin(), static_cast<uint64_t>(kBatches * kPerBatch));
  EXPECT_EQ(js.StreamMessages("PUB"), static_cast<uint64_t>(kBatches * kPerBatch));
}

// --nats takes every node of a cluster, comma-separated: the list is nats.c's server pool, so
// the publisher connects although the first node is down (nats.c took such a list as one
// malformed URL and never connected).
TEST(JetStreamPublisherTest, ConnectsThroughAListWhoseFirstNodeIsDown) {
  testing::NatsServer nats;
  ASSERT_EQ(nats.Start(), "");
  testing::JsClient js;
  ASSERT_EQ(js.Connect(nats.Url()), "");
  ASSERT_EQ(testing::AddStream(js.js(), "LIST", {"list.>"}, std::chrono::seconds(60)), "");
  const std::string down = "nats://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  auto publisher =
      outbox::JetStreamPublisher::Connect(down + ", " + nats.Url(), std::chrono::seconds(5));
  ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
  auto facts = (*publisher)->ReadStream("LIST");
  ASSERT_TRUE(facts.ok()) << facts.status().ToString();
  const auto results = (*publisher)->PublishBatch({{"id-1", "list.a", "payload", {}}}, 16);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].kind, outbox::PublishResult::Kind::kAcked) << results[0].error;
}

// nats.c calls the ack handler on its own thread, and the handler still runs after the answer
// it records wakes the publisher's Wait: destroying the publisher right then must wait for it
// (TSan saw the handler signal a condition variable being destroyed). Many rounds, to hit the
// window.
TEST(JetStreamPublisherTest, APublisherDestroyedRightAfterItsLastAnswerOutlivesItsAckHandler) {
  testing::NatsServer nats;
  ASSERT_EQ(nats.Start(), "");
  testing::JsClient js;
  ASSERT_EQ(js.Connect(nats.Url()), "");
  ASSERT_EQ(testing::AddStream(js.js(), "GONE", {"gone.>"}, std::chrono::seconds(60)), "");
  for (int round = 0; round < 100; ++round) {
    auto publisher = outbox::JetStreamPublisher::Connect(nats.Url(), std::chrono::seconds(5));
    ASSERT_TRUE(publisher.ok()) << publisher.status().ToString();
    const auto results = (*publisher)->PublishBatch(
        {{"gone-" + std::to_string(round), "gone.a", "payload", {}}}, 16);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_EQ(results[0].kind, outbox::PublishResult::Kind::kAcked) << results[0].error;
  }
  EXPECT_EQ(js.StreamMessages("GONE"), 100u);
}

}  // namespace
}  // namespace idem
