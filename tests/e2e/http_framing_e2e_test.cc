// End-to-end: request framing. Each case is sent as raw bytes to the real `idem` binary, in front
// of a raw upstream that records every byte it receives. An accepted request must reach the
// upstream exactly once, with the body the gateway fingerprinted (the record's fingerprint is
// recomputed from what the upstream received); a refused one must not reach it at all, nor any
// request smuggled in its body.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>

#include "idem/fingerprint.h"
#include "util/gateway_process.h"
#include "util/http_client.h"
#include "util/raw_upstream.h"
#include "util/temp_dir.h"
#include "util/build_tree.h"

namespace idem::testing {
namespace {

constexpr int kAccepted = 201;
const std::string kSmuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

struct Case {
  std::string name;
  std::string headers;  // after "POST /v1/frame HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: KEY\r\n"
  std::string body;     // after the blank line
  int status;           // kAccepted, or the refusal's status
  std::string upstream_body = "";  // with kAccepted: what the upstream must receive
  std::string request_line = "POST /v1/frame HTTP/1.1";
};

std::string Repeat(char c, size_t n) { return std::string(n, c); }

std::vector<Case> Cases() {
  const std::string te = "Transfer-Encoding: chunked\r\n";
  const std::string hello_chunked = "5\r\nhello\r\n0\r\n\r\n";
  return {
      // Accepted framings.
      {"content_length", "Content-Length: 5\r\n", "hello", kAccepted, "hello"},
      {"content_length_zero", "Content-Length: 0\r\n", "", kAccepted, ""},
      {"chunked", te, hello_chunked, kAccepted, "hello"},
      {"chunked_upper_case", "Transfer-Encoding: CHUNKED\r\n", hello_chunked, kAccepted, "hello"},
      {"chunked_lower_case_name", "transfer-encoding: chunked\r\n", hello_chunked, kAccepted,
       "hello"},
      {"chunked_spaces_around", "Transfer-Encoding:   chunked  \r\n", hello_chunked, kAccepted,
       "hello"},
      {"chunked_tab", "Transfer-Encoding:\tchunked\r\n", hello_chunked, kAccepted, "hello"},
      {"chunked_empty_list_elements", "Transfer-Encoding: , chunked\r\n", hello_chunked, kAccepted,
       "hello"},
      {"several_chunks", te, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", kAccepted, "hello world"},
      {"chunk_size_leading_zeros", te, "0005\r\nhello\r\n0\r\n\r\n", kAccepted, "hello"},
      {"chunk_size_upper_hex", te, "A\r\n0123456789\r\n0\r\n\r\n", kAccepted, "0123456789"},
      {"chunk_extension", te, "5;name=value\r\nhello\r\n0;last\r\n\r\n", kAccepted, "hello"},
      {"chunk_extension_quoted", te, "5;a=\"b c\"\r\nhello\r\n0\r\n\r\n", kAccepted, "hello"},
      {"trailer_dropped", te, "5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", kAccepted, "hello"},
      {"trailer_key_dropped", te, "5\r\nhello\r\n0\r\nIdempotency-Key: other\r\n\r\n", kAccepted,
       "hello"},
      {"same_content_length_twice", "Content-Length: 5\r\nContent-Length: 5\r\n", "hello",
       kAccepted, "hello"},
      {"content_length_list_same", "Content-Length: 5, 5\r\n", "hello", kAccepted, "hello"},
      {"http10_content_length", "Content-Length: 5\r\n", "hello", kAccepted, "hello",
       "POST /v1/frame HTTP/1.0"},
      {"absolute_form_target", "Content-Length: 5\r\n", "hello", kAccepted, "hello",
       "POST http://gw.example/v1/frame HTTP/1.1"},
      {"expect_with_body_sent", "Expect: 100-continue\r\nContent-Length: 5\r\n", "hello",
       kAccepted, "hello"},

      // CL.TE, TE.CL and TE.TE: refused, and the smuggled request never reaches the upstream.
      {"cl_te", "Content-Length: 40\r\n" + te, "0\r\n\r\n" + kSmuggled, 400},
      {"te_cl", te + "Content-Length: 3\r\n", "0\r\n\r\n" + kSmuggled, 400},
      {"te_chunked_identity", "Transfer-Encoding: chunked, identity\r\n", hello_chunked + kSmuggled,
       400},
      {"te_identity", "Transfer-Encoding: identity\r\n", hello_chunked + kSmuggled, 400},
      {"te_identity_with_cl", "Transfer-Encoding: identity\r\nContent-Length: 5\r\n", "hello", 400},
      {"te_xchunked", "Transfer-Encoding: xchunked\r\n", hello_chunked + kSmuggled, 400},
      {"te_chunked_parameter", "Transfer-Encoding: chunked; q=1\r\n", hello_chunked, 400},
      {"te_chunked_twice_in_list", "Transfer-Encoding: chunked, chunked\r\n", hello_chunked, 400},
      {"te_twice_both_chunked", te + te, hello_chunked, 400},
      {"te_twice_chunked_then_identity", te + "Transfer-Encoding: identity\r\n",
       hello_chunked + kSmuggled, 400},
      {"te_empty", "Transfer-Encoding: \r\n", hello_chunked + kSmuggled, 400},
      {"te_space_before_colon", "Transfer-Encoding : chunked\r\n", hello_chunked, 400},
      {"te_vertical_tab", "Transfer-Encoding:\x0b" "chunked\r\n", hello_chunked, 400},
      {"te_underscore_name", "Transfer_Encoding: chunked\r\n", hello_chunked, 400},
      {"cl_underscore_name", "Content_Length: 5\r\n", "hello", 400},
      {"te_obs_fold", "Transfer-Encoding:\r\n chunked\r\n", hello_chunked, 400},
      {"obs_fold_other_header", "X-A: 1\r\n\tfolded\r\nContent-Length: 5\r\n", "hello", 400},
      {"te_on_http10", te, hello_chunked + kSmuggled, 400, "", "POST /v1/frame HTTP/1.0"},
      // Codings the gateway does not implement.
      {"te_gzip_chunked", "Transfer-Encoding: gzip, chunked\r\n", hello_chunked, 501},
      {"te_deflate_chunked", "Transfer-Encoding: deflate, chunked\r\n", hello_chunked, 501},
      {"te_two_fields_gzip_then_chunked", "Transfer-Encoding: gzip\r\n" + te, hello_chunked, 501},
      {"te_identity_chunked", "Transfer-Encoding: identity, chunked\r\n", hello_chunked, 501},
      {"te_gzip_only", "Transfer-Encoding: gzip\r\n", hello_chunked + kSmuggled, 400},

      // Bad bytes in the header.
      {"nul_in_value", std::string("X-A: a\0b\r\nContent-Length: 5\r\n", 29), "hello", 400},
      {"bare_cr_in_value", "X-A: a\rb\r\nContent-Length: 5\r\n", "hello", 400},
      {"bare_lf_line_end", "X-A: a\nContent-Length: 5\r\n", "hello", 400},
      {"space_in_name", "X A: b\r\nContent-Length: 5\r\n", "hello", 400},

      // Content-Length values.
      {"cl_negative", "Content-Length: -5\r\n", "hello", 400},
      {"cl_plus", "Content-Length: +5\r\n", "hello", 400},
      {"cl_exponent", "Content-Length: 5e0\r\n", "hello", 400},
      {"cl_overflow", "Content-Length: 99999999999999999999999\r\n", "hello", 400},
      {"cl_two_values", "Content-Length: 5\r\nContent-Length: 6\r\n", "hello!", 400},
      {"cl_list_differs", "Content-Length: 5, 6\r\n", "hello!", 400},
      {"cl_over_limit", "Content-Length: 2000000\r\n", "hello", 413},

      // Chunk sizes and lines.
      {"chunk_size_overflow", te, "fffffffffffffffff1\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_size_over_limit", te, "ffffffffffffffff\r\nhello\r\n0\r\n\r\n", 413},
      {"chunk_size_negative", te, "-5\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_size_0x", te, "0x5\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_size_trailing_space", te, "5 \r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_data_too_long", te, "3\r\nhello\r\n0\r\n\r\n" + kSmuggled, 400},
      {"chunk_missing_crlf", te, "5\r\nhelloX0\r\n\r\n", 400},
      {"chunk_extension_too_long", te, "5;x=" + Repeat('a', 5000) + "\r\nhello\r\n0\r\n\r\n", 400},
      {"chunk_line_beyond_buffer", te, "5;x=" + Repeat('a', 40000) + "\r\nhello\r\n0\r\n\r\n", 400},
      {"trailers_beyond_buffer", te, "5\r\nhello\r\n0\r\nX-T: " + Repeat('t', 40000) + "\r\n\r\n",
       400},
      {"trailer_content_length", te, "5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n", 400},
      // Chunk lines and the trailer section end in CRLF, never a bare LF (RFC 9112 7.1).
      {"chunk_lines_bare_lf", te, "2\nhi\n0\n\n", 400},
      {"last_chunk_bare_lf", te, "2\r\nhi\r\n0\n\n", 400},
      {"trailer_end_bare_lf", te, "2\r\nhi\r\n0\r\n\n", 400},
      {"trailer_field_bare_lf", te, "2\r\nhi\r\n0\r\nX-T: 1\n\r\n", 400},

      // The request target and identity headers.
      {"fragment", "Content-Length: 5\r\n", "hello", 400, "", "POST /v1/frame#x HTTP/1.1"},
      {"relative_target", "Content-Length: 5\r\n", "hello", 400, "", "POST v1/frame HTTP/1.1"},
      {"second_key", "Idempotency-Key: another\r\nContent-Length: 5\r\n", "hello", 400},
      {"second_tenant", "Authorization: a\r\nAuthorization: b\r\nContent-Length: 5\r\n", "hello",
       400},
  };
}

class FramingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    upstream_ = std::make_unique<RawUpstream>();
    GatewayProcess g = StartGatewayProcess(idem::build_tree::kIdemBinary, upstream_->address(), "memory",
                                           dir_.File("gateway.log"));
    ASSERT_NE(g.process, nullptr) << g.address;
    gateway_ = std::move(g.process);
    address_ = g.address;
    admin_ = g.admin_address;
  }

