// The gateway's admin listener: health, readiness, metrics, record inspection and purge, and the
// end of long-running operations.
//
//   GET    /healthz                       200 while the process runs
//   GET    /readyz                        200 when the store answers ("ready, degraded: ..."
//                                         while the tiered store serves without Redis), else 503
//   GET    /metrics                       Prometheus text
//   GET    /v1/records?key=K[&tenant=T]   the record as JSON, or 404
//   DELETE /v1/records?key=K[&tenant=T]   purge it ("the resource was deleted, then retried")
//   POST   /v1/operations/complete        a long-running operation's job stores its final
//                                         response (admin_operations.h)
//   POST   /v1/operations/release         ... or gives the key up after a transient failure
// `tenant` is the tenant header's value as clients send it (it is hashed the same way), or
// `tenant_digest` its SHA-256 hex as the record JSON shows it (logs show only a digest of the
// whole scope, never the tenant). Anything else is 404 not-found, as problem details.
//
// The first three are every daemon's (admin/admin_routes.h); the gateway serves them on its own
// listener (server.cc), which shares the client port's limits and descriptor reserve.
#pragma once

#include "admin/admin_routes.h"
#include "gateway/services.h"

namespace idem::gateway {

// REQUIRES: `services` outlives the routes and every request they answer.
admin::AdminRoutes AdminRoutesFor(Services& services);

}  // namespace idem::gateway
