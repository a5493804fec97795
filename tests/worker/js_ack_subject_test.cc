// ParseJsAckSubject: JsMessage::Read reads a message's JetStream metadata from its reply subject
// itself; it must read what nats.c's natsMsg_GetMetaData reads, in both forms of the subject.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <utility>

#include "servers/nats_server.h"
#include "util/js_client.h"
#include "worker/jetstream.h"

namespace idem::worker {
namespace {

TEST(JsAckSubjectTest, ReadsTheFormWithoutADomain) {
  const auto m = ParseJsAckSubject("$JS.ACK.ORDERS.C1.3.1042.17.1700000000000000000.5");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->stream, "ORDERS");
  EXPECT_EQ(m->stream_sequence, 1042u);
  EXPECT_EQ(m->delivered, 3u);
}

TEST(JsAckSubjectTest, ReadsTheFormWithADomainAndAnAccountHash) {
  const auto m = ParseJsAckSubject("$JS.ACK.hub.ACCHASH.ORDERS.C1.2.77.9.1700000000000000000.0");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->stream, "ORDERS");
  EXPECT_EQ(m->stream_sequence, 77u);
  EXPECT_EQ(m->delivered, 2u);
  // A token after the pending count (the server's random one) changes nothing.
  const auto t =
      ParseJsAckSubject("$JS.ACK._.ACCHASH.ORDERS.C1.1.78.10.1700000000000000000.0.abc");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->stream, "ORDERS");
  EXPECT_EQ(t->stream_sequence, 78u);
  EXPECT_EQ(t->delivered, 1u);
}

TEST(JsAckSubjectTest, LeavesAnythingElseToNatsC) {
  for (const char* reply : {"", "_INBOX.abc", "$JS.ACK.S.C.1.2.3.4",           // 8 tokens
                            "$JS.ACK.S.C.1.2.3.4.5.6",                          // 10 tokens
                            "$JS.ACK.S.C.x.2.3.4.5", "$JS.ACK.S.C.1.-2.3.4.5",  // not numbers
                            "$JS.ACK.S.C.1..3.4.5", "$JS.ACK..C.1.2.3.4.5",     // empty tokens
                            "$JS.NAK.S.C.1.2.3.4.5"}) {
    EXPECT_FALSE(ParseJsAckSubject(reply).has_value()) << reply;
  }
}

// Messages a real server delivered (first deliveries and redeliveries): the subject parses, to
// what natsMsg_GetMetaData reads from it.
TEST(JsAckSubjectTest, AgreesWithNatsCOnFetchedMessages) {
  servers::NatsServer server;
  ASSERT_EQ(server.Start(), "");
  auto conn = NatsConnection::Connect("nats://127.0.0.1:" + std::to_string(server.port()),
                                      "ack subject test");
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_EQ(idem::testing::AddStream((*conn)->js(), "ORDERS", {"orders.>"}), "");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(js_Publish(nullptr, (*conn)->js(), "orders.x", "b", 1, nullptr, nullptr), NATS_OK);
  }
  natsSubscription* sub = nullptr;
  ASSERT_EQ(js_PullSubscribe(&sub, (*conn)->js(), "orders.>", "C", nullptr, nullptr, nullptr),
            NATS_OK);
  // A fetch may return fewer messages than asked for (the server answers with what it has, and a
  // nak'ed message comes back a moment later), so fetch until every message was seen twice: its
  // first delivery is nak'ed, its second acked.
  std::set<std::pair<uint64_t, uint64_t>> seen;  // (stream sequence, delivery count)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (seen.size() < 6 && std::chrono::steady_clock::now() < deadline) {
    natsMsgList list{};
    const natsStatus s = natsSubscription_Fetch(&list, sub, 3, 500, nullptr);
    ASSERT_TRUE(s == NATS_OK || s == NATS_TIMEOUT) << natsStatus_GetText(s);
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* msg = list.Msgs[i];
      jsMsgMetaData* meta = nullptr;
      ASSERT_EQ(natsMsg_GetMetaData(&meta, msg), NATS_OK);
      const auto parsed = ParseJsAckSubject(natsMsg_GetReply(msg));
      ASSERT_TRUE(parsed.has_value()) << natsMsg_GetReply(msg);
      EXPECT_EQ(parsed->stream, meta->Stream);
      EXPECT_EQ(parsed->stream_sequence, meta->Sequence.Stream);
      EXPECT_EQ(parsed->delivered, meta->NumDelivered);
      seen.emplace(parsed->stream_sequence, parsed->delivered);
      const bool first = meta->NumDelivered == 1;
      jsMsgMetaData_Destroy(meta);
      EXPECT_EQ(first ? natsMsg_Nak(msg, nullptr) : natsMsg_Ack(msg, nullptr), NATS_OK);
    }
    natsMsgList_Destroy(&list);
  }
  natsSubscription_Destroy(sub);
  const std::set<std::pair<uint64_t, uint64_t>> expected{{1, 1}, {1, 2}, {2, 1},
                                                          {2, 2}, {3, 1}, {3, 2}};
  EXPECT_EQ(seen, expected);
}

}  // namespace
}  // namespace idem::worker
