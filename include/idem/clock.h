// Time as idem sees it: wall-clock milliseconds from an injectable Clock.
//
// Every store reads "now" from the Clock in its StoreOptions, so a test can move time forward
// with a ManualClock instead of sleeping until a lease or a retention TTL passes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

namespace idem {

// Milliseconds are the unit of every lease, TTL and timestamp idem stores.
using Duration = std::chrono::milliseconds;
using TimePoint = std::chrono::time_point<std::chrono::system_clock, Duration>;

inline int64_t ToMillis(TimePoint t) { return t.time_since_epoch().count(); }
inline TimePoint FromMillis(int64_t ms) { return TimePoint(Duration(ms)); }

// Thread safety: implementations must be safe to call from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The real wall clock (std::chrono::system_clock, truncated to milliseconds). Wall time, not a
// monotonic clock, because deadlines are stored and compared across processes and restarts.
std::shared_ptr<Clock> SystemClock();

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = FromMillis(1'700'000'000'000)) : now_ms_(ToMillis(start)) {}

  TimePoint Now() const override { return FromMillis(now_ms_.load(std::memory_order_acquire)); }
  void Advance(Duration d) { now_ms_.fetch_add(d.count(), std::memory_order_acq_rel); }
  void Set(TimePoint t) { now_ms_.store(ToMillis(t), std::memory_order_release); }

 private:
  std::atomic<int64_t> now_ms_;
};

// Another clock moved by an offset that can be changed while it is read: Now() is
// base->Now() + offset(). For tests that must move a running component's time (the gateway's
// --unsafe-clock-offset-file) while the base clock keeps running. Thread-safe.
class OffsetClock final : public Clock {
 public:
  explicit OffsetClock(std::shared_ptr<Clock> base, Duration offset = Duration(0))
      : base_(std::move(base)), offset_ms_(offset.count()) {}

  TimePoint Now() const override { return base_->Now() + offset(); }
  Duration offset() const { return Duration(offset_ms_.load(std::memory_order_acquire)); }
  void SetOffset(Duration offset) { offset_ms_.store(offset.count(), std::memory_order_release); }

 private:
  const std::shared_ptr<Clock> base_;
  std::atomic<int64_t> offset_ms_;
};

}  // namespace idem
