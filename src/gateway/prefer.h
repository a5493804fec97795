// The `Prefer` request header (RFC 7240), as far as the gateway acts on it: `wait=N`, the
// seconds a client is willing to wait for a duplicate's first attempt to settle instead of
// getting 409 at once (docs/gateway.md, "Waiting for an in-flight result").
#pragma once

#include <optional>

#include "gateway/http.h"
#include "idem/clock.h"

namespace idem::gateway {

// The `wait` preference of `request`: the first `wait=N` across its Prefer fields (each a
// comma-separated list of `token [= value] *(; parameter)`, names case-insensitive, the value
// optionally quoted). nullopt when there is none or its value is not a number of seconds
// (RFC 7240: a preference the server cannot use is ignored, not an error). Values above a day
// are read as a day.
std::optional<Duration> PreferredWait(const Request& request);

}  // namespace idem::gateway
