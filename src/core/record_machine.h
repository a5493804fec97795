// The record state machine shared by the stores that run idem's logic in C++ (memory, SQLite).
// Stores that run it inside the engine (Redis Lua, PostgreSQL SQL) implement the same table;
// the contract suite holds them all to it.
//
// Pure functions of (record, request, now): no I/O, no locking. The caller holds whatever makes
// the read-decide-write sequence atomic for the scope.
#pragma once

#include "idem/clock.h"
#include "idem/fingerprint.h"
#include "idem/record.h"
#include "idem/store.h"

namespace idem::internal {

// The fields of a record the decisions need.
struct RecordHead {
  Fingerprint fingerprint;
  RecordState state = RecordState::kInFlight;
  FencingToken token = 0;
  TimePoint lease_deadline;
  TimePoint expires_at;
};

enum class BeginAction {
  kAcquire,   // no live record: insert an in-flight one with a fresh token
  kTakeOver,  // in flight with its lease run out: give it a fresh token and a new lease
  kReplay,    // completed with the same fingerprint: return the stored response
  kInFlight,  // in flight under a live lease
  kMismatch,  // held by another fingerprint
};

struct BeginDecision {
  BeginAction action;
  Duration retry_after{0};  // for kInFlight: remaining lease, at least 1 ms
};

// A record counts as absent once `now` reaches its expiry.
inline bool IsLive(const RecordHead& head, TimePoint now) { return now < head.expires_at; }

// REQUIRES: `existing` is null when the scope has no record.
BeginDecision DecideBegin(const RecordHead* existing, const Fingerprint& fingerprint,
                          TimePoint now);

// True when `token` owns the live in-flight record `existing` (Complete and Release may proceed).
bool OwnsInFlight(const RecordHead* existing, FencingToken token, TimePoint now);

// Expiry of an in-flight record with this lease deadline (see StoreOptions::abandoned_retention).
inline TimePoint InFlightExpiry(TimePoint lease_deadline, const StoreOptions& options) {
  return lease_deadline + options.abandoned_retention;
}

}  // namespace idem::internal
