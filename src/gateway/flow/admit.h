// Step 1 of the request flow: admit. Decides, without I/O, whether a request goes to the
// upstream unprotected (its route does not use keys), is refused (no key, a malformed key, a key
// the retention guard rejects, a tenant or fingerprint that cannot be computed), or is admitted
// to the protocol with its scope (tenant digest + key) and fingerprint.
#pragma once

#include <string>

#include "gateway/flow/tenant_digest.h"
#include "gateway/http.h"
#include "gateway/problem.h"
#include "idem/gateway_options.h"
#include "idem/scope.h"

namespace idem::gateway::flow {

// A request the gateway answers itself, before the store is asked.
struct Refusal {
  const Answer* answer = nullptr;
  std::string client_detail;  // the problem response's `detail`
  std::string detail;         // the request log line's detail (may be empty)
  std::string log_message;    // non-empty: written with LogAnswer
};

struct Admission {
  enum class Kind {
    kPassthrough,  // forward as is: the route's key is off, or optional and absent
    kRefused,      // answer `refusal`
    kAdmitted,     // claim `scope` with `fingerprint`
  };
  Kind kind = Kind::kRefused;
  const RoutePolicy* route = nullptr;  // always set
  Refusal refusal;                     // kRefused
  Scope scope;                         // kAdmitted
  Fingerprint fingerprint;             // kAdmitted
};

// Admits `request` at time `now` (the gateway's clock, for the retention guard). Also prepares
// the request for the upstream: a client's own fencing-token header is removed (only the gateway
// issues tokens) and the hop-by-hop headers go, before the fingerprint is taken, so that the
// fingerprint covers only what the upstream will receive. The tenant's digest comes from
// `tenants` (the connection's; may be null: digested afresh). Never throws.
Admission Admit(const GatewayOptions& options, Request& request, TimePoint now,
                TenantDigester* tenants = nullptr);

}  // namespace idem::gateway::flow