  // The fingerprint the gateway stored for `key` (anonymous tenant), or "".
  std::string StoredFingerprint(const std::string& key) {
    auto r = Http(admin_, "GET", "/v1/records?key=" + key);
    const std::string marker = "\"fingerprint\": \"";
    const size_t at = r.body.find(marker);
    return at == std::string::npos ? "" : r.body.substr(at + marker.size(), 64);
  }

  TempDir dir_;
  std::unique_ptr<RawUpstream> upstream_;
  std::unique_ptr<Process> gateway_;
  std::string address_, admin_;
};

// The status of the first final response in `answer`, or 0.
int FinalStatus(const std::string& answer) {
  for (size_t at = answer.find("HTTP/1."); at != std::string::npos;
       at = answer.find("HTTP/1.", at + 1)) {
    const int status = std::atoi(answer.substr(at + 9, 3).c_str());
    if (status >= 200) return status;
  }
  return 0;
}

TEST_F(FramingTest, EveryCaseIsForwardedExactlyOnceAsFingerprintedOrNotAtAll) {
  const std::vector<Case> cases = Cases();
  ASSERT_GE(cases.size(), 40u);
  int index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string key = "frame-" + std::to_string(++index);
    const size_t before = upstream_->requests().size();
    const std::string bytes = c.request_line + "\r\nHost: gw\r\nIdempotency-Key: " + key +
                              "\r\n" + c.headers + "\r\n" + c.body;
    RawSocket client(address_);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE(client.Send(bytes));
    client.ShutdownWrite();
    const std::string answer = client.ReadAll(5000);
    EXPECT_EQ(FinalStatus(answer), c.status) << answer.substr(0, 600);

    const std::vector<ReceivedRequest> all = upstream_->requests();
    const std::vector<ReceivedRequest> received(all.begin() + static_cast<long>(before), all.end());
    if (c.status != kAccepted) {
      EXPECT_TRUE(received.empty()) << received.front().raw;
      EXPECT_EQ(StoredFingerprint(key), "") << "a refused request claims no key";
      continue;
    }
    ASSERT_EQ(received.size(), 1u);
    const ReceivedRequest& r = received.front();
    EXPECT_EQ(r.body, c.upstream_body);
    EXPECT_EQ(r.Values("Idempotency-Key"), std::vector<std::string>{key}) << r.raw;
    EXPECT_TRUE(r.Values("Transfer-Encoding").empty()) << r.raw;
    EXPECT_TRUE(r.Values("Expect").empty()) << r.raw;
    EXPECT_TRUE(r.Values("X-Trailer").empty()) << r.raw;
    EXPECT_EQ(r.target, "/v1/frame") << r.raw;
    // The differential property: the record's fingerprint is the fingerprint of the request the
    // upstream received.
    RequestParts parts;
    parts.method = r.method;
    parts.path = r.target;
    parts.body = r.body;
    auto expected = ComputeFingerprint(FingerprintPolicy{}, parts);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(StoredFingerprint(key), expected->ToHex());
  }
  EXPECT_EQ(upstream_->parse_errors(), 0) << "the upstream never saw bytes it could not frame";
  EXPECT_TRUE(gateway_->Running());
}

