#include "outbox/relay_backoff.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "outbox/relay_text.h"

namespace idem::outbox {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

}  // namespace

void RelayBackoff::SleepFor(milliseconds d) const {
  const auto until = SteadyClock::now() + d;
  while (!stop_.load() && SteadyClock::now() < until) {
    std::this_thread::sleep_for(std::min<milliseconds>(
        kSlice, std::chrono::duration_cast<milliseconds>(until - SteadyClock::now()) + milliseconds(1)));
  }
}

void RelayBackoff::Failed(const std::string& what, const Status& status) {
  backoff_ = std::clamp<milliseconds>(backoff_ * 2, milliseconds(100), max_);
  log_.Warn("relay", fmt::format("{} failed: {}; retrying in {} ms", what,
                                 OneLine(status.ToString()), backoff_.count()));
  SleepFor(backoff_);
}

}  // namespace idem::outbox
