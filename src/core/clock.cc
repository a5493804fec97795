#include "idem/clock.h"

namespace idem {
namespace {

class WallClock final : public Clock {
 public:
  TimePoint Now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
  }
};

}  // namespace

std::shared_ptr<Clock> SystemClock() {
  static const std::shared_ptr<Clock> clock = std::make_shared<WallClock>();
  return clock;
}

}  // namespace idem