// RFC 9112 3.2: an HTTP/1.1 request without Host, and any request with two, is refused and
// never forwarded; HTTP/1.0 may omit it.
TEST_F(FramingTest, HostIsRequiredOnceOnHttp11) {
  struct HostCase {
    std::string name;
    std::string head;  // the request line and the headers before Idempotency-Key
    int status;
  };
  const std::vector<HostCase> cases = {
      {"no_host", "POST /v1/frame HTTP/1.1\r\n", 400},
      {"two_hosts", "POST /v1/frame HTTP/1.1\r\nHost: x\r\nHost: y\r\n", 400},
      {"two_hosts_same", "POST /v1/frame HTTP/1.1\r\nHost: x\r\nhost: x\r\n", 400},
      {"bad_host", "POST /v1/frame HTTP/1.1\r\nHost: x/y\r\n", 400},
      {"absolute_form_no_host", "POST http://gw/v1/frame HTTP/1.1\r\n", 400},
      {"http10_two_hosts", "POST /v1/frame HTTP/1.0\r\nHost: x\r\nHost: y\r\n", 400},
      {"http10_no_host", "POST /v1/frame HTTP/1.0\r\n", kAccepted},
      {"empty_host", "POST /v1/frame HTTP/1.1\r\nHost:\r\n", kAccepted},
  };
  int index = 0;
  for (const HostCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string key = "host-" + std::to_string(++index);
    const size_t before = upstream_->requests().size();
    RawSocket client(address_);
    ASSERT_TRUE(client.Send(c.head + "Idempotency-Key: " + key + "\r\nContent-Length: 5\r\n\r\nhello"));
    client.ShutdownWrite();
    const std::string answer = client.ReadAll(5000);
    EXPECT_EQ(FinalStatus(answer), c.status) << answer;
    if (c.status == 400) {
      EXPECT_NE(answer.find("urn:idem:problem:malformed-request"), std::string::npos) << answer;
      EXPECT_NE(answer.find("Host"), std::string::npos) << "the detail names the header";
    }
    EXPECT_EQ(upstream_->requests().size() - before, c.status == kAccepted ? 1u : 0u);
  }
}

