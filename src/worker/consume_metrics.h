// `idem consume` metrics in Prometheus text format (counters, the in-flight gauge, the NATS
// connection state, a delivery latency histogram). Its histogram is the admin module's.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "admin/histogram.h"

namespace idem::worker {

class ConsumeMetrics {
 public:
  // What became of one delivery attempt. Names are the `outcome` label values. kLimitReached:
  // given up at --max-deliver or --max-retry-time (then dead-lettered or dropped, and termed);
  // kDropped: terminated without a copy on the dead-letter subject (none configured, or its
  // publish failed at the limit).
  enum Outcome { kDelivered, kAcked, kNaked, kTermed, kDeadLettered, kLimitReached, kDropped,
                 kOutcomeCount };
  // Why an attempt failed or a broker call did. Names are the `kind` label values.
  // Delivery errors count POSTs (a batch that times out is one), kBatchResponse a 2xx answer to
  // a batch that could not be read (every message of it naked).
  enum Error { kTimeout, kConnect, kBroken, kTooLarge, kAckFailed, kNatsFetch, kDeadLetterFailed,
               kBatchResponse, kErrorCount };

  void Count(Outcome o, uint64_t n = 1) { outcomes_[o].fetch_add(n, std::memory_order_relaxed); }
  void CountError(Error e) { errors_[e].fetch_add(1, std::memory_order_relaxed); }
  uint64_t count(Outcome o) const { return outcomes_[o].load(std::memory_order_relaxed); }
  uint64_t errors(Error e) const { return errors_[e].load(std::memory_order_relaxed); }
  admin::Histogram& delivery_seconds() { return delivery_seconds_; }
  // Messages fetched and held until an earlier message of their ordering key is settled.
  void set_held(int64_t n) { held_.store(n, std::memory_order_relaxed); }

  std::string Render(int64_t in_flight, bool nats_connected, bool consumer_bound) const;

 private:
  std::array<std::atomic<uint64_t>, kOutcomeCount> outcomes_{};
  std::array<std::atomic<uint64_t>, kErrorCount> errors_{};
  admin::Histogram delivery_seconds_;
  std::atomic<int64_t> held_{0};
};

}  // namespace idem::worker
