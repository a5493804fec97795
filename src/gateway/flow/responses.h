// Conversions between HTTP responses and the responses the store keeps: what the client gets
// from an upstream answer, what is stored of it, and what a replay sends back.
#pragma once

#include <optional>
#include <string>

#include "gateway/http.h"
#include "idem/gateway_options.h"
#include "idem/record.h"

namespace idem::gateway::flow {

// The upstream's answer made fit for the client: hop-by-hop headers removed, the client's HTTP
// version and keep-alive.
Response ClientResponse(Response upstream, const Request& request);

// A stored response sent again, marked Idempotent-Replayed: true.
Response ReplayResponse(const StoredResponse& stored, const Request& request);

// What is stored of `response`: its status, the route's stored headers and its body; a body
// larger than `limit` is replaced by the not-stored marker (so a retry is never silently run
// again: replays answer that the response was not kept).
StoredResponse ToStored(const Response& response, const RoutePolicy& route, size_t limit);
// The same, written over `stored`: the strings and the header list it already holds are reused,
// so a caller that keeps one StoredResponse for many responses stops allocating once it has
// seen the largest.
void ToStored(const Response& response, const RoutePolicy& route, size_t limit,
              StoredResponse& stored);

// Whether `response` starts a long-running operation on `route` (long_running and a 202).
bool IsAccepted(const Response& response, const RoutePolicy& route);

// What is stored of an accepted operation's 202: as ToStored, plus the Operation-Location and
// Retry-After headers, which tell a client where and when to look again. A body larger than
// `limit` is left out (the status and headers are what a retry needs), never replaced by the
// not-stored marker: the operation is still running and must not look failed.
StoredResponse ToStoredAccepted(const Response& response, const RoutePolicy& route, size_t limit);

// An accepted operation's 202 sent again to a duplicate, marked Idempotent-Replayed: true, with
// Retry-After (the upstream's, if it gave one; else 1 second).
Response AcceptedReplayResponse(const StoredResponse& accepted, const Request& request);

// What is stored when the upstream's answer was too large even to read: 502 and the marker.
StoredResponse OversizedAnswer();

// The marker's value (the body's size, or "oversized"), if `stored` carries it.
std::optional<std::string> NotStoredMarker(const StoredResponse& stored);

}  // namespace idem::gateway::flow
