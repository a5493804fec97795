#include "gateway/flow/tenant_digest.h"

#include <openssl/crypto.h>

#include "idem/fingerprint.h"

namespace idem::gateway::flow {

TenantDigester::~TenantDigester() { OPENSSL_cleanse(credential_.data(), credential_.size()); }

Result<std::string> TenantDigester::DigestOf(std::string_view credential) {
  if (!digest_.empty() && credential.size() == credential_.size() &&
      CRYPTO_memcmp(credential.data(), credential_.data(), credential.size()) == 0) {
    return digest_;
  }
  auto digest = Sha256Hex(credential);
  if (!digest.ok()) return digest.status();
  OPENSSL_cleanse(credential_.data(), credential_.size());
  credential_.assign(credential);
  digest_ = *digest;
  return digest;
}

}  // namespace idem::gateway::flow
