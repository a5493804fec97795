// Request fingerprints: what "the same request" means for one key.
//
// A fingerprint is SHA-256 (OpenSSL EVP) over a canonical encoding of the request parts a
// FingerprintPolicy names. Reusing a key with a request whose fingerprint differs is a client bug
// (or an attack); the store reports it as Mismatch and the gateway answers 422.
//
// Canonical encoding (stable across versions; changing it would turn every retry in flight
// during an upgrade into a mismatch, so a change needs a new version byte):
//   version byte 0x01, then for each part the policy names, in this order:
//     'M' method | 'P' path | 'Q' query | 'B' body | headers
//   each part as: tag byte, 8-byte big-endian length, the bytes; a header as two parts,
//   'H' its name then 'V' its value.
//   Headers: names lower-cased, values with surrounding spaces and tabs removed; a header the
//   policy names but the request lacks is encoded as absent (tag 'h' plus its name), so "absent"
//   and "empty" differ; repeated headers are joined with "," in the order received; headers are
//   taken in the policy's order after lower-casing, sorting and removing duplicates.
//   The method is taken as sent (HTTP methods are case-sensitive); the query string raw, as
//   sent, since parameter order can matter to an application.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/status.h"

namespace idem {

class Fingerprint {
 public:
  static constexpr size_t kSize = 32;
  using Bytes = std::array<uint8_t, kSize>;

  Fingerprint() : bytes_{} {}
  explicit Fingerprint(const Bytes& bytes) : bytes_(bytes) {}

  // Parses 64 hex characters (either case).
  static Result<Fingerprint> FromHex(std::string_view hex);
  // REQUIRES: raw.size() == kSize, else kDataLoss (raw bytes come from a store).
  static Result<Fingerprint> FromRaw(std::string_view raw);

  const Bytes& bytes() const { return bytes_; }
  std::string_view raw() const {
    return {reinterpret_cast<const char*>(bytes_.data()), bytes_.size()};
  }
  std::string ToHex() const;

  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;

 private:
  Bytes bytes_;
};

// Which request parts make up the fingerprint. The default (method, path, query, body) is what
// the gateway uses unless a route says otherwise.
struct FingerprintPolicy {
  bool method = true;
  bool path = true;
  bool query = true;
  bool body = true;
  // Request headers that also count (e.g. "Content-Type"); matched case-insensitively.
  std::vector<std::string> headers;
};

// The parts of a request a fingerprint may cover. Views: the caller keeps the data alive.
struct RequestParts {
  std::string_view method;
  std::string_view path;
  std::string_view query;
  std::string_view body;
  std::vector<std::pair<std::string_view, std::string_view>> headers;
};

// Computes the fingerprint of `request` under `policy`. Fails only if OpenSSL does
// (kInternal), which in practice means a broken OpenSSL installation.
Result<Fingerprint> ComputeFingerprint(const FingerprintPolicy& policy,
                                       const RequestParts& request);

// SHA-256 of `data` as 64 lower-case hex characters (tenant digests, log digests). Fails only
// if OpenSSL does (kInternal).
Result<std::string> Sha256Hex(std::string_view data);

// SHA-256 of `parts` one after another, as its first `hex_chars` (at most 64) lower-case hex
// characters: the digest of a concatenation without building it.
Result<std::string> Sha256HexOf(std::initializer_list<std::string_view> parts,
                                size_t hex_chars = 64);

}  // namespace idem
