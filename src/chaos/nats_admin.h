// The harness's own NATS connection: `idem chaos` changes the stream's duplicate window
// (relay_outage) and creates and deletes the replaying consumers (consumer_replay) through it.
//
// It is the product's worker::NatsConnection, which nats.c reconnects after every disconnect,
// forever. But nats.c never reconnects a connection it has *closed*: it closes one for good on
// an -ERR from the server that it does not recognise, or once its reconnect attempts run out,
// and every call on it then fails at once with "Connection Closed". Get() replaces such a
// connection, so a harness client never stays dead.
//
// Thread safety: Get and replaced from any thread. A connection handed out stays valid while
// its shared_ptr is held, even after Get replaced it.
#pragma once

#include <memory>
#include <string>

#include "core/mutex.h"
#include "idem/status.h"
#include "worker/jetstream.h"

namespace idem::chaos {

class NatsAdmin {
 public:
  // Connects on the first Get, to `url` ("nats://HOST:PORT") as client `name`.
  NatsAdmin(std::string url, std::string name);

  // A connection that nats.c has not closed: the current one (it may be reconnecting: a call
  // on it then waits or fails like any NATS call while the server is down), or a new one in
  // place of a closed one. kInvalidArgument for a malformed URL; a server that is down is not
  // an error (the new connection keeps trying, as the product's do).
  Result<std::shared_ptr<worker::NatsConnection>> Get() IDEM_EXCLUDES(mu_);

  // How many closed connections Get has replaced.
  int replaced() const IDEM_EXCLUDES(mu_);

 private:
  const std::string url_;
  const std::string name_;
  mutable Mutex mu_;
  std::shared_ptr<worker::NatsConnection> conn_ IDEM_GUARDED_BY(mu_);
  int replaced_ IDEM_GUARDED_BY(mu_) = 0;
};

}  // namespace idem::chaos
