// The batch envelope of `idem consume --batch-size`: what a service receives, and how its
// per-item answer is read, including every answer that must fail safe.
#include "worker/batch_envelope.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace idem::worker {
namespace {

using Json = nlohmann::json;
using Outcome = ItemResult::Outcome;

BatchItem Item(std::string_view key, std::string_view body) {
  BatchItem item;
  item.idempotency_key = key;
  item.subject = "orders.created";
  item.stream = "ORDERS";
  item.stream_sequence = 7;
  item.delivery_count = 2;
  item.body = body;
  return item;
}

TEST(BatchEnvelopeTest, EncodesEveryFieldOfEachMessageInOrder) {
  BatchItem a = Item("order-1", "{\"n\":1}");
  a.ordering_key = "acct-7";
  a.headers = {{"Content-Type", "application/json"}, {"X-Trace", "abc"}, {"X-Trace", "def"}};
  BatchItem b = Item("ORDERS:8", "plain text, caf\xC3\xA9");
  b.stream_sequence = 8;
  b.delivery_count = 1;
  const Json doc = Json::parse(EncodeBatch({a, b}));
  ASSERT_TRUE(doc["messages"].is_array());
  ASSERT_EQ(doc["messages"].size(), 2u);
  const Json& m = doc["messages"][0];
  EXPECT_EQ(m["idempotency_key"], "order-1");
  EXPECT_EQ(m["subject"], "orders.created");
  EXPECT_EQ(m["stream"], "ORDERS");
  EXPECT_EQ(m["stream_sequence"], 7);
  EXPECT_EQ(m["delivery_count"], 2);
  EXPECT_EQ(m["ordering_key"], "acct-7");
  EXPECT_EQ(m["headers"], (Json{{"Content-Type", "application/json"}, {"X-Trace", "abc, def"}}));
  EXPECT_EQ(m["body"], "{\"n\":1}");
  EXPECT_FALSE(m.contains("body_base64"));
  const Json& n = doc["messages"][1];
  EXPECT_EQ(n["idempotency_key"], "ORDERS:8");
  EXPECT_EQ(n["stream_sequence"], 8);
  EXPECT_FALSE(n.contains("ordering_key")) << "only when the message has one";
  EXPECT_EQ(n["headers"], Json::object());
  EXPECT_EQ(n["body"], "plain text, caf\xC3\xA9");
}

TEST(BatchEnvelopeTest, ABodyThatIsNotUtf8GoesAsBase64) {
  const std::string binary("\x00\xFF\xFE\x80 ok", 7);
  const Json doc = Json::parse(EncodeBatch({Item("k", binary), Item("e", "")}));
  const Json& m = doc["messages"][0];
  EXPECT_FALSE(m.contains("body"));
  EXPECT_EQ(m["body_base64"], "AP/+gCBvaw==");
  EXPECT_EQ(doc["messages"][1]["body"], "") << "an empty body is valid UTF-8";
  // Overlong forms and surrogates are not UTF-8 either.
  for (std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82"}) {
    EXPECT_TRUE(Json::parse(EncodeBatch({Item("k", bad)}))["messages"][0].contains("body_base64"))
        << bad.size();
  }
}

TEST(BatchEnvelopeTest, QuotesBackslashesAndControlCharactersSurviveAndForeignBytesAreReplaced) {
  const std::string tricky = std::string("say \"hi\"\\ \n\r\t\x01\x1f end\x00", 20) + "\xE2\x82\xAC";
  BatchItem a = Item("k\"1", tricky);
  a.subject = "orders.\"q\"";
  a.headers = {{"X-Odd", "tab\there"}, {"X-Bad", "caf\xE9"}};  // Latin-1, not UTF-8
  const Json doc = Json::parse(EncodeBatch({a}));
  const Json& m = doc["messages"][0];
  EXPECT_EQ(m["idempotency_key"], "k\"1");
  EXPECT_EQ(m["subject"], "orders.\"q\"");
  EXPECT_EQ(m["body"], tricky);
  EXPECT_EQ(m["headers"]["X-Odd"], "tab\there");
  EXPECT_EQ(m["headers"]["X-Bad"], "caf\xEF\xBF\xBD") << "U+FFFD for what is not UTF-8";
  EXPECT_EQ(EncodeBatch({}), "{\"messages\":[]}");
}

TEST(BatchEnvelopeTest, ReadsOneResultPerKeyInTheBatchsOrder) {
  const auto r = DecodeBatchResults(
      R"({"results":[
           {"idempotency_key":"c","outcome":"reject","error":"no such account"},
           {"idempotency_key":"a","outcome":"ack","extra":1},
           {"idempotency_key":"b","outcome":"retry","error":"db busy","retry_after":2.5}]})",
      {"a", "b", "c", "d"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].outcome, Outcome::kAck);
  EXPECT_EQ((*r)[0].error, "");
  EXPECT_EQ((*r)[1].outcome, Outcome::kRetry);
  EXPECT_EQ((*r)[1].error, "db busy");
  EXPECT_EQ((*r)[1].retry_after, Duration(2500));
  EXPECT_EQ((*r)[2].outcome, Outcome::kReject);
  EXPECT_EQ((*r)[2].error, "no such account");
  EXPECT_EQ((*r)[3].outcome, Outcome::kMissing) << "left out: retried";
  EXPECT_EQ((*r)[3].retry_after, std::nullopt);
}

