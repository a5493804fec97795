// The argument checks of store.h's REQUIRES clauses, made once here so every store (memory,
// SQLite, Redis, PostgreSQL and its transactional API) refuses the same calls with the same
// kInvalidArgument, before it touches its engine.
#pragma once

#include "idem/clock.h"
#include "idem/status.h"

namespace idem::internal {

// Begin's lease: OK when positive, else kInvalidArgument "begin: lease must be positive".
inline Status CheckLease(Duration lease) {
  return lease > Duration(0) ? Status::Ok()
                             : InvalidArgumentError("begin: lease must be positive");
}

// Complete's ttl: OK when positive, else kInvalidArgument "complete: ttl must be positive".
inline Status CheckTtl(Duration ttl) {
  return ttl > Duration(0) ? Status::Ok() : InvalidArgumentError("complete: ttl must be positive");
}

}  // namespace idem::internal
