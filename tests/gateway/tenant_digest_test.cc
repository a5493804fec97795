// TenantDigester: the digest of each credential is Sha256Hex's, whether the credential repeats
// the last one, differs from it, differs only in length, or is empty.
#include "gateway/flow/tenant_digest.h"

#include <gtest/gtest.h>

#include <string>

#include "idem/fingerprint.h"

namespace idem::gateway::flow {
namespace {

std::string Expected(std::string_view credential) { return *Sha256Hex(credential); }

TEST(TenantDigesterTest, EachCredentialGetsItsOwnDigestWhateverCameBefore) {
  TenantDigester tenants;
  const std::string sequence[] = {"Bearer alpha", "Bearer alpha", "Bearer bravo",
                                  "Bearer alpha", "Bearer alph",  "Bearer alpha!",
                                  "",             "",             "Bearer alpha"};
  for (const std::string& credential : sequence) {
    auto digest = tenants.DigestOf(credential);
    ASSERT_TRUE(digest.ok()) << digest.status().ToString();
    EXPECT_EQ(*digest, Expected(credential)) << "credential '" << credential << "'";
  }
}

TEST(TenantDigesterTest, TheFirstEmptyCredentialIsDigestedNotTakenForTheUnsetOne) {
  TenantDigester tenants;
  auto digest = tenants.DigestOf("");
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, Expected(""));
  EXPECT_EQ(digest->size(), 64u);
}

}  // namespace
}  // namespace idem::gateway::flow
