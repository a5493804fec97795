// Gateway metrics in Prometheus text format: request outcomes and latency histograms.
// (Debian ships no C++ Prometheus client; the text format is a few lines.)
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "admin/histogram.h"
#include "idem/clock.h"

namespace idem::gateway {

// What became of one request. Names are the `outcome` label values.
enum class Outcome {
  kExecuted,     // forwarded under a fresh or taken-over key and completed
  kReplayed,     // answered from the store
  kConflict,     // 409: the same key still in flight
  kMismatch,     // 422: the key was used with another request
  kMissingKey,   // 400: required key absent
  kInvalidKey,   // 400: key malformed
  kReleased,     // forwarded, transient failure, key released for the retry
  kStoreError,   // 503: the store failed; 500: a record is corrupt, or the gateway failed
  kPassthrough,  // no idempotency for this route or request
  kRejected,     // malformed HTTP, body too large, ...
  kKeyExpired,   // 422: the key's embedded time is outside the route's window
  kAccepted,     // forwarded on a long_running route, answered 202: the operation runs on
  kCount,
};

std::string_view OutcomeLabel(Outcome outcome);

// The store writes a request may have to finish after its response (completion_retry.h).
enum class StoreWrite { kComplete, kRelease, kAccept, kCount };
std::string_view StoreWriteLabel(StoreWrite write);  // "complete", "release", "accept"

// How a wait for a key in flight (`Prefer: wait`) ended. Names are the `end` label values.
enum class WaitEnd {
  kReplay,     // the first attempt completed: its response was replayed
  kExecution,  // it was released (or its lease ran out): this request executed
  kTimeout,    // still in flight at the deadline: 409
  kHangup,     // the client closed its connection while waiting
  kOther,      // a mismatch, a store failure, or shutdown
  kCount,
};
std::string_view WaitEndLabel(WaitEnd end);

using admin::Histogram;

class Metrics {
 public:
  void Count(Outcome outcome) {
    outcomes_[static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t count(Outcome outcome) const {
    return outcomes_[static_cast<size_t>(outcome)].load(std::memory_order_relaxed);
  }
  Histogram& request_seconds() { return request_seconds_; }
  Histogram& store_seconds() { return store_seconds_; }
  Histogram& upstream_seconds() { return upstream_seconds_; }
  // A completion or accept refused because its token no longer owned the key.
  void CountZombie() { zombies_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t fenced_completions() const { return zombies_.load(std::memory_order_relaxed); }
  void CountTakeover() { takeovers_.fetch_add(1, std::memory_order_relaxed); }
  // Waits for a key in flight: one started, refused (max_waiters reached), or ended.
  void WaitStarted() { waits_started_.fetch_add(1, std::memory_order_relaxed); }
  void CountWaitRefused() { waits_refused_.fetch_add(1, std::memory_order_relaxed); }
  void WaitEnded(WaitEnd end, Duration waited) {
    waits_ended_[static_cast<size_t>(end)].fetch_add(1, std::memory_order_relaxed);
    wait_seconds_.Observe(waited);
  }
  uint64_t waits_ended(WaitEnd end) const {
    return waits_ended_[static_cast<size_t>(end)].load(std::memory_order_relaxed);
  }
  // Client connections: open now, refused at max_connections, and accepts that failed because
  // the process or the system ran out of file descriptors.
  void ConnectionOpened() { connections_open_.fetch_add(1, std::memory_order_relaxed); }
  void ConnectionClosed() { connections_open_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t connections_open() const { return connections_open_.load(std::memory_order_relaxed); }
  void CountRefusedConnection() { connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  // A connection refused because its address held max_connections_per_client already.
  void CountRefusedClientConnection() {
    client_connections_refused_.fetch_add(1, std::memory_order_relaxed);
  }
  // The per-address limit in force, and how many addresses hold connections now (set by the
  // server, read by Render).
  void SetConnectionsPerClientLimit(size_t limit) {
    connections_per_client_limit_.store(limit, std::memory_order_relaxed);
  }
  void SetClientAddresses(std::function<size_t()> addresses) {
    client_addresses_ = std::move(addresses);
  }
  void CountAcceptError() { accept_errors_.fetch_add(1, std::memory_order_relaxed); }

  // Each attempt at a Complete or Release after the response was sent, and its result.
  void CountWriteAttempt(StoreWrite write, bool ok) {
    write_attempts_[Index(write)][ok ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t write_attempts(StoreWrite write, bool ok) const {
    return write_attempts_[Index(write)][ok ? 0 : 1].load(std::memory_order_relaxed);
  }
  // A release given up on because the lease was about to run out. (Completions and accepts are
  // never given up: they are held until stored, see pending_completions.h.)
  void CountWriteAbandoned(StoreWrite write) {
    writes_abandoned_[Index(write)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t writes_abandoned(StoreWrite write) const {
    return writes_abandoned_[Index(write)].load(std::memory_order_relaxed);
  }
  // Writes being retried in the background now; shutdown waits for them.
  void WriteRetryStarted() { writes_retrying_.fetch_add(1, std::memory_order_acq_rel); }
  void WriteRetryEnded() { writes_retrying_.fetch_sub(1, std::memory_order_acq_rel); }
  int store_writes_retrying() const { return writes_retrying_.load(std::memory_order_acquire); }
  // Completions and accepts answered to their client but not stored yet, held in memory
  // (PendingCompletions); and requests refused because max_pending_completions were held.
  void PendingCompletionHeld() { pending_completions_.fetch_add(1, std::memory_order_relaxed); }
  void PendingCompletionDropped() { pending_completions_.fetch_sub(1, std::memory_order_relaxed); }
  int64_t pending_completions() const {
    return pending_completions_.load(std::memory_order_relaxed);
  }
  void CountPendingRefusal() { pending_refusals_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t pending_refusals() const { return pending_refusals_.load(std::memory_order_relaxed); }

  std::string Render() const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Outcome::kCount)> outcomes_{};
  std::atomic<uint64_t> zombies_{0};
  std::atomic<uint64_t> takeovers_{0};
  std::atomic<uint64_t> waits_started_{0};
  std::atomic<uint64_t> waits_refused_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(WaitEnd::kCount)> waits_ended_{};
  Histogram wait_seconds_;
  static size_t Index(StoreWrite write) { return static_cast<size_t>(write); }
  static constexpr size_t kWrites = static_cast<size_t>(StoreWrite::kCount);
  std::array<std::array<std::atomic<uint64_t>, 2>, kWrites> write_attempts_{};  // [write][failed]
  std::array<std::atomic<uint64_t>, kWrites> writes_abandoned_{};
  std::atomic<int> writes_retrying_{0};
  std::atomic<int64_t> pending_completions_{0};
  std::atomic<uint64_t> pending_refusals_{0};
  std::atomic<int64_t> connections_open_{0};
  std::atomic<uint64_t> connections_refused_{0};
  std::atomic<uint64_t> client_connections_refused_{0};
  std::atomic<size_t> connections_per_client_limit_{0};
  std::function<size_t()> client_addresses_;  // set once, before the listener opens
  std::atomic<uint64_t> accept_errors_{0};
  Histogram request_seconds_;
  Histogram store_seconds_;
  Histogram upstream_seconds_;
};

}  // namespace idem::gateway
