// The observing side of one request: its log line and metrics (the last step of the flow), and a
// timer for the store calls it makes.
#pragma once

#include <chrono>
#include <string>

#include "core/scope_digest.h"
#include "gateway/http.h"
#include "gateway/problem.h"
#include "gateway/services.h"

namespace idem::gateway::flow {

using SteadyClock = std::chrono::steady_clock;

double MillisSince(SteadyClock::time_point start);

// One request's trace. Thread safety: none; it belongs to its request.
class Trace {
 public:
  // Reads the request's method and path now, before forwarding may change the request.
  Trace(Services& services, const Request& request);

  // The wall-clock time the request arrived (services.clock()): the earliest the store can have
  // started its lease, so retries after the response give up in time (completion_retry.h).
  TimePoint arrival() const { return arrival_; }

  // The scope of the request's key, held by the caller for the trace's life: key_digest()
  // digests it.
  void set_scope(const Scope& scope) { scope_ = &scope; }
  // The key's digest (Scope::Digest()) for log lines and waiters, made on first use: a request
  // that is logged nowhere and awaited by no one needs none. Empty when the request has no key.
  std::string_view key_digest() const;

  // Filled in as the flow learns them, for the log line.
  FencingToken token = 0;
  std::string detail;  // why, for errors

  // Counts the request under its outcome and writes its log line.
  // Call it once, last, then co_return the response by name (g++ 12 mishandles temporaries
  // inside co_return and co_await).
  void Finish(const Answer& answer, const Response& response);
  void Finish(Outcome outcome, const Response& response);

 private:
  Services& s_;
  std::string method_;
  std::string path_;
  SteadyClock::time_point start_ = SteadyClock::now();
  TimePoint arrival_;
  const Scope* scope_ = nullptr;
  mutable internal::ScopeDigest key_digest_;
};

// Times one store call into the store latency histogram, from construction to destruction.
struct StoreTimer {
  explicit StoreTimer(Metrics& metrics) : metrics_(metrics) {}
  ~StoreTimer();
  StoreTimer(const StoreTimer&) = delete;
  StoreTimer& operator=(const StoreTimer&) = delete;

 private:
  Metrics& metrics_;
  SteadyClock::time_point started_ = SteadyClock::now();
};

}  // namespace idem::gateway::flow
