// ServiceClient: `idem consume`'s HTTP/1.1 client for the one service it delivers to, over a
// pool of keep-alive connections, built for one small exchange per message at a time:
//
// - the request is one string (HttpRequestText), sent with one write;
// - the answer is read with the connection's own reader and buffer (http_response_reader.h);
// - deadlines (connect, then answer) are checked by one timer for the whole pool, armed at the
//   earliest deadline of the exchanges in flight, not one timer per operation;
// - an idle connection is reused without probing it first. When a reused connection fails
//   before any byte of the answer arrives (the service closed it while idle, or closes it on
//   reading the request without answering), the request is sent once more on a new
//   connection. The service may then see that request twice, which its Idempotency-Key
//   makes safe (every request `idem consume` sends carries one).
//
// Thread safety: not thread-safe; everything runs on the one thread running `io`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idem/clock.h"
#include "idem/status.h"
#include "worker/http_response_reader.h"

namespace idem::worker {

// One request as the bytes sent: the request line, Host, the fields added, Content-Length, the
// body. Field names and values are written as given. The text is sized ahead (`reserve`,
// grown when a field does not fit) and written with a cursor: a copy per piece, not a string
// append with its checks.
// REQUIRES: names are tokens; values hold no CR, LF or NUL.
class HttpRequestText {
 public:
  // `buffer`: a string to write into (its capacity reused; its content dropped).
  HttpRequestText(std::string_view method, std::string_view target, std::string_view host,
                  size_t reserve = 512, std::string buffer = {});
  void Field(std::string_view name, std::string_view value);
  void Field(std::string_view name, uint64_t value);
  // The whole request; the object is spent.
  std::string Finish(std::string_view body) &&;

 private:
  // Makes room for `n` more bytes after the cursor.
  void Room(size_t n) {
    if (end_ + n > text_.size()) Grow(n);
  }
  void Grow(size_t n);
  // Writes `s` at the cursor. REQUIRES: Room(s.size()).
  void Put(std::string_view s);

  std::string text_;  // [0, end_) written; the rest is room
  size_t end_ = 0;
};

// What one exchange met.
struct ServiceAnswer {
  enum class Failure {
    kNone,      // status, body and retry_after hold the service's final answer
    kConnect,   // could not connect: the request never left
    kTimeout,   // no complete answer in time: the service may still be working on it
    kBroken,    // the connection failed or the answer was not HTTP: the service may have acted
    kTooLarge,  // the answer's body exceeded the limit: the service did act
  };
  Failure failure = Failure::kNone;
  std::string detail;  // for kConnect .. kTooLarge, one line
  int status = 0;
  std::string body;
  std::string retry_after;  // the Retry-After field as sent; empty when absent
  // From the call of Exchange to its answer or failure (connects and a retry included).
  std::chrono::steady_clock::duration elapsed{};
};

struct ServiceClientOptions {
  Duration connect_timeout{5000};  // each connect, at most
  Duration response_timeout{30000};  // the whole exchange: connect (a retry's too) to answer
  Duration idle_timeout{4000};       // an idle connection older than this is closed, not reused
  size_t max_idle = 64;
  size_t max_response_body = 16 << 20;
};

class ServiceClient {
 public:
  // `url` is http://HOST:PORT; HOST is resolved once, here. kInvalidArgument for another
  // form, kUnavailable when HOST cannot be resolved.
  static Result<std::unique_ptr<ServiceClient>> Create(boost::asio::io_context& io,
                                                       std::string_view url,
                                                       ServiceClientOptions options);
  ~ServiceClient();

  // "127.0.0.1:9000": the Host field's value and the name in failure details.
  const std::string& authority() const { return authority_; }

  // Sends `request` (HttpRequestText's) and reads the final answer (interim 1xx answers are
  // read past) into `answer`, every field of it set: one ServiceAnswer can serve exchange after
  // exchange, its strings' storage reused. Never throws. REQUIRES: `request` and `answer`
  // outlive the exchange.
  boost::asio::awaitable<void> Exchange(const std::string& request, ServiceAnswer& answer);

  // Connections open now (in use or idle), for tests.
  size_t connections() const { return connections_.size(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Connection;

  ServiceClient(boost::asio::io_context& io, boost::asio::ip::tcp::resolver::results_type
                endpoints, std::string authority, ServiceClientOptions options);

  // What writing a request and reading its answer met: the reader's state, whether any byte
  // of the answer arrived, and the connection's error (none when the reader came to an end of
  // its own).
  struct Reading {
    HttpResponseReader::State state = HttpResponseReader::State::kMore;
    bool answered = false;
    boost::system::error_code ec;
  };

  // The steps of Exchange. (Writing the request and reading the answer are Exchange's own
  // lines, not a coroutine of their own: one coroutine frame less per message.)
  // A new connection, connected by `deadline`; null, with `failed` saying why, when it could
  // not connect (the request was not sent).
  boost::asio::awaitable<Connection*> Connect(Clock::time_point deadline, ServiceAnswer& failed);
  // Offers the bytes `c` has read to its reader (Exchange's reading), updating `read`.
  static void Parse(Connection& c, size_t n, Reading& read);
  // Frees space at the end of `c`'s read buffer when it is full: drops the bytes used, or grows.
  static void MakeRoom(Connection& c);
  // The answer `c`'s reader came to (`state`, not kMore), into `answer` (cleared before); `c` is
  // released for reuse (idle since `now`) or closed.
  void AnswerRead(Connection* c, HttpResponseReader::State state, Clock::time_point now,
                  ServiceAnswer& answer);

  // The most recently used idle connection still young enough, or null.
  Connection* TakeIdle(Clock::time_point now);
  void Release(Connection* c, bool reusable, Clock::time_point now);
  Connection* Open();
  void Close(Connection* c);
  // `c`'s exchange must end by `deadline`, else the sweep closes its socket.
  void Watch(Connection& c, Clock::time_point deadline);
  void Arm(Clock::time_point at);
  void Sweep();

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;
  std::string authority_;
  ServiceClientOptions options_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<Connection*> idle_;  // most recently used last
  boost::asio::steady_timer timer_;
  bool armed_ = false;
  Clock::time_point armed_at_;
};

}  // namespace idem::worker
