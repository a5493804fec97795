// The payloads of settle notices (ExecutionHooks::SubscribeSettled), as the stores' SQL and
// Lua write them, read back into a SettleNotice (store_execution.h).
//
// A notice names a key by a hex SHA-256 of its scope (DigestFromNotice). A completion whose
// response is small enough carries it too, so that a subscriber need not read the record:
//   PostgreSQL (text, NOTIFY):  "<64 hex digest> <64 hex fingerprint> <length> <base64 response>"
//   Redis (bytes, PUBLISH):     "=<response length>:<32-byte fingerprint><response><redis key>"
// where the response is internal::EncodeResponse's and its length is in bytes, decimal (the
// encoding runs the body to its end: the length is what shows a payload cut short). Both keep the key where a reader that
// knows only the plain form finds it (the first 16 hex digits; the last '{'), so a gateway of
// an older version still wakes its waiters. A carried part that does not decode is dropped:
// the notice then names only the key, and its subscriber reads the record as before.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "idem/fingerprint.h"
#include "idem/record.h"
#include "store/store_execution.h"

namespace idem::internal {

// A notice read from its payload; view() is valid while it lives.
struct ParsedNotice {
  std::string digest;  // empty: the payload names no key (deliver nothing)
  std::optional<Fingerprint> fingerprint;  // both set, or both empty
  std::optional<StoredResponse> response;

  SettleNotice view() const;
};

ParsedNotice ParsePostgresNotice(std::string_view payload);
ParsedNotice ParseRedisNotice(std::string_view payload);

}  // namespace idem::internal
