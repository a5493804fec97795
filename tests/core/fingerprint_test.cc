#include "idem/fingerprint.h"

#include <gtest/gtest.h>

namespace idem {
namespace {

Fingerprint Of(const FingerprintPolicy& policy, const RequestParts& parts) {
  auto fp = ComputeFingerprint(policy, parts);
  EXPECT_TRUE(fp.ok()) << fp.status().ToString();
  return fp.ok() ? *fp : Fingerprint();
}

const RequestParts kBase{"POST", "/v1/payments", "a=1&b=2", R"({"amount":250})",
                         {{"Content-Type", "application/json"}, {"X-Trace", "abc"}}};

TEST(Sha256Test, MatchesKnownVectors) {
  EXPECT_EQ(*Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(*Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(FingerprintTest, IsDeterministicAndCoversTheDefaultParts) {
  const FingerprintPolicy policy;
  const Fingerprint base = Of(policy, kBase);
  EXPECT_EQ(base, Of(policy, kBase));

  RequestParts p = kBase;
  p.method = "PATCH";
  EXPECT_NE(Of(policy, p), base);
  p = kBase;
  p.path = "/v1/refunds";
  EXPECT_NE(Of(policy, p), base);
  p = kBase;
  p.query = "b=2&a=1";  // raw query: order matters
  EXPECT_NE(Of(policy, p), base);
  p = kBase;
  p.body = R"({"amount":9000})";
  EXPECT_NE(Of(policy, p), base);
  // Headers are not part of the default policy.
  p = kBase;
  p.headers = {{"X-Trace", "something else"}};
  EXPECT_EQ(Of(policy, p), base);
}

TEST(FingerprintTest, PartsNotNamedByThePolicyAreIgnored) {
  FingerprintPolicy body_only{false, false, false, true, {}};
  RequestParts p = kBase;
  p.method = "PUT";
  p.path = "/elsewhere";
  p.query = "z=9";
  EXPECT_EQ(Of(body_only, p), Of(body_only, kBase));
}

TEST(FingerprintTest, PartBoundariesAreUnambiguous) {
  FingerprintPolicy policy;
  RequestParts a = kBase, b = kBase;
  a.path = "/ab";
  a.query = "c";
  b.path = "/a";
  b.query = "bc";
  EXPECT_NE(Of(policy, a), Of(policy, b));
  a = kBase;
  b = kBase;
  a.query = "";
  a.body = "x";
  b.query = "x";
  b.body = "";
  EXPECT_NE(Of(policy, a), Of(policy, b));
}

TEST(FingerprintTest, ChosenHeadersAreCaseInsensitiveTrimmedAndOrderFree) {
  FingerprintPolicy policy;
  policy.headers = {"content-type", "X-Tenant-Region"};
  RequestParts a = kBase;
  a.headers = {{"Content-Type", "application/json"}, {"x-tenant-region", "eu"}};
  RequestParts b = kBase;
  b.headers = {{"X-TENANT-REGION", "  eu\t"}, {"content-type", "application/json"}};
  EXPECT_EQ(Of(policy, a), Of(policy, b));

  FingerprintPolicy reordered;
  reordered.headers = {"X-Tenant-Region", "Content-Type", "content-type"};
  EXPECT_EQ(Of(reordered, a), Of(policy, a));

  RequestParts c = a;
  c.headers[1].second = "us";
  EXPECT_NE(Of(policy, c), Of(policy, a));
}

TEST(FingerprintTest, AbsentHeaderDiffersFromEmptyHeader) {
  FingerprintPolicy policy;
  policy.headers = {"X-Region"};
  RequestParts absent = kBase;
  absent.headers = {};
  RequestParts empty = kBase;
  empty.headers = {{"X-Region", ""}};
  EXPECT_NE(Of(policy, absent), Of(policy, empty));
}

TEST(FingerprintTest, RepeatedHeadersJoinInOrder) {
  FingerprintPolicy policy;
  policy.headers = {"Accept"};
  RequestParts two = kBase, joined = kBase, swapped = kBase;
  two.headers = {{"Accept", "a"}, {"Accept", "b"}};
  joined.headers = {{"Accept", "a,b"}};
  swapped.headers = {{"Accept", "b"}, {"Accept", "a"}};
  EXPECT_EQ(Of(policy, two), Of(policy, joined));
  EXPECT_NE(Of(policy, two), Of(policy, swapped));
}

TEST(FingerprintTest, HexRoundTripsAndRejectsGarbage) {
  const Fingerprint fp = Of({}, kBase);
  const std::string hex = fp.ToHex();
  EXPECT_EQ(hex.size(), 64u);
  auto parsed = Fingerprint::FromHex(hex);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, fp);
  EXPECT_EQ(Fingerprint::FromHex("abc").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Fingerprint::FromHex(std::string(64, 'g')).status().code(),
            StatusCode::kInvalidArgument);
  auto raw = Fingerprint::FromRaw(fp.raw());
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, fp);
  EXPECT_EQ(Fingerprint::FromRaw("short").status().code(), StatusCode::kDataLoss);
}

TEST(FingerprintTest, CanonicalEncodingIsPinned) {
  // Changing the encoding would turn every retry in flight during an upgrade into a 422.
  // If this fails, the change needs a new encoding version byte, not a new expected value.
  EXPECT_EQ(Of({}, {"POST", "/p", "q=1", "body", {}}).ToHex(),
            Of({}, {"POST", "/p", "q=1", "body", {}}).ToHex());
  const std::string pinned = Of({}, {"POST", "/p", "q=1", "body", {}}).ToHex();
  // SHA-256 of 01 'M' len(4) "POST" 'P' len(2) "/p" 'Q' len(3) "q=1" 'B' len(4) "body".
  std::string encoded("\x01", 1);
  auto part = [&](char tag, std::string_view v) {
    encoded.push_back(tag);
    for (int i = 7; i >= 0; --i) encoded.push_back(static_cast<char>((v.size() >> (8 * i)) & 0xff));
    encoded.append(v);
  };
  part('M', "POST");
  part('P', "/p");
  part('Q', "q=1");
  part('B', "body");
  EXPECT_EQ(pinned, *Sha256Hex(encoded));
}

}  // namespace
}  // namespace idem
