// The request path: from a complete client request to the response the client gets, with the
// idempotency protocol in between (docs/gateway.md has the table). The steps are in flow/:
// admit -> claim -> forward -> settle, then the response is counted and logged (flow/trace.h).
#pragma once

#include "gateway/flow/tenant_digest.h"
#include "gateway/flow/wait.h"
#include "gateway/http.h"
#include "gateway/services.h"

namespace idem::gateway {

// Handles one request. Never throws. Runs to the end even if the client has gone: a completion
// or a release must not be cut short, because that client is the one who will retry. Only a
// wait for a key in flight ends early when `client` (may be null) reports a hang-up. `tenants`
// (may be null) is the connection's: it digests the tenant's credential (flow::Admit).
Task<Response> HandleProxyRequest(Services& services, Request& request,
                                  flow::ClientHangup* client = nullptr,
                                  flow::TenantDigester* tenants = nullptr);

}  // namespace idem::gateway
