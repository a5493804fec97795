#include "chaos/nats_admin.h"

#include <utility>

namespace idem::chaos {

NatsAdmin::NatsAdmin(std::string url, std::string name)
    : url_(std::move(url)), name_(std::move(name)) {}

Result<std::shared_ptr<worker::NatsConnection>> NatsAdmin::Get() {
  MutexLock lock(mu_);
  const bool closed = conn_ != nullptr && natsConnection_IsClosed(conn_->get());
  if (conn_ != nullptr && !closed) return conn_;
  auto connected = worker::NatsConnection::Connect(url_, name_);
  if (!connected.ok()) return connected.status();
  if (closed) ++replaced_;
  // The closed connection is destroyed when its last holder lets it go (at once: nothing to
  // flush on a closed connection).
  conn_ = std::shared_ptr<worker::NatsConnection>(std::move(*connected));
  return conn_;
}

int NatsAdmin::replaced() const {
  MutexLock lock(mu_);
  return replaced_;
}

}  // namespace idem::chaos
