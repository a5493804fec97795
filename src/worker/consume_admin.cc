#include "worker/consume_admin.h"

#include <utility>

namespace idem::worker {

ConsumeAdmin::ConsumeAdmin(boost::asio::io_context& io, ConsumeAdminState state)
    : io_(io), state_(std::move(state)) {}

Status ConsumeAdmin::Listen(std::string* address) {
  admin::AdminRoutes routes;
  routes.readiness = admin::ReadyUnless([this] { return NotReadyReason(); });
  routes.metrics = [this] {
    return state_.metrics.Render(state_.in_flight(), state_.nats_connected.load(),
                                 state_.bound.load());
  };
  auto started =
      admin::AdminServer::Start(io_.get_executor(), state_.options.admin_listen, std::move(routes));
  if (!started.ok()) return started.status().WithContext("--admin-listen");
  server_ = std::move(*started);
  *address = server_->address();
  return Status::Ok();
}

std::string ConsumeAdmin::NotReadyReason() const {
  if (state_.stopping) return "shutting down";
  if (!state_.nats_connected) return "nats unreachable: " + state_.options.nats_url;
  if (!state_.bound) return "not bound to " + state_.options.stream + "/" + state_.options.consumer;
  return "";
}

}  // namespace idem::worker
