// The tenant of a request is the SHA-256 digest (hex) of its credential: a key never crosses
// tenants, and the store never holds a credential. A connection nearly always carries the same
// credential on every request, so TenantDigester keeps the last credential it digested with its
// digest and digests again only when the credential differs.
//
// The credential is compared with the one kept in constant time (CRYPTO_memcmp): when one
// connection carries several tenants' requests (a shared proxy in front of the gateway), the
// time a request takes does not tell how much of the previous one's credential it matched.
// Only whether the two lengths are equal shows. The credential kept is wiped (OPENSSL_cleanse)
// when another replaces it and when the connection ends.
//
// Thread safety: none; one per connection.
#pragma once

#include <string>
#include <string_view>

#include "idem/status.h"

namespace idem::gateway::flow {

class TenantDigester {
 public:
  TenantDigester() = default;
  TenantDigester(const TenantDigester&) = delete;
  TenantDigester& operator=(const TenantDigester&) = delete;
  ~TenantDigester();

  // Sha256Hex(credential), from the last call's result when `credential` is the same.
  Result<std::string> DigestOf(std::string_view credential);

 private:
  std::string credential_;
  std::string digest_;  // empty until the first digest (a digest is never empty)
};

}  // namespace idem::gateway::flow
