#include "gateway/request_checks.h"

#include <gtest/gtest.h>

namespace idem::gateway {
namespace {

// A request header with `fields`, and "Host: gw" first unless `with_host` is false.
http::request_header<gateway::Fields> Header(std::string_view target, std::initializer_list<std::pair<const char*, const char*>> fields,
                              unsigned version = 11, bool with_host = true) {
  http::request_header<gateway::Fields> h;
  h.method(http::verb::post);
  h.target(target);
  h.version(version);
  if (with_host) h.insert("Host", "gw");
  for (const auto& [name, value] : fields) h.insert(name, value);
  return h;
}

std::optional<http::status> Verdict(const http::request_header<gateway::Fields>& h) {
  auto r = CheckRequestHeader(h, "Authorization");
  if (!r) return std::nullopt;
  return ProblemStatus(*AnswerFor(r->cause).problem);
}

TEST(RequestChecksTest, TransferEncodingMustEndInOneChunked) {
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", "chunked"}})), std::nullopt);
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", " Chunked , "}})), std::nullopt);
  for (const char* bad : {"chunked, identity", "identity", "xchunked", "", "chunked;a=b",
                          "chunked, chunked", "gzip", "chunk ed", "\"chunked\""}) {
    EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", bad}})), http::status::bad_request)
        << bad;
  }
  for (const char* unsupported : {"gzip, chunked", "deflate,chunked", "x-custom, chunked"}) {
    EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", unsupported}})),
              http::status::not_implemented)
        << unsupported;
  }
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}})),
            http::status::not_implemented);
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", "chunked"}}, 10)),
            http::status::bad_request);
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}})),
            http::status::bad_request);
}

TEST(RequestChecksTest, LookalikeFramingNamesTargetsExpectAndIdentityHeaders) {
  EXPECT_EQ(Verdict(Header("/p", {{"Transfer_Encoding", "chunked"}})), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("/p", {{"content_LENGTH", "3"}})), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("/p", {{"X_Other", "1"}})), std::nullopt);
  EXPECT_EQ(Verdict(Header("/p#frag", {})), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("p", {})), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("HTTP://h/p", {})), std::nullopt);
  EXPECT_EQ(Verdict(Header("/p", {{"Expect", "100-Continue"}})), std::nullopt);
  EXPECT_EQ(Verdict(Header("/p", {{"Expect", "100-continue, other"}})),
            http::status::expectation_failed);
  EXPECT_EQ(Verdict(Header("/p", {{"Expect", "other"}}, 10)), std::nullopt)
      << "HTTP/1.0 ignores Expect";
  auto two_keys = CheckRequestHeader(
      Header("/p", {{"Idempotency-Key", "a"}, {"idempotency-key", "a"}}), "Authorization");
  ASSERT_TRUE(two_keys);
  EXPECT_EQ(two_keys->cause, Cause::kSeveralKeys);
  EXPECT_EQ(AnswerFor(two_keys->cause).problem, Problem::kInvalidKey);
  EXPECT_EQ(AnswerFor(two_keys->cause).outcome, Outcome::kInvalidKey);
  EXPECT_EQ(Verdict(Header("/p", {{"Authorization", "a"}, {"authorization", "b"}})),
            http::status::bad_request);
  // The admin listener has no identity checks.
  EXPECT_FALSE(CheckRequestHeader(Header("/p", {{"Authorization", "a"}, {"Authorization", "b"}}), ""));
}

TEST(RequestChecksTest, OneValidHostIsRequiredOnHttp11AndAtMostOneOnHttp10) {
  EXPECT_EQ(Verdict(Header("/p", {}, 11, false)), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("/p", {}, 10, false)), std::nullopt) << "HTTP/1.0 may omit Host";
  EXPECT_EQ(Verdict(Header("/p", {{"Host", "other"}})), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("/p", {{"host", "gw"}}, 10)), http::status::bad_request);
  EXPECT_EQ(Verdict(Header("http://h/p", {}, 11, false)), http::status::bad_request)
      << "an absolute-form target does not stand in for Host";
  for (const char* good : {"gw", "gw:8080", "", "127.0.0.1:80", "[::1]", "[::1]:8080",
                           "a-b.example.com", "x%41y", "gw:", "a_b~c!d$e&f'g(h)i*j+k,l;m=n"}) {
    EXPECT_EQ(Verdict(Header("/p", {{"Host", good}}, 11, false)), std::nullopt) << good;
  }
  for (const char* bad : {"a b", "gw:80x", "gw/p", "user@gw", "[::1", "[::1]x", "[]", "gw:8:9",
                          "x%4", "x%zz", "a\\b", "a\"b", "a<b", "a{b", "a^b", "a`b", "a|b",
                          "a\x80" "b"}) {
    EXPECT_EQ(Verdict(Header("/p", {{"Host", bad}}, 11, false)), http::status::bad_request) << bad;
  }
  // The admin listener checks Host too.
  EXPECT_TRUE(CheckRequestHeader(Header("/p", {}, 11, false), ""));
}

