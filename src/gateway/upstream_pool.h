// UpstreamPool: HTTP/1.1 exchanges with the one upstream service, over a pool of keep-alive
// connections, with a timeout on connect and on the whole exchange.
//
// Thread safety: Exchange may be called from many coroutines on many threads at once. A
// connection serves only exchanges on the event loop (io_context) it was opened on: the
// coroutine's, so its reads and writes complete on the thread that runs that coroutine.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/coarse_clock.h"
#include "gateway/deadline_stream.h"
#include "gateway/http.h"
#include "gateway/upstream.h"
#include "core/mutex.h"
#include "idem/status.h"

namespace idem::gateway {

struct UpstreamOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds response_timeout{60000};
  std::chrono::milliseconds idle_timeout{4000};
  size_t max_idle = 64;
  size_t max_response_body = 64 << 20;
};

class UpstreamPool final : public Upstream {
 public:
  // `url` is http://HOST:PORT; HOST is resolved once, here, on `executor`.
  static Result<std::unique_ptr<UpstreamPool>> Create(asio::any_io_executor executor,
                                                      std::string_view url,
                                                      UpstreamOptions options);

  // Sends `request` (its Host header is set to the upstream's) and reads the answer, giving up
  // (kTimeout) after `response_timeout`, or the pool's own response_timeout if it is shorter.
  // Interim 1xx responses are read past: on kNone, `response` is always a final (>= 200) one.
  Task<UpstreamResult> Exchange(Request& request,
                                std::chrono::milliseconds response_timeout) override;

  // "127.0.0.1:9000" for logs.
  const std::string& authority() const { return authority_; }

 private:
  struct Connection {
    Connection(asio::any_io_executor ex, const asio::execution_context* loop)
        : stream(std::move(ex)), loop(loop) {}
    DeadlineStream stream;
    const asio::execution_context* loop;  // the event loop its socket belongs to
    beast::flat_buffer buffer;
    std::string write_scratch;  // WriteMessage's header buffer, reused by every request
    internal::CoarseClock::time_point idle_since;  // coarse: an age of seconds
  };

  UpstreamPool(tcp::resolver::results_type endpoints, std::string authority,
               UpstreamOptions options);

  // An idle connection on `loop` that still looks alive, or null.
  std::unique_ptr<Connection> TakeIdle(const asio::execution_context* loop) IDEM_EXCLUDES(mu_);
  void PutIdle(std::unique_ptr<Connection> connection) IDEM_EXCLUDES(mu_);

  tcp::resolver::results_type endpoints_;
  std::string authority_;
  UpstreamOptions options_;
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_ IDEM_GUARDED_BY(mu_);
};

}  // namespace idem::gateway
