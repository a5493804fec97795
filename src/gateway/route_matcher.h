// Which route policy a request gets. Upstream frameworks read one request target in different
// ways: some strip path parameters ("/pay;x", Java servlet containers), some decode "%2F" to
// "/" before routing (Go's net/http, Apache with AllowEncodedSlashes), some treat "\" as "/"
// (IIS), some ignore case (ASP.NET). The gateway matches every such reading of the path and
// gives the request the strictest route that any reading matches (key required over optional
// over off), so the form of the target cannot carry a request past a protected route.
// The request itself is forwarded and fingerprinted as sent (origin-form).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "idem/gateway_options.h"

namespace idem::gateway {

// The readings of `path` (a request target's path, without the query) that routes are matched
// against, the gateway's canonical one (NormalizePathForRouting) first, without duplicates.
std::vector<std::string> RoutingReadings(std::string_view path);

// Whether `path` is its own only reading: it starts with '/', holds no '%', '\\' or ';', and no
// empty, "." or ".." segment (a trailing '/' is kept). Such a path, the common case, is matched
// as it is, without computing the readings.
bool IsOnlyReading(std::string_view path);

// The policy for a request: over every reading, the first route (in file order) that demands
// the most (required > optional > off); on a tie, the earliest reading's. Method and path are
// compared ignoring case (GatewayOptions::Match).
const RoutePolicy& MatchRoute(const GatewayOptions& options, std::string_view method,
                              std::string_view path);

}  // namespace idem::gateway
