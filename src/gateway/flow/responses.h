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

// What is stored when the upstream's answer was too large even to read: 502 and the marker.
StoredResponse OversizedAnswer();

// The marker's value (the body's size, or "oversized"), if `stored` carries it.
std::optional<std::string> NotStoredMarker(const StoredResponse& stored);

}  // namespace idem::gateway::flow
