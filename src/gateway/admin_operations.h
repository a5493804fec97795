// The admin API's endpoints for long-running operations (docs/gateway.md, "Long-running
// operations"): the background job that finishes an accepted operation completes it with its
// final response, or releases it after a transient failure, with the fencing token the upstream
// received in Idempotency-Fencing-Token.
//
//   POST /v1/operations/complete  {"key", "tenant_digest", "token", "status",
//                                  "headers": [[name, value], ...], "body": base64,
//                                  "ttl_seconds"}
//   POST /v1/operations/release   {"key", "tenant_digest", "token"}
//
// This file turns a request body into the store call's arguments, or says which field is wrong;
// admin.cc makes the call.
#pragma once

#include <optional>
#include <string_view>

#include "idem/gateway_options.h"
#include "idem/record.h"
#include "idem/scope.h"
#include "idem/status.h"

namespace idem::gateway {

enum class OperationEnd { kComplete, kRelease };

struct OperationCall {
  Scope scope;  // tenant digest, no client, key: as the gateway scopes a request
  FencingToken token = 0;
  StoredResponse response;  // kComplete: the final response
  Duration ttl{0};          // kComplete: how long retries replay it
};

// Parses the JSON body of `end`'s endpoint. Fields:
//   key            required: the Idempotency-Key, as the client sent it
//   tenant_digest  the record's tenant digest (GET /v1/records shows it), or `tenant`: the
//                  tenant header's value, digested as the gateway does; neither: the anonymous
//                  tenant (requests that sent no tenant header)
//   token          required: the fencing token, a positive integer or its decimal string
//   status         complete: required, 200 to 599
//   headers        complete: [[name, value], ...]; names are HTTP tokens, values have no CR,
//                  LF or NUL; hop-by-hop and framing headers (Content-Length,
//                  Transfer-Encoding, Connection, ...) are refused, the gateway frames replays
//   body           complete: base64 (standard alphabet, padded); default empty
//   ttl_seconds    complete: default `default_ttl`
// Unknown fields are refused, so a misspelt one is not silently ignored. kInvalidArgument
// names the field and what is wrong with it.
Result<OperationCall> ParseOperationCall(std::string_view body, OperationEnd end,
                                         Duration default_ttl);

// How long a completion through the admin API is kept when the job does not say: the longest
// retention of the long_running routes (24 h when there are none).
Duration DefaultOperationTtl(const GatewayOptions& options);

}  // namespace idem::gateway
