#include "idem/scope.h"

#include <gtest/gtest.h>

#include "core/scope_digest.h"

namespace idem {
namespace {

TEST(ValidateKeyTest, AcceptsOneTo255VisibleAsciiCharacters) {
  EXPECT_TRUE(ValidateKey("a").ok());
  EXPECT_TRUE(ValidateKey("7c30e198-dcd2-4989-a192-590d760c6f54").ok());
  EXPECT_TRUE(ValidateKey("v2:order:123:charge").ok());
  EXPECT_TRUE(ValidateKey("!~\"{}").ok());
  EXPECT_TRUE(ValidateKey(std::string(255, 'k')).ok());
}

TEST(ValidateKeyTest, RejectsEmptyTooLongAndInvisibleKeysWithAClearMessage) {
  auto empty = ValidateKey("");
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(), "idempotency key is empty");

  auto long_key = ValidateKey(std::string(256, 'k'));
  EXPECT_EQ(long_key.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(long_key.message().find("256 characters; at most 255"), std::string::npos);

  for (std::string bad : {std::string("a b"), std::string("tab\there"), std::string("nul\0x", 5),
                          std::string("caf\xc3\xa9"), std::string("del\x7f")}) {
    auto s = ValidateKey(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("not visible ASCII"), std::string::npos) << s.message();
  }
  EXPECT_NE(ValidateKey("abc def").message().find("offset 3"), std::string::npos);
}

TEST(ScopeTest, MakeValidatesEveryPart) {
  auto ok = Scope::Make("tenant", "client", "key-1");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->tenant, "tenant");
  EXPECT_EQ(ok->key, "key-1");
  EXPECT_TRUE(Scope::Make("", "", "k").ok());

  EXPECT_EQ(Scope::Make("t", "c", "").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Scope::Make(std::string("t\0x", 3), "", "k").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Scope::Make("t", std::string(256, 'c'), "k").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ScopeTest, TheInlineDigestHasTheDigestsCharacters) {
  // Settle notices and log lines from gateways of either kind must name a key alike.
  for (const Scope& scope : {Scope{"", "", "k"}, Scope{"tenant", "client", "key"},
                             Scope{std::string(64, 'a'), "", std::string(255, 'k')}}) {
    const internal::ScopeDigest inline_digest(scope);
    EXPECT_EQ(inline_digest.view(), scope.Digest());
    EXPECT_FALSE(inline_digest.empty());
  }
  EXPECT_TRUE(internal::ScopeDigest().empty());
  // The known value: the first 16 hex digits of SHA-256("tenant\0client\0key").
  EXPECT_EQ((Scope{"tenant", "client", "key"}).Digest(), "79e4b68cda28794a");
}

TEST(ScopeTest, DigestIsShortStableAndDistinguishesEveryPart) {
  const Scope a{"tenant", "client", "key"};
  EXPECT_EQ(a.Digest().size(), 16u);
  EXPECT_EQ(a.Digest(), (Scope{"tenant", "client", "key"}).Digest());
  EXPECT_NE(a.Digest(), (Scope{"tenant2", "client", "key"}).Digest());
  EXPECT_NE(a.Digest(), (Scope{"tenant", "client", "key2"}).Digest());
  EXPECT_NE((Scope{"ab", "c", "k"}).Digest(), (Scope{"a", "bc", "k"}).Digest());
  EXPECT_EQ(a.Digest().find("key"), std::string::npos);
}

}  // namespace
}  // namespace idem
