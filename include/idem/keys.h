// Idempotency keys: generators and parsers for UUIDv4, UUIDv5, UUIDv7 (RFC 9562) and ULID.
//
// Which to choose (docs/client.md has the long form):
//   * UUIDv7 or ULID for a key per logical operation: unique, and time-ordered, so a store's
//     index stays compact and a gateway can refuse a key older than its retention.
//   * UUIDv5 over a namespace and a versioned intent ("v2:order:123:charge") when the key must
//     be derived from what the action is, so every producer computes the same key. Bump the
//     version prefix when the meaning of "the same action" changes.
//   * UUIDv4 when nothing may leak the creation time.
//
// Randomness comes from OpenSSL's RAND_bytes; a failure of it is kInternal.
// Thread safety: the free functions and both generator classes may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "idem/clock.h"
#include "idem/status.h"

namespace idem {

// 16 bytes in network order, as RFC 9562 lays them out.
struct Uuid {
  std::array<uint8_t, 16> bytes{};

  int version() const { return bytes[6] >> 4; }
  // "2ed6657d-e927-568b-95e1-2665a8aea6a2": lower-case, hyphenated.
  std::string ToString() const;
  friend bool operator==(const Uuid&, const Uuid&) = default;
};

// Parses the hyphenated 36-character form, hex digits in either case. Any version and variant.
// kInvalidArgument names what is wrong.
Result<Uuid> ParseUuid(std::string_view text);

// The RFC 9562 namespace IDs (section 6.6), and a lookup by name: "dns", "url", "oid", "x500".
extern const Uuid kNamespaceDns;
extern const Uuid kNamespaceUrl;
extern const Uuid kNamespaceOid;
extern const Uuid kNamespaceX500;
// `text` is one of the names above or a UUID.
Result<Uuid> ParseNamespace(std::string_view text);

// A random (version 4) UUID.
Result<Uuid> NewUuidV4();

// The name-based (version 5, SHA-1) UUID of `name` in `ns`. Deterministic: the same namespace
// and name give the same UUID everywhere.
Result<Uuid> UuidV5(const Uuid& ns, std::string_view name);

// UUIDv5 over a versioned intent: `intent` must start with a version tag "v<digits>:" and have
// something after it ("v2:order:123:charge"), so that changing what counts as "the same action"
// is a visible edit of the version. kInvalidArgument otherwise.
Result<Uuid> IntentKey(const Uuid& ns, std::string_view intent);

// Builds a UUIDv7 from its fields (the version and variant bits are set here). `rand_a` keeps
// its low 12 bits, `rand_b` its low 62. REQUIRES: 0 <= unix_ms < 2^48.
Uuid MakeUuidV7(int64_t unix_ms, uint16_t rand_a, uint64_t rand_b);

// The millisecond timestamp of a UUIDv7 string; kInvalidArgument if `text` is not a UUID or
// not version 7 with the RFC 9562 variant.
Result<TimePoint> UuidV7Time(std::string_view text);

// UUIDv7 generator, monotonic within one process: every UUID it returns is greater (as bytes
// and as a string) than the one before, even within one millisecond and when the clock steps
// back. RFC 9562 section 6.2 method 2, "monotonic random": the 74 bits of rand_a and rand_b are
// one random number, drawn fresh with its top bit clear when the millisecond changes, and
// increased by a random amount of 1 to 2^32 for each further UUID in the same millisecond (the
// clear top bit leaves room for 2^41 of them). If the clock stepped back, the last timestamp
// is kept until the clock passes it.
// Thread safety: thread-safe (one mutex).
class UuidV7Generator {
 public:
  explicit UuidV7Generator(std::shared_ptr<Clock> clock = SystemClock());
  ~UuidV7Generator();
  Result<Uuid> Next();

 private:
  struct State;  // the last timestamp and random part, under a mutex
  std::shared_ptr<Clock> clock_;
  std::unique_ptr<State> state_;
};

// A UUIDv7 from a process-wide generator on the system clock.
Result<Uuid> NewUuidV7();

// ULID (github.com/ulid/spec): 48-bit millisecond timestamp and 80 random bits, written as 26
// Crockford base32 characters, upper-case.
// Encodes the parts. kInvalidArgument if unix_ms is outside 0 .. 2^48-1.
Result<std::string> EncodeUlid(int64_t unix_ms, const std::array<uint8_t, 10>& random);
// The timestamp of a ULID string (either case; I, L, O and U are refused, as are values above
// 7ZZZZZZZZZZZZZZZZZZZZZZZZZ). kInvalidArgument says why.
Result<TimePoint> UlidTime(std::string_view text);

// ULID generator, monotonic as the spec describes: within the same millisecond (or while the
// clock is behind the last timestamp) the 80-bit random part is incremented by one. An overflow
// of the random part within one millisecond (2^80 ULIDs, in practice never) is
// kResourceExhausted. Thread safety: thread-safe (one mutex).
class UlidGenerator {
 public:
  explicit UlidGenerator(std::shared_ptr<Clock> clock = SystemClock());
  ~UlidGenerator();
  Result<std::string> Next();

 private:
  struct State;  // the last timestamp and random part, under a mutex
  std::shared_ptr<Clock> clock_;
  std::unique_ptr<State> state_;
};

// A ULID from a process-wide generator on the system clock.
Result<std::string> NewUlid();

// The key formats a gateway route can require (docs/gateway.md, key_format).
enum class KeyFormat { kAny, kUuidV7, kUlid };
// "any", "uuidv7", "ulid" -> the format; anything else kInvalidArgument.
Result<KeyFormat> ParseKeyFormat(std::string_view name);
std::string_view KeyFormatName(KeyFormat format);
// The creation time embedded in `key`. REQUIRES: format != kAny.
Result<TimePoint> KeyTime(KeyFormat format, std::string_view key);

}  // namespace idem
