// What an accept loop does when accepting fails: at the descriptor limit (EMFILE, ENFILE) the
// pending connection stays in the backlog and the listener stays readable, so retrying at once
// spins a core and floods the log. AcceptThrottle paces the retries and the log lines;
// DescriptorReserve keeps one descriptor aside so the admin listener can still accept.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include <boost/system/error_code.hpp>

namespace idem::gateway {

// True for the accept errors that mean "out of descriptors or memory": worth a pause, not a
// retry at once.
bool IsResourceExhaustion(const boost::system::error_code& ec);

// One listener's failed accepts. Not thread-safe: each accept loop owns one.
class AcceptThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirstPause{10};
  static constexpr std::chrono::milliseconds kMaxPause{1000};
  static constexpr std::chrono::seconds kLogInterval{10};

  // Records a failed accept; returns how long to pause before the next one (doubling from
  // kFirstPause up to kMaxPause while failures continue).
  std::chrono::milliseconds Failed();
  // Records a successful accept: the next failure pauses kFirstPause again.
  void Succeeded() { pause_ = std::chrono::milliseconds(0); }
  // If a log line is due (the first failure, then at most one per kLogInterval), returns how
  // many failures it covers and resets that count.
  std::optional<uint64_t> TakeLogCount(Clock::time_point now);

 private:
  std::chrono::milliseconds pause_{0};
  uint64_t unlogged_ = 0;
  std::optional<Clock::time_point> last_log_;
};

// One spare descriptor (/dev/null), released so that one accept can succeed at the descriptor
// limit, and taken back afterwards. Thread-safe.
class DescriptorReserve {
 public:
  DescriptorReserve();  // takes the descriptor; without one, Release() returns false
  ~DescriptorReserve();
  DescriptorReserve(const DescriptorReserve&) = delete;
  DescriptorReserve& operator=(const DescriptorReserve&) = delete;

  // Closes the spare descriptor; false if it was not held.
  bool Release();
  // Takes a spare descriptor again if none is held (may fail at the limit; try again later).
  void Restore();

 private:
  std::atomic<int> fd_{-1};
};

}  // namespace idem::gateway
