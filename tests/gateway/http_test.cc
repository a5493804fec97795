#include "gateway/http.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace idem::gateway {
namespace {

TEST(NormalizePathForRoutingTest, LeavesPlainPathsAlone) {
  EXPECT_EQ(NormalizePathForRouting("/v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/payments/"), "/v1/payments/");
  EXPECT_EQ(NormalizePathForRouting("/"), "/");
  EXPECT_EQ(NormalizePathForRouting(""), "/");
}

TEST(NormalizePathForRoutingTest, CannotBeBypassedByEncodingOrDotSegments) {
  EXPECT_EQ(NormalizePathForRouting("/v1/%70ayments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/%70AYMENTS"), "/v1/pAYMENTS");
  EXPECT_EQ(NormalizePathForRouting("//v1///payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/./payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/x/../v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/../../v1/payments"), "/v1/payments");
  EXPECT_EQ(NormalizePathForRouting("/v1/%2e%2e/v1/payments"), "/v1/payments");
}

TEST(NormalizePathForRoutingTest, KeepsEscapesOfReservedCharacters) {
  // %2F is a slash inside a segment, not a separator; a server may treat it either way, so it
  // is kept as sent rather than guessed.
  EXPECT_EQ(NormalizePathForRouting("/a%2Fb"), "/a%2Fb");
  EXPECT_EQ(NormalizePathForRouting("/a%20b"), "/a%20b");
  EXPECT_EQ(NormalizePathForRouting("/a%zzb"), "/a%zzb");
  EXPECT_EQ(NormalizePathForRouting("/a%4"), "/a%4");
}

TEST(QueryParamTest, DecodesNamesAndValuesInQueryForm) {
  EXPECT_EQ(QueryParam("key=k1&tenant=Bearer%20a%2Bb+c", "tenant"), "Bearer a+b c");
  EXPECT_EQ(QueryParam("k%65y=v&key=w", "key"), "v") << "the name is decoded too";
  EXPECT_EQ(QueryParam("key=100%", "key"), "100%");
  EXPECT_EQ(QueryParam("key", "key"), "");
  EXPECT_EQ(QueryParam("other=1", "key"), "");
}

TEST(ParseListenAddressTest, TakesAnIpAndAPortFrom0To65535) {
  auto any = ParseListenAddress(":8080");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->address().to_string(), "0.0.0.0");
  EXPECT_EQ(any->port(), 8080);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status().ToString();
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_EQ(v6->port(), 0);
  EXPECT_EQ(ParseListenAddress("127.0.0.1:65535")->port(), 65535);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                          "127.0.0.1:80x", "127.0.0.1: 80", "127.0.0.1:+80", "localhost:80",
                          "127.0.0.1:99999999999999999999"}) {
    auto r = ParseListenAddress(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
    }
  }
  EXPECT_NE(ParseListenAddress("127.0.0.1:80x").status().message().find("port must be 0 to 65535"),
            std::string::npos);
}

// The header fields of `m` as (name, value) pairs, sorted: what a message says, whatever the
// order of its fields.
template <bool kIsRequest>
std::vector<std::pair<std::string, std::string>> FieldSet(
    const http::message<kIsRequest, http::string_body, Fields>& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : m) out.emplace_back(std::string(f.name_string()), std::string(f.value()));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PreparePayloadTest, SaysWhatPreparePayloadSaysAndSkipsOnlyWhatItWouldRewriteUnchanged) {
  struct Case {
    const char* what;
    std::vector<std::pair<std::string, std::string>> fields;
    std::string body;
  };
  const std::vector<Case> cases = {
      {"the right length", {{"Content-Length", "5"}, {"X-A", "1"}}, "hello"},
      {"a wrong length", {{"Content-Length", "4"}, {"X-A", "1"}}, "hello"},
      {"a padded length", {{"Content-Length", "05"}}, "hello"},
      {"two lengths", {{"Content-Length", "5"}, {"Content-Length", "5"}}, "hello"},
      {"no length", {{"X-A", "1"}}, "hello"},
      {"chunked", {{"Transfer-Encoding", "chunked"}, {"Content-Length", "5"}}, "hello"},
      {"empty, length 0", {{"Content-Length", "0"}}, ""},
      {"empty, no length", {}, ""},
  };
  // `message` given the case's fields and body, then PreparePayload'd and prepare_payload'd.
  const auto expect_same = [](auto message, const Case& c) {
    for (const auto& [name, value] : c.fields) message.insert(name, value);
    message.body() = c.body;
    auto expected = message;
    expected.prepare_payload();
    PreparePayload(message);
    EXPECT_EQ(FieldSet(message), FieldSet(expected));
  };
  for (const Case& c : cases) {
    for (http::verb method : {http::verb::post, http::verb::get}) {
      SCOPED_TRACE(std::string(c.what) + ", " + std::string(http::to_string(method)));
      expect_same(Request{method, "/", 11}, c);
    }
    SCOPED_TRACE(std::string(c.what) + ", response");
    expect_same(Response{http::status::ok, 11}, c);
  }
  // Skipped, the right length keeps its place (prepare_payload would move it to the end).
  Response kept{http::status::ok, 11};
  kept.insert("Content-Length", "5");
  kept.insert("X-A", "1");
  kept.body() = "hello";
  PreparePayload(kept);
  EXPECT_EQ(kept.begin()->name(), http::field::content_length);
}

}  // namespace
}  // namespace idem::gateway
