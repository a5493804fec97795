#include "worker/service_client.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <tuple>

#include "admin/http_service_url.h"

namespace idem::worker {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// A connection's read buffer to start with; it grows only for a head that does not fit.
constexpr size_t kReadBuffer = 16 * 1024;

ServiceAnswer Failed(ServiceAnswer::Failure failure, std::string detail) {
  ServiceAnswer answer;
  answer.failure = failure;
  answer.detail = std::move(detail);
  return answer;
}

}  // namespace

// --- HttpRequestText ------------------------------------------------------------------------

HttpRequestText::HttpRequestText(std::string_view method, std::string_view target,
                                 std::string_view host, size_t reserve, std::string buffer)
    : text_(std::move(buffer)) {
  constexpr std::string_view kVersion = " HTTP/1.1\r\nHost: ";
  // (A buffer reused keeps its size: only what it lacks is filled.)
  text_.resize(std::max({reserve, text_.size(), method.size() + target.size() + host.size() + 32}));
  Put(method);
  Put(" ");
  Put(target);
  Put(kVersion);
  Put(host);
  Put("\r\n");
}

void HttpRequestText::Grow(size_t n) { text_.resize(std::max(2 * text_.size(), end_ + n)); }

void HttpRequestText::Put(std::string_view s) {
  std::memcpy(text_.data() + end_, s.data(), s.size());
  end_ += s.size();
}

void HttpRequestText::Field(std::string_view name, std::string_view value) {
  Room(name.size() + value.size() + 4);
  char* out = text_.data() + end_;
  std::memcpy(out, name.data(), name.size());
  out += name.size();
  out[0] = ':';
  out[1] = ' ';
  std::memcpy(out + 2, value.data(), value.size());
  out += 2 + value.size();
  out[0] = '\r';
  out[1] = '\n';
  end_ += name.size() + value.size() + 4;
}

void HttpRequestText::Field(std::string_view name, uint64_t value) {
  char digits[20];
  const char* end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  Field(name, std::string_view(digits, static_cast<size_t>(end - digits)));
}

std::string HttpRequestText::Finish(std::string_view body) && {
  Field("Content-Length", body.size());
  Room(2 + body.size());
  Put("\r\n");
  Put(body);
  text_.resize(end_);
  return std::move(text_);
}

// --- ServiceClient --------------------------------------------------------------------------

struct ServiceClient::Connection {
  explicit Connection(asio::io_context& io) : socket(io) { in.resize(kReadBuffer); }
  tcp::socket socket;
  std::string in;  // bytes read: [in_begin, in_end) not yet used
  size_t in_begin = 0;
  size_t in_end = 0;
  HttpResponseReader reader;
  Clock::time_point deadline = Clock::time_point::max();  // max: not watched
  bool expired = false;                                    // the sweep closed it
  Clock::time_point idle_since;
};

Result<std::unique_ptr<ServiceClient>> ServiceClient::Create(asio::io_context& io,
                                                             std::string_view url,
                                                             ServiceClientOptions options) {
  auto service = admin::ResolveHttpService(io.get_executor(), url);
  if (!service.ok()) return service.status();
  return std::unique_ptr<ServiceClient>(
      new ServiceClient(io, std::move(service->endpoints), std::move(service->authority), options));
}

ServiceClient::ServiceClient(asio::io_context& io, tcp::resolver::results_type endpoints,
                             std::string authority, ServiceClientOptions options)
    : io_(io),
      endpoints_(std::move(endpoints)),
      authority_(std::move(authority)),
      options_(options),
      timer_(io) {}

ServiceClient::~ServiceClient() = default;

asio::awaitable<void> ServiceClient::Exchange(const std::string& request, ServiceAnswer& answer) {
  // One deadline for the whole exchange, a retry on a new connection included.
  const Clock::time_point begin = Clock::now();
  const Clock::time_point end = begin + options_.response_timeout;
  Clock::time_point now = begin;
  answer.failure = ServiceAnswer::Failure::kNone;
  answer.detail.clear();
  answer.status = 0;
  answer.body.clear();
  answer.retry_after.clear();
  for (bool retried = false;;) {
    Connection* c = TakeIdle(now);
    const bool reused = c != nullptr;
    if (!c) {
      c = co_await Connect(std::min(end, now + options_.connect_timeout), answer);
      if (!c) break;
    }
    Watch(*c, end);
    // Writes the request and reads until the reader is no longer waiting for bytes, or the
    // connection fails (the sweep closing it at its deadline among the ways).
    Reading read;
    // (asio::deferred, not use_awaitable: awaited directly, an operation needs no coroutine
    // frame of its own to start it.)
    std::tie(read.ec, std::ignore) = co_await asio::async_write(
        c->socket, asio::buffer(request), asio::as_tuple(asio::deferred));
    c->reader.Reset(options_.max_response_body);
    while (!read.ec && read.state == HttpResponseReader::State::kMore) {
      MakeRoom(*c);
      size_t n = 0;
      std::tie(read.ec, n) = co_await c->socket.async_read_some(
          asio::buffer(c->in.data() + c->in_end, c->in.size() - c->in_end),
          asio::as_tuple(asio::deferred));
      if (read.ec == asio::error::eof && read.answered) {
        read.ec = {};
        read.state = c->reader.End();
        break;
      }
      if (!read.ec) Parse(*c, n, read);
    }
    c->deadline = Clock::time_point::max();
    now = Clock::now();
    if (c->expired) {
      Close(c);
      answer = Failed(ServiceAnswer::Failure::kTimeout,
                      authority_ + (read.answered ? " sent part of an answer" : " sent no answer"));
      break;
    }
    if (read.ec) {
      Close(c);
      // A reused connection the service had closed, or closed on reading the request: nothing
      // came back, so the request goes once more on a new connection (the header says why
      // that is safe).
      if (reused && !read.answered && !retried) {
        retried = true;
        continue;
      }
      answer = Failed(ServiceAnswer::Failure::kBroken,
                      (read.answered ? "answer from " : "exchange with ") + authority_ + ": " +
                          read.ec.message());
      break;
    }
    AnswerRead(c, read.state, now, answer);
    break;
  }
  answer.elapsed = (answer.failure == ServiceAnswer::Failure::kNone ? now : Clock::now()) - begin;
}

