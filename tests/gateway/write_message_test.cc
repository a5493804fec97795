// WriteMessage on loopback: the bytes it sends for a request and a response are the bytes Beast's
// own serializer writes for them, whatever the fields went through (known and unknown names,
// values replaced, fields erased and inserted again, empty values), and a body too large for one
// send arrives whole.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/beast/http/write.hpp>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>

#include "gateway/deadline_stream.h"
#include "gateway/http.h"
#include "util/loopback_pair.h"
#include "util/run_io_until.h"

namespace idem::gateway {
namespace {

using idem::testing::RunIoUntil;

// What Beast's serializer writes for `message`.
template <bool kIsRequest>
std::string Serialized(const http::message<kIsRequest, http::string_body, Fields>& message) {
  std::ostringstream out;
  out << message;
  return out.str();
}

// What WriteMessage sends for `message`, read from the other end of a loopback connection
// until the sender shuts its side down after the write (or as many bytes as Beast would write,
// and one more to see that nothing follows).
template <bool kIsRequest>
std::string Sent(http::message<kIsRequest, http::string_body, Fields>& message) {
  asio::io_context io;
  idem::testing::LoopbackPair pair = idem::testing::ConnectLoopbackPair(io);
  DeadlineStream stream(std::move(pair.client));
  std::string scratch = "left over from an earlier message";
  std::optional<boost::system::error_code> written;
  auto write = [&]() -> Task<void> {
    boost::system::error_code ec;
    co_await WriteMessage(stream, message, scratch, ec);
    written = ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  };
  std::string received(Serialized(message).size() + 1, '\0');
  std::optional<size_t> got;
  asio::co_spawn(io, write(), asio::detached);
  asio::async_read(pair.peer, asio::buffer(received),
                   [&](const boost::system::error_code&, size_t n) { got = n; });
  EXPECT_TRUE(RunIoUntil(io, [&] { return written.has_value() && got.has_value(); },
                         std::chrono::seconds(30)));
  EXPECT_FALSE(written.value_or(asio::error::timed_out));
  received.resize(got.value_or(0));
  return received;
}

TEST(WriteMessageTest, SendsARequestAsBeastSerializesIt) {
  Request request{http::verb::post, "/v1/payments?x=1", 11};
  request.set(http::field::host, "upstream:9000");
  request.set("Idempotency-Key", "k-1");
  request.insert("X-Empty", "");
  request.insert("x-repeated", "one");
  request.insert("X-Repeated", "two");
  request.set(http::field::content_type, "application/json");
  request.set(http::field::host, "replaced.example:8080");  // set again: a new element
  request.erase("Idempotency-Key");
  request.set("Idempotency-Key", "k-2");
  request.body() = R"({"amount":1000})";
  request.prepare_payload();
  EXPECT_EQ(Sent(request), Serialized(request));
}

TEST(WriteMessageTest, SendsAResponseAsBeastSerializesIt) {
  Response response{http::status::created, 11};
  response.set(http::field::content_type, "application/json");
  response.set("Location", "/v1/payments/1");
  response.insert(http::field::set_cookie, "a=1");
  response.insert(http::field::set_cookie, "b=2");
  response.body() = R"({"id":1})";
  response.prepare_payload();
  response.keep_alive(false);
  EXPECT_EQ(Sent(response), Serialized(response));

  Response http10{http::status::ok, 10};
  http10.reason("Fine");
  http10.body() = "";
  http10.prepare_payload();
  EXPECT_EQ(Sent(http10), Serialized(http10));
}

TEST(WriteMessageTest, SendsABodyLargerThanOneSendWhole) {
  Response response{http::status::ok, 11};
  response.set(http::field::content_type, "application/octet-stream");
  response.body() = std::string(8 << 20, 'b');
  response.prepare_payload();
  EXPECT_EQ(Sent(response), Serialized(response));
}

}  // namespace
}  // namespace idem::gateway
