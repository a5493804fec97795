// idem gateway: an HTTP reverse proxy that gives any upstream Idempotency-Key semantics.
// docs/gateway.md describes the behaviour; gateway_options.h every setting.
#pragma once

#include "idem/gateway_options.h"

namespace idem {

// Runs the gateway until SIGTERM or SIGINT, then stops accepting, lets requests in progress
// finish (up to options.shutdown_grace), flushes the store and returns.
// Returns the process exit code: 0 after a clean shutdown, 2 when the options, the store, the
// upstream or a listen address are unusable (the reason is logged).
int RunGateway(const GatewayOptions& options);

}  // namespace idem