TEST(BatchEnvelopeTest, AnUnusableRetryAfterIsIgnoredAndANonStringErrorIsKeptAsJson) {
  const auto r = DecodeBatchResults(
      R"({"results":[{"idempotency_key":"a","outcome":"retry","retry_after":-1,"error":{"code":7}},
                     {"idempotency_key":"b","outcome":"retry","retry_after":"soon"}]})",
      {"a", "b"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].retry_after, std::nullopt);
  EXPECT_EQ((*r)[0].error, "{\"code\":7}");
  EXPECT_EQ((*r)[1].retry_after, std::nullopt);
}

TEST(BatchEnvelopeTest, TheSameAnswerTwiceIsFineButTwoDifferentOnesAreNot) {
  const auto same = DecodeBatchResults(
      R"({"results":[{"idempotency_key":"a","outcome":"ack"},{"idempotency_key":"a","outcome":"ack"}]})",
      {"a"});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ((*same)[0].outcome, Outcome::kAck);
  const auto different = DecodeBatchResults(
      R"({"results":[{"idempotency_key":"a","outcome":"ack"},{"idempotency_key":"a","outcome":"reject"}]})",
      {"a"});
  ASSERT_FALSE(different.ok());
  EXPECT_EQ(different.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(different.status().message().find("listed twice"), std::string::npos);
}

TEST(BatchEnvelopeTest, AResponseThatCannotBeUsedAsAWholeIsAnError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not JSON"},
      {"ok", "not JSON"},
      {R"({"results":[{"idempotency_key":"a","outcome":"ack"})", "not JSON"},  // truncated
      {"[]", "no \"results\" array"},
      {R"({"result":[]})", "no \"results\" array"},
      {R"({"results":{"a":"ack"}})", "no \"results\" array"},
      {R"({"results":["a"]})", "results[0] is not an object"},
      {R"({"results":[{"outcome":"ack"}]})", "no string \"idempotency_key\""},
      {R"({"results":[{"idempotency_key":1,"outcome":"ack"}]})", "no string \"idempotency_key\""},
      {R"({"results":[{"idempotency_key":"zz","outcome":"ack"}]})", "not in the batch"},
      {R"({"results":[{"idempotency_key":"a"}]})", "has no \"outcome\""},
      {R"({"results":[{"idempotency_key":"a","outcome":"ACK"}]})", "has no \"outcome\""},
      {R"({"results":[{"idempotency_key":"a","outcome":"ok"}]})", "has no \"outcome\""},
  };
  for (const auto& [body, why] : cases) {
    const auto r = DecodeBatchResults(body, {"a", "b"});
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(why), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

TEST(BatchEnvelopeTest, AnEmptyResultsListLeavesEveryItemOut) {
  const auto r = DecodeBatchResults(R"({"results":[]})", {"a", "b"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kMissing);
  EXPECT_EQ((*r)[1].outcome, Outcome::kMissing);
}

}  // namespace
}  // namespace idem::worker
