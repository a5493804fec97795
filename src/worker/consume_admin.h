// `idem consume`'s admin endpoints (--admin-listen): GET /healthz, /readyz and /metrics, on the
// shared admin listener (admin/admin_server.h) and the sidecar's event loop. docs/worker.md
// ("Admin endpoints") describes the answers.
//
// Thread safety: Listen is called once, before the event loop runs; the endpoints run on the
// event loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "admin/admin_server.h"
#include "idem/status.h"
#include "worker/consume.h"
#include "worker/consume_metrics.h"

namespace idem::worker {

// What the endpoints read; owned by the sidecar, which outlives the listener.
struct ConsumeAdminState {
  const ConsumeOptions& options;
  const ConsumeMetrics& metrics;
  const std::atomic<bool>& nats_connected;
  const std::atomic<bool>& bound;
  const std::atomic<bool>& stopping;
  std::function<int64_t()> in_flight;  // messages being delivered, for /metrics
};

class ConsumeAdmin {
 public:
  ConsumeAdmin(boost::asio::io_context& io, ConsumeAdminState state);

  // Listens on options.admin_listen and serves every connection on `io`; `*address` receives
  // the address listened on ("HOST:PORT"). kInvalidArgument for a malformed address,
  // kUnavailable when it cannot be listened on.
  Status Listen(std::string* address);

 private:
  // /readyz: "" when connected to NATS, bound to the consumer and not stopping.
  std::string NotReadyReason() const;

  boost::asio::io_context& io_;
  ConsumeAdminState state_;
  std::unique_ptr<admin::AdminServer> server_;
};

}  // namespace idem::worker