// One pass over the fields gathers what every check needs; the checks still answer in their
// order, each naming what it found first.
TEST(RequestChecksTest, TheFirstFailingCheckAnswersAndNamesWhatItFound) {
  const auto detail = [](const http::request_header<gateway::Fields>& h) {
    auto r = CheckRequestHeader(h, "Authorization");
    return r ? r->detail : std::string("accepted");
  };
  EXPECT_EQ(detail(Header("/p", {{"Host", "b"}, {"X_Y", "1"}, {"Content_Length", "3"},
                                 {"Transfer_Encoding", "chunked"}})),
            "header 'Content_Length' reads as Content-Length to some servers; it is not "
            "accepted");
  EXPECT_EQ(detail(Header("/p", {{"Host", "b"}, {"Expect", "x"}})),
            "the request has 2 Host headers; send exactly one (RFC 9112 3.2)");
  EXPECT_EQ(detail(Header("/p", {{"Expect", "100-continue"},
                                 {"Expect", "x, y"},
                                 {"Idempotency-Key", "a"},
                                 {"Idempotency-Key", "b"}})),
            "the gateway meets only Expect: 100-continue, not 'x'");
  EXPECT_EQ(detail(Header("/p", {{"IDEMPOTENCY-KEY", "a"},
                                 {"Authorization", "t"},
                                 {"Idempotency-Key", "b"},
                                 {"Authorization", "u"},
                                 {"idempotency-key", "c"}})),
            "the request has 3 Idempotency-Key headers; send exactly one");
  EXPECT_EQ(detail(Header("/p", {{"Authorization", "t"}, {"AUTHORIZATION", "u"}})),
            "the request has 2 Authorization headers; keys are scoped by one tenant, so send "
            "exactly one");
  EXPECT_EQ(detail(Header("/p", {{"Idempotency-Key", "a"}, {"Authorization", "t"}})),
            "accepted");
}

TEST(RequestChecksTest, ObsoleteLineFoldingIsFoundInTheRawBytes) {
  EXPECT_FALSE(CheckHeaderBytes("POST / HTTP/1.1\r\nA: b\r\n\r\n body\r\n starts"));
  EXPECT_TRUE(CheckHeaderBytes("POST / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"));
  EXPECT_TRUE(CheckHeaderBytes("POST / HTTP/1.1\r\nA: b\r\n\tc"));  // not yet complete
  EXPECT_FALSE(CheckHeaderBytes("POST / HTTP/1.1\r\nA: b\r\n"));
}

TEST(RequestChecksTest, BareLfInChunkFramingIsRefused) {
  EXPECT_FALSE(CheckChunkFramingBytes(""));
  EXPECT_FALSE(CheckChunkFramingBytes("5;a=b"));
  EXPECT_FALSE(CheckChunkFramingBytes("\r\n5\r"));
  EXPECT_FALSE(CheckChunkFramingBytes("0\r\nX-T: 1\r\n"));
  EXPECT_TRUE(CheckChunkFramingBytes("2\nhi\n0\n\n"));
  EXPECT_TRUE(CheckChunkFramingBytes("\n"));
  EXPECT_TRUE(CheckChunkFramingBytes("\r\n0\n"));
  EXPECT_TRUE(CheckChunkFramingBytes("0\r\n\n"));
  EXPECT_TRUE(CheckChunkFramingBytes("0\r\nX-T: 1\n"));
}

TEST(RequestChecksTest, AbsoluteFormBecomesOriginForm) {
  EXPECT_EQ(OriginFormTarget("http://h:80/a/b?x=1"), "/a/b?x=1");
  EXPECT_EQ(OriginFormTarget("HTTPS://h"), "/");
  EXPECT_EQ(OriginFormTarget("http://h?q"), "/?q");
  EXPECT_EQ(OriginFormTarget("/already"), "/already");
  EXPECT_EQ(OriginFormTarget("*"), "*");
}

TEST(RequestChecksTest, ExpectsContinueOnlyOnHttp11) {
  EXPECT_TRUE(ExpectsContinue(Header("/p", {{"Expect", "100-continue"}})));
  EXPECT_FALSE(ExpectsContinue(Header("/p", {{"Expect", "100-continue"}}, 10)));
  EXPECT_FALSE(ExpectsContinue(Header("/p", {})));
}

}  // namespace
}  // namespace idem::gateway
