#include "gateway/maintenance.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <string>

namespace idem::gateway {

Task<void> SweepExpiredRecords(Services& services, const std::atomic<bool>& draining) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(services.options.sweep_interval);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || draining) co_return;
    const TimePoint now = services.options.clock->Now();
    Result<uint64_t> swept = co_await services.store.Run(
        [now](Store& store) { return store.Sweep(now); }, asio::use_awaitable);
    if (!swept.ok()) {
      services.log.Warn("sweep", "failed: " + swept.status().ToString());
    } else if (*swept > 0) {
      services.log.Info("sweep", "removed " + std::to_string(*swept) + " expired record(s)");
    }
  }
}

Task<void> WatchStoreDegradation(Services& services, const std::atomic<bool>& draining) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::string reported;
  for (;;) {
    timer.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || draining) co_return;
    std::string now = services.store.hooks().Degradation();
    if (now == reported) continue;
    if (!now.empty()) {
      services.log.Warn("store_degraded", now);
    } else {
      services.log.Info("store_recovered", "the store serves as configured again");
    }
    reported = std::move(now);
  }
}

Task<void> FlushRequestLog(Log& log) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(std::chrono::milliseconds(100));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    log.Flush();
  }
}

void LogLostCompletions(Services& services) {
  const size_t lost = services.pending.size();
  if (lost == 0) return;
  constexpr size_t kNamed = 100;
  for (const std::string& digest : services.pending.Digests(kNamed)) {
    services.log.Error("complete_lost",
                       "key " + digest + ": answered, but its completion was never stored; "
                       "the gateway stops, and a retry after the key's lease executes again");
  }
  if (lost > kNamed) {
    services.log.Error("complete_lost", std::to_string(lost - kNamed) +
                                            " more completion(s) lost in the same way");
  }
}

}  // namespace idem::gateway
