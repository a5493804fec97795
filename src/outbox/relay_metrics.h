// The relay's Prometheus metrics (text format written by hand, as the gateway's).
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace idem::outbox {

// Why a row was parked; the `reason` label. (A row on a subject the relay does not take is
// not parked: it stays pending for the relay that takes it, counted in uncovered_pending_rows.)
enum class ParkReason { kTooLarge, kRejected, kCount };
std::string_view ParkReasonLabel(ParkReason reason);

class RelayMetrics {
 public:
  std::atomic<uint64_t> published{0};        // rows marked published after a PubAck
  std::atomic<uint64_t> duplicates{0};       // PubAcks with duplicate: true
  std::atomic<uint64_t> beyond_window{0};    // republished after the dedup window had passed
  std::atomic<uint64_t> publish_errors{0};   // publishes that failed for a transient reason
  std::atomic<uint64_t> postgres_errors{0};  // failed outbox calls (claim, mark, ...)
  std::atomic<uint64_t> reclaimed{0};        // rows claimed again (an earlier claim lapsed)
  std::atomic<uint64_t> held_back{0};        // rows a lock left out: their key's earlier row
                                             // was held elsewhere
  std::atomic<double> lag_seconds{0};        // age of the oldest pending row it takes
  std::atomic<int64_t> pending_rows{0};      // pending rows it takes
  std::atomic<int64_t> parked_rows{0};
  // Pending rows on subjects this relay does not take (another relay's, or none's), and the
  // age of the oldest of them.
  std::atomic<int64_t> uncovered_pending_rows{0};
  std::atomic<double> uncovered_lag_seconds{0};
  std::atomic<int64_t> pending_floor{0};     // no row below this id can be pending (the
                                             // relay's scans start here)
  std::atomic<double> duplicate_window_seconds{0};
  std::atomic<bool> postgres_up{false};
  std::atomic<bool> nats_up{false};

  void CountParked(ParkReason reason) {
    parked_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t parked(ParkReason reason) const {
    return parked_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }
  void ObserveBatch(size_t rows);

  std::string Render() const;

 private:
  static constexpr std::array<size_t, 10> kBatchBounds = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ParkReason::kCount)> parked_{};
  std::array<std::atomic<uint64_t>, kBatchBounds.size() + 1> batch_buckets_{};
  std::atomic<uint64_t> batch_count_{0};
  std::atomic<uint64_t> batch_sum_{0};
};

}  // namespace idem::outbox
