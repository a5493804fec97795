// Scope: the identity of one idempotent operation, (tenant, client, key).
//
// The same key under another tenant or client is another operation: a stored response never
// crosses scopes. The gateway fills `tenant` with a digest of the caller's credentials; library
// users choose their own. Only `key` is validated, because only the key comes verbatim from an
// untrusted client.
#pragma once

#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem {

// Longest key accepted, as the IETF httpapi Idempotency-Key draft and common practice suggest.
inline constexpr size_t kMaxKeyLength = 255;
// Longest tenant or client identifier accepted (a SHA-256 hex digest is 64 characters).
inline constexpr size_t kMaxScopePartLength = 255;

// Returns OK when `key` is 1 to 255 visible ASCII characters (0x21 to 0x7E); otherwise
// kInvalidArgument with a message a client can act on ("key is empty", "key has 300
// characters; at most 255 are allowed", "key has a non-visible character at offset 4").
Status ValidateKey(std::string_view key);

struct Scope {
  std::string tenant;  // may be empty: one shared tenant
  std::string client;  // may be empty
  std::string key;     // see ValidateKey

  // Builds a scope after validating the key, and bounding tenant and client to
  // kMaxScopePartLength bytes without NUL bytes (they are encoded into store keys).
  static Result<Scope> Make(std::string tenant, std::string client, std::string key);

  // A short, stable digest of the whole scope for logs and metrics ("3f9a0c12d4e5b6a7"): never
  // log a raw key, it may be a secret a client reused. 16 hex characters of SHA-256.
  std::string Digest() const;

  // The scope as one unambiguous byte string, "tenant\0client\0key" (no part holds a NUL), for
  // stores that key records by a digest of the whole scope.
  std::string Encoded() const;

  friend bool operator==(const Scope&, const Scope&) = default;
};

}  // namespace idem
