// A small HTTP listener for a background process's health and metrics:
//   GET /healthz   200 while the process runs
//   GET /readyz    200 when ready() says so, else 503 with its reason
//   GET /metrics   Prometheus text from metrics()
// One thread, Boost.Beast; every exchange bounded by 5 s.
//
// Thread safety: Start and Stop from one thread; the callbacks run on the listener's thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "idem/status.h"

namespace idem::outbox {

struct AdminHandlers {
  // Empty string: ready; otherwise why not.
  std::function<std::string()> not_ready_reason;
  std::function<std::string()> metrics;
};

class AdminServer {
 public:
  // Binds `host_port` ("127.0.0.1:9090"; port 0 picks one) and serves until Stop or
  // destruction. kInvalidArgument for a malformed address, kUnavailable when it cannot bind.
  static Result<std::unique_ptr<AdminServer>> Start(const std::string& host_port,
                                                    AdminHandlers handlers);
  virtual ~AdminServer() = default;
  // "HOST:PORT" actually bound.
  virtual std::string address() const = 0;
  virtual void Stop() = 0;
};

}  // namespace idem::outbox
