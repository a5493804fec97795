// The retention guard: on routes whose keys carry their creation time (UUIDv7, ULID), refuse a
// key older than the route's retention, because its record may already be gone and running it
// again would not be a replay. A pure function of the route, the key and the time.
#pragma once

#include <string>
#include <string_view>

#include "idem/gateway_options.h"

namespace idem::gateway {

enum class KeyAgeVerdict {
  kAccepted,      // the route has no key_format, or the key's time is within the window
  kWrongFormat,   // not a key of the route's format -> 400 key-format
  kExpired,       // older than the retention -> 422 key-expired
  kInFuture,      // further ahead than max_key_future_skew -> 422 key-in-future
};

struct KeyAgeCheck {
  KeyAgeVerdict verdict = KeyAgeVerdict::kAccepted;
  std::string detail;  // for the problem response, when not accepted
};

// Accepted when now - retention <= key time <= now + max_key_future_skew.
KeyAgeCheck CheckKeyAge(const RoutePolicy& route, std::string_view key, TimePoint now);

}  // namespace idem::gateway
