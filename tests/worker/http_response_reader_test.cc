#include "worker/http_response_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace idem::worker {
namespace {

using State = HttpResponseReader::State;

// Feeds `wire` to a fresh reader in pieces of `step` bytes, as a connection would (unused bytes
// offered again with the next ones); returns the final state and the bytes left unused.
State ReadAll(HttpResponseReader& r, const std::string& wire, size_t step, bool eof,
              std::string* left = nullptr, size_t max_body = 1 << 20) {
  r.Reset(max_body);
  std::string pending;
  State s = State::kMore;
  for (size_t at = 0; at < wire.size() && s == State::kMore; at += step) {
    pending += wire.substr(at, step);
    size_t used = 0;
    s = r.Read(pending, &used);
    pending.erase(0, used);
  }
  if (s == State::kMore && eof) s = r.End();
  if (left) *left = pending;
  return s;
}

TEST(HttpResponseReaderTest, ContentLengthInAnyPieces) {
  const std::string wire =
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nContent-Length: 5\r\n\r\nbusy!";
  for (size_t step : {1, 2, 7, 1000}) {
    HttpResponseReader r;
    ASSERT_EQ(ReadAll(r, wire, step, false), State::kDone) << step;
    EXPECT_EQ(r.status(), 503);
    EXPECT_EQ(r.body(), "busy!");
    EXPECT_EQ(r.retry_after(), "7");
    EXPECT_TRUE(r.keep_alive());
  }
}

TEST(HttpResponseReaderTest, ReusedForTheNextResponse) {
  HttpResponseReader r;
  ASSERT_EQ(ReadAll(r, "HTTP/1.1 500 x\r\nRetry-After: 3\r\nContent-Length: 1\r\n\r\na", 100,
                    false),
            State::kDone);
  ASSERT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 100, false),
            State::kDone);
  EXPECT_EQ(r.status(), 200);
  EXPECT_EQ(r.body(), "");
  EXPECT_EQ(r.retry_after(), "");
}

TEST(HttpResponseReaderTest, ChunkedWithExtensionsAndTrailers) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4;x=y\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t step : {1, 3, 1000}) {
    HttpResponseReader r;
    ASSERT_EQ(ReadAll(r, wire, step, false), State::kDone) << step;
    EXPECT_EQ(r.body(), "Wikipedia");
    EXPECT_TRUE(r.keep_alive());
  }
}

TEST(HttpResponseReaderTest, InterimResponsesAreReadPast) {
  HttpResponseReader r;
  ASSERT_EQ(ReadAll(r, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
                       "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
                    5, false),
            State::kDone);
  EXPECT_EQ(r.status(), 201);
  EXPECT_EQ(r.body(), "ok");
}

TEST(HttpResponseReaderTest, BodyUntilTheConnectionEnds) {
  // HTTP/1.0 without Content-Length (Python's http.server, for one): the body ends at EOF.
  HttpResponseReader r;
  ASSERT_EQ(ReadAll(r, "HTTP/1.0 200 OK\r\nServer: x\r\n\r\nall of it", 4, true), State::kDone);
  EXPECT_EQ(r.body(), "all of it");
  EXPECT_FALSE(r.keep_alive());
}

TEST(HttpResponseReaderTest, KeepAliveRules) {
  HttpResponseReader r;
  ASSERT_EQ(ReadAll(r, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", 100, false),
            State::kDone);
  EXPECT_FALSE(r.keep_alive());
  ASSERT_EQ(ReadAll(r, "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
                    100, false),
            State::kDone);
  EXPECT_TRUE(r.keep_alive());
}

TEST(HttpResponseReaderTest, BytesAfterTheResponseAreLeft) {
  HttpResponseReader r;
  std::string left;
  ASSERT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1", 1000, false, &left),
            State::kDone);
  EXPECT_EQ(left, "HTTP/1.1");
}

TEST(HttpResponseReaderTest, TooLarge) {
  HttpResponseReader r;
  EXPECT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", 100, false, nullptr, 10),
            State::kTooLarge);
  EXPECT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\n",
                    100, false, nullptr, 10),
            State::kTooLarge);
  EXPECT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\n\r\n0123456789A", 100, true, nullptr, 10),
            State::kTooLarge);
}

TEST(HttpResponseReaderTest, NotHttp) {
  for (const std::string wire :
       {"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.1 101 Switching\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    HttpResponseReader r;
    EXPECT_EQ(ReadAll(r, wire, 1000, false), State::kBad) << wire;
    EXPECT_FALSE(r.error().empty());
  }
  HttpResponseReader r;
  EXPECT_EQ(ReadAll(r, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", 1000, true), State::kBad);
  EXPECT_EQ(ReadAll(r, std::string(HttpResponseReader::kMaxHead + 10, 'a'), 4096, false),
            State::kBad);
}

// A response read whole (the plain form is read without Beast, anything else by Beast) reads
// as the same response offered a byte at a time (Beast alone, from its first byte on).
TEST(HttpResponseReaderTest, WholeReadsAsByteByByte) {
  const std::string responses[] = {
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
      "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
      "HTTP/1.1 201 Created\r\nServer: x\r\nContent-Length:  3 \r\nX-Empty:\r\n\r\nabcNEXT",
      "HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nRetry-After: 9\r\nContent-Length: 1\r\n\r\nb",
      "HTTP/1.1 429 Too Many\r\nRetry-After:\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
      "HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
      "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nX-Tab:\ta\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nX-Fold: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nBad Name: a\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\n: a\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nNoColon\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 2000 OK\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.2 200 OK\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 600 Odd\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 \xe9t\xe9\r\nContent-Length: 1\r\n\r\nx",
      "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nshort",
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\ntoo large",
      "HTTP/1.1 200 OK\r\n\r\nuntil the end",
  };
  for (const std::string& wire : responses) {
    for (bool eof : {false, true}) {
      HttpResponseReader whole;
      HttpResponseReader bytes;
      std::string whole_left;
      std::string bytes_left;
      const State w = ReadAll(whole, wire, wire.size(), eof, &whole_left, /*max_body=*/4);
      const State b = ReadAll(bytes, wire, 1, eof, &bytes_left, /*max_body=*/4);
      ASSERT_EQ(w, b) << wire;
      if (w != State::kDone) continue;
      EXPECT_EQ(whole.status(), bytes.status()) << wire;
      EXPECT_EQ(whole.body(), bytes.body()) << wire;
      EXPECT_EQ(whole.retry_after(), bytes.retry_after()) << wire;
      EXPECT_EQ(whole.keep_alive(), bytes.keep_alive()) << wire;
      // Bytes after the response are left (a byte at a time, they are never offered).
      EXPECT_EQ(whole_left, wire.ends_with("NEXT") ? "NEXT" : "") << wire;
    }
  }
}

}  // namespace
}  // namespace idem::worker
