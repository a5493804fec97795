// JsMessage::Detach and Detached: how `idem consume` frees settled messages together, off its
// event loop. Under ASan, each nats.c message is freed exactly once and none leaks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "servers/nats_server.h"
#include "util/js_client.h"
#include "worker/jetstream.h"

namespace idem::worker {
namespace {

// Messages fetched from a throwaway nats-server, as `idem consume` fetches them (nats.c reads
// JetStream metadata only from a message its subscription received).
class ConsumeMessageFreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(server_.Start(), "");
    auto conn = NatsConnection::Connect("nats://127.0.0.1:" + std::to_string(server_.port()),
                                        "consume message free test");
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    conn_ = std::move(*conn);
    ASSERT_EQ(idem::testing::AddStream(conn_->js(), "S", {"S.>"}), "");
  }

  // `bodies` published to S, then fetched.
  std::vector<std::shared_ptr<JsMessage>> Fetched(const std::vector<std::string>& bodies) {
    for (const std::string& b : bodies) {
      EXPECT_EQ(js_Publish(nullptr, conn_->js(), "S.x", b.data(), static_cast<int>(b.size()),
                           nullptr, nullptr),
                NATS_OK);
    }
    auto sub = PullSubscription::Bind(*conn_, {.stream = "S", .consumer = "C"});
    EXPECT_TRUE(sub.ok()) << sub.status().ToString();
    std::vector<std::shared_ptr<JsMessage>> out;
    if (!sub.ok()) return out;
    while (out.size() < bodies.size()) {
      auto batch = (*sub)->Fetch(static_cast<int>(bodies.size() - out.size()), Duration(2000));
      EXPECT_TRUE(batch.ok()) << batch.status().ToString();
      if (!batch.ok() || batch->empty()) break;
      for (JsMessage& m : *batch) out.push_back(std::make_shared<JsMessage>(std::move(m)));
    }
    subs_.push_back(std::move(*sub));
    return out;
  }

  servers::NatsServer server_;
  std::unique_ptr<NatsConnection> conn_;
  std::vector<std::unique_ptr<PullSubscription>> subs_;
};

TEST_F(ConsumeMessageFreeTest, DetachTakesOnlyTheMessagesNoOneElseHoldsAndFreesEachOnce) {
  std::vector<std::shared_ptr<JsMessage>> settled = Fetched({"one", "two", "three"});
  ASSERT_EQ(settled.size(), 3u);
  const std::shared_ptr<JsMessage> still_held = settled[1];

  JsMessage::Detached detached = JsMessage::Detach(settled);
  EXPECT_TRUE(settled.empty());
  EXPECT_EQ(detached.size(), 2u);
  // Released, not taken apart: whoever still holds it reads it whole.
  EXPECT_EQ(still_held->data(), "two");
  EXPECT_EQ(still_held->stream_sequence(), 2u);

  JsMessage::Detached moved = std::move(detached);
  EXPECT_EQ(detached.size(), 0u);  // NOLINT(bugprone-use-after-move): emptied by the move
  moved.Free();
  EXPECT_EQ(moved.size(), 0u);
  moved.Free();  // nothing twice
}

TEST_F(ConsumeMessageFreeTest, DetachedFreesWhatItStillHoldsWhenDestroyed) {
  std::vector<std::shared_ptr<JsMessage>> settled = Fetched({"seven"});
  ASSERT_EQ(settled.size(), 1u);
  { JsMessage::Detached detached = JsMessage::Detach(settled); }
  EXPECT_TRUE(settled.empty());
}

}  // namespace
}  // namespace idem::worker
