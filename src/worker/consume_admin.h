// `idem consume`'s admin listener (--admin-listen): GET /healthz, /readyz and /metrics, served
// on the sidecar's event loop. docs/worker.md ("Admin endpoints") describes the answers.
//
// Thread safety: Listen is called once, before the event loop runs; everything else runs on
// the event loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "gateway/http.h"
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
  ConsumeAdmin(gateway::asio::io_context& io, ConsumeAdminState state);

  // Listens on options.admin_listen and serves every connection on `io`; `*bound` receives the
  // address listened on. kInvalidArgument for a malformed address, kUnavailable when it cannot
  // be listened on.
  Status Listen(gateway::tcp::endpoint* bound);

 private:
  gateway::Task<void> AcceptAdmin();
  gateway::Task<void> AdminSession(gateway::tcp::socket socket);
  gateway::Response Admin(const gateway::Request& req);

  gateway::asio::io_context& io_;
  const ConsumeOptions& options_;
  const ConsumeMetrics& metrics_;
  const std::atomic<bool>& nats_connected_;
  const std::atomic<bool>& bound_;
  const std::atomic<bool>& stopping_;
  std::function<int64_t()> in_flight_;
  std::unique_ptr<gateway::tcp::acceptor> admin_;
};

}  // namespace idem::worker
