// The idempotency record: what a store keeps for one scope.
//
// Life of a record:
//
//        begin (absent)                 complete (token matches)
//   ─────────────────────▶ IN FLIGHT ──────────────────────────▶ COMPLETED ──▶ expires (TTL)
//                           │   ▲  │                                 │
//        release / expiry   │   │  │ begin after the lease deadline:  │ purge
//   ◀───────────────────────┘   └──┘ takeover, new fencing token     ▼
//                                                                  (gone)
//
// A long-running operation (Store::Accept) stays IN FLIGHT under the same token while a
// background job finishes it: the record then also holds the operation's accepted response (a
// 202), which Begin hands to duplicates, and a longer lease. The job ends it with Complete or
// Release like any owner; a takeover after its lease drops the accepted response.
//
// The fencing token increases every time ownership of the scope changes (first begin, each
// takeover), and never repeats for a scope even after the record is released or purged, so a
// zombie holding an old token can never complete a newer owner's record. Tokens order owners
// of one scope; two scopes may hold equal tokens, so a token means nothing without its scope.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "idem/fingerprint.h"
#include "idem/scope.h"

namespace idem {

using FencingToken = uint64_t;

enum class RecordState : uint8_t {
  kInFlight = 1,   // an owner holds a lease and is executing the request
  kCompleted = 2,  // the response is stored and will be replayed until the record expires
};

std::string_view RecordStateName(RecordState state);

using Header = std::pair<std::string, std::string>;

// A response as it will be replayed: status, the headers chosen for storage, and the body, all
// byte for byte as the upstream produced them.
struct StoredResponse {
  int status = 0;
  std::vector<Header> headers;
  std::string body;

  friend bool operator==(const StoredResponse&, const StoredResponse&) = default;
};

struct Record {
  Scope scope;
  Fingerprint fingerprint;
  RecordState state = RecordState::kInFlight;
  FencingToken token = 0;
  // When the current owner's lease runs out; after it, the next begin takes over.
  // Meaningful only while in flight.
  TimePoint lease_deadline;
  TimePoint created_at;
  // After this instant the record counts as absent everywhere, and sweep may delete it.
  TimePoint expires_at;
  // Present exactly when state == kCompleted.
  std::optional<StoredResponse> response;
  // While in flight: the accepted response of a long-running operation (Store::Accept), if
  // its owner stored one. Never present once completed.
  std::optional<StoredResponse> accepted;

  friend bool operator==(const Record&, const Record&) = default;
};

}  // namespace idem
