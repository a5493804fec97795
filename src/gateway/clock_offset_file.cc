#include "gateway/clock_offset_file.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <fstream>
#include <sstream>

#include "gateway/access_log.h"
#include "idem/gateway_options.h"

namespace idem::gateway {
namespace {

std::string Trim(std::string text) {
  const char* space = " \t\r\n";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

Result<Duration> ReadOffset(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgumentError("clock offset file '" + path + "' cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  auto offset = ParseDuration(Trim(text.str()));
  if (!offset.ok()) {
    return InvalidArgumentError("clock offset file '" + path +
                                "': " + std::string(offset.status().message()));
  }
  return *offset;
}

}  // namespace

Result<std::unique_ptr<ClockOffsetFile>> ClockOffsetFile::Open(std::string path,
                                                               std::shared_ptr<Clock> base) {
  auto offset = ReadOffset(path);
  if (!offset.ok()) return offset.status();
  return std::unique_ptr<ClockOffsetFile>(
      new ClockOffsetFile(std::move(path), std::make_shared<OffsetClock>(std::move(base), *offset)));
}

Result<std::optional<Duration>> ClockOffsetFile::Reload() {
  auto offset = ReadOffset(path_);
  if (!offset.ok()) return offset.status();
  if (*offset == clock_->offset()) return std::optional<Duration>();
  clock_->SetOffset(*offset);
  return std::optional<Duration>(*offset);
}

Task<void> FollowClockOffsetFile(ClockOffsetFile& file, Log& log) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::string last_error;
  for (;;) {
    timer.expires_after(ClockOffsetFile::kReloadInterval);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    auto changed = file.Reload();
    if (!changed.ok()) {
      const std::string error(changed.status().message());
      if (error != last_error) log.Warn("clock", error + "; keeping the offset");
      last_error = error;
      continue;
    }
    last_error.clear();
    if (*changed) {
      log.Warn("clock", "UNSAFE (testing only): clock offset now " +
                            std::to_string(changed->value().count()) + " ms ahead, from " +
                            file.path());
    }
  }
}

}  // namespace idem::gateway
