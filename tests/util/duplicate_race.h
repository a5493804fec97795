// Concurrent duplicates for end-to-end tests: N clients released together, each sending the
// same idempotent request, and a tally of what they got back.
#pragma once

#include <functional>

#include "util/http_client.h"

namespace idem::testing {

struct DuplicateTally {
  int created = 0;    // 201: executed, or a replay of the execution
  int conflicts = 0;  // 409 with Retry-After: the duplicate arrived while the first was in flight
  int other = 0;      // anything else: a failure for a duplicate race
};

// Starts `clients` threads, releases them at once, and has thread i call `send(i)`.
DuplicateTally RaceDuplicates(int clients, const std::function<HttpResponse(int)>& send);

}  // namespace idem::testing