// A chunk line that ends in a bare LF is refused at once, not after the read timeout (30 s):
// the client keeps its side open, as a client waiting for the answer does.
TEST_F(FramingTest, BareLfInChunkFramingIsRefusedAtOnce) {
  for (const std::string body : {"2\nhi\n0\n\n", "2\nhi\n", "2\r\nhi\r\n0\r\n\n"}) {
    SCOPED_TRACE(body);
    RawSocket client(address_);
    const auto started = std::chrono::steady_clock::now();
    ASSERT_TRUE(client.Send(
        "POST /a HTTP/1.1\r\nHost: x\r\nIdempotency-Key: lf1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n" + body));
    const std::string answer = client.ReadUntil("\r\n\r\n", 5000);
    EXPECT_EQ(FinalStatus(answer), 400) << answer;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  }
  EXPECT_TRUE(upstream_->requests().empty());
}

TEST_F(FramingTest, PipelinedRequestsEachReachTheUpstreamOnce) {
  const std::string one =
      "POST /v1/frame HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: p-1\r\nContent-Length: 3\r\n\r\none";
  const std::string two =
      "POST /v1/frame HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: p-2\r\n"
      "Transfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n";
  RawSocket client(address_);
  ASSERT_TRUE(client.Send(one + two + one));
  client.ShutdownWrite();
  const std::string answer = client.ReadAll(5000);
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t at = answer.find(needle); at != std::string::npos; at = answer.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("Idempotent-Replayed: false"), 2) << answer;
  EXPECT_EQ(count("Idempotent-Replayed: true"), 1) << answer;
  const auto received = upstream_->requests();
  ASSERT_EQ(received.size(), 2u);
  EXPECT_EQ(received[0].body, "one");
  EXPECT_EQ(received[1].body, "two");
}

}  // namespace
}  // namespace idem::testing