asio::awaitable<ServiceClient::Connection*> ServiceClient::Connect(Clock::time_point deadline,
                                                                   ServiceAnswer& failed) {
  Connection* c = Open();
  Watch(*c, deadline);
  boost::system::error_code ec;
  co_await asio::async_connect(c->socket, endpoints_,
                               asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    // Nothing was sent, whether the connect was refused or timed out.
    failed = Failed(ServiceAnswer::Failure::kConnect,
                    "connect to " + authority_ + ": " + (c->expired ? "timed out" : ec.message()));
    Close(c);
    co_return nullptr;
  }
  // The request goes in one write; without this, a write after a partial one would wait for
  // the service's delayed ACK.
  c->socket.set_option(tcp::no_delay(true), ec);
  co_return c;
}

void ServiceClient::Parse(Connection& c, size_t n, Reading& read) {
  read.answered = true;
  c.in_end += n;
  size_t used = 0;
  read.state =
      c.reader.Read(std::string_view(c.in.data() + c.in_begin, c.in_end - c.in_begin), &used);
  c.in_begin += used;
  if (c.in_begin == c.in_end) c.in_begin = c.in_end = 0;
}

void ServiceClient::MakeRoom(Connection& c) {
  if (c.in_end != c.in.size()) return;
  if (c.in_begin > 0) {  // drop what was used
    std::memmove(c.in.data(), c.in.data() + c.in_begin, c.in_end - c.in_begin);
    c.in_end -= c.in_begin;
    c.in_begin = 0;
  } else {
    c.in.resize(c.in.size() * 2);
  }
}

void ServiceClient::AnswerRead(Connection* c, HttpResponseReader::State state,
                               Clock::time_point now, ServiceAnswer& answer) {
  using State = HttpResponseReader::State;
  if (state == State::kDone) {
    answer.status = c->reader.status();
    answer.body.swap(c->reader.body());  // (each keeps the other's storage for a later answer)
    answer.retry_after = c->reader.retry_after();
    // Bytes after the answer were not asked for: such a connection is not reused.
    Release(c, c->reader.keep_alive() && c->in_begin == c->in_end, now);
    return;
  }
  answer =
      state == State::kTooLarge
          ? Failed(ServiceAnswer::Failure::kTooLarge,
                   "answer from " + authority_ + ": body larger than " +
                       std::to_string(options_.max_response_body) + " bytes")
          : Failed(ServiceAnswer::Failure::kBroken,
                   "answer from " + authority_ + ": " + c->reader.error());
  Close(c);
}

ServiceClient::Connection* ServiceClient::TakeIdle(Clock::time_point now) {
  while (!idle_.empty()) {
    Connection* c = idle_.back();
    idle_.pop_back();
    if (now - c->idle_since <= options_.idle_timeout) return c;
    Close(c);  // the service may be closing it
  }
  return nullptr;
}

void ServiceClient::Release(Connection* c, bool reusable, Clock::time_point now) {
  if (!reusable || idle_.size() >= options_.max_idle) {
    Close(c);
    return;
  }
  c->idle_since = now;
  idle_.push_back(c);
}

ServiceClient::Connection* ServiceClient::Open() {
  connections_.push_back(std::make_unique<Connection>(io_));
  return connections_.back().get();
}

void ServiceClient::Close(Connection* c) {
  const auto it = std::find_if(connections_.begin(), connections_.end(),
                               [c](const auto& p) { return p.get() == c; });
  if (it == connections_.end()) return;
  std::iter_swap(it, connections_.end() - 1);
  connections_.pop_back();  // closes the socket
}

void ServiceClient::Watch(Connection& c, Clock::time_point deadline) {
  c.deadline = deadline;
  if (!armed_ || deadline < armed_at_) Arm(deadline);
}

void ServiceClient::Arm(Clock::time_point at) {
  armed_ = true;
  armed_at_ = at;
  timer_.expires_at(at);  // cancels the wait before, if any
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) Sweep();
  });
}

void ServiceClient::Sweep() {
  armed_ = false;
  const Clock::time_point now = Clock::now();
  Clock::time_point next = Clock::time_point::max();
  for (const auto& c : connections_) {
    if (c->deadline == Clock::time_point::max()) continue;
    if (c->deadline <= now) {
      c->deadline = Clock::time_point::max();
      c->expired = true;
      boost::system::error_code ignored;
      c->socket.close(ignored);  // its pending operation ends with operation_aborted
    } else {
      next = std::min(next, c->deadline);
    }
  }
  if (next != Clock::time_point::max()) Arm(next);
}

}  // namespace idem::worker
