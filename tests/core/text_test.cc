#include "core/text.h"

#include <gtest/gtest.h>

#include <map>

namespace idem::internal {
namespace {

TEST(TextTest, HexAndCaseFolding) {
  const uint8_t bytes[] = {0x00, 0x9f, 0xff};
  EXPECT_EQ(ToHex(bytes, 3), "009fff");
  EXPECT_EQ(HexValue('a'), 10);
  EXPECT_EQ(HexValue('F'), 15);
  EXPECT_EQ(HexValue('g'), -1);
  EXPECT_TRUE(EqualsIgnoreCase("Idempotency-Key", "idempotency-key"));
  EXPECT_FALSE(EqualsIgnoreCase("Idempotency-Key", "idempotency-keys"));
}

TEST(TextTest, QueryOptionsAreSplitAndAValuelessOneIsAnError) {
  std::map<std::string, std::string> seen;
  auto collect = [&](std::string_view name, std::string_view value) {
    seen[std::string(name)] = std::string(value);
    return Status::Ok();
  };
  ASSERT_TRUE(ForEachQueryOption("a=1&&b=&c=x=y", collect).ok());
  EXPECT_EQ(seen, (std::map<std::string, std::string>{{"a", "1"}, {"b", ""}, {"c", "x=y"}}));
  Status bad = ForEachQueryOption("a=1&flag", collect);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(), "option 'flag' has no value");
  Status stopped = ForEachQueryOption("a=1&b=2", [](std::string_view name, std::string_view) {
    return name == "a" ? InvalidArgumentError("no a") : Status::Ok();
  });
  EXPECT_EQ(stopped.message(), "no a");
}

TEST(TextTest, IntegersAreParsedWithinTheirRangeOrNamedInTheError) {
  EXPECT_EQ(*ParseIntInRange("port", "6379", 1, 65535), 6379);
  EXPECT_EQ(*ParseIntInRange("db", "0", 0, 15), 0);
  for (const char* bad : {"", "0", "65536", "12x", "-1", " 80", "99999999999999999999"}) {
    auto r = ParseIntInRange("port", bad, 1, 65535);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("port must be 1 to 65535 (an integer), not '") + bad + "'");
  }
}

TEST(TextTest, PasswordsInUrlsAreRedacted) {
  EXPECT_EQ(RedactUrlPassword("redis://:s3cret@cache:6379/0"), "redis://:***@cache:6379/0");
  EXPECT_EQ(RedactUrlPassword("redis://app:s3cret@cache"), "redis://app:***@cache");
  EXPECT_EQ(RedactUrlPassword("redis://s3cret@cache"), "redis://***@cache");
  EXPECT_EQ(RedactUrlPassword("postgresql://idem:p%40ss@db:5432/idem?pool_size=4"),
            "postgresql://idem:***@db:5432/idem?pool_size=4");
  EXPECT_EQ(RedactUrlPassword("postgresql://idem@db/idem"), "postgresql://idem@db/idem");
  EXPECT_EQ(RedactUrlPassword("redis://cache:6379?prefix=a@b"), "redis://cache:6379?prefix=a@b");
  EXPECT_EQ(RedactUrlPassword("sqlite:/var/lib/idem.db"), "sqlite:/var/lib/idem.db");
  EXPECT_EQ(RedactUrlPassword("memory"), "memory");
}

}  // namespace
}  // namespace idem::internal

namespace idem::internal {
namespace {

TEST(TextTest, PercentDecodingInQueryForm) {
  EXPECT_EQ(PercentDecode("Bearer%20a%2Bb+c", PercentForm::kQuery), "Bearer a+b c");
  EXPECT_EQ(PercentDecode("%4a%4A", PercentForm::kQuery), "JJ");
  // What is not an escape is kept as written.
  EXPECT_EQ(PercentDecode("100%", PercentForm::kQuery), "100%");
  EXPECT_EQ(PercentDecode("%4", PercentForm::kQuery), "%4");
  EXPECT_EQ(PercentDecode("%zz%41", PercentForm::kQuery), "%zzA");
  EXPECT_EQ(PercentDecode("%-1", PercentForm::kQuery), "%-1");
  EXPECT_EQ(PercentDecode("", PercentForm::kQuery), "");
}

TEST(TextTest, PercentDecodingInStrictForm) {
  EXPECT_EQ(PercentDecode("p%40ss+word%3a", PercentForm::kStrict), "p@ss+word:");
  EXPECT_EQ(PercentDecode("%00", PercentForm::kStrict), std::string(1, '\0'));
  for (const char* bad : {"%", "%4", "ab%", "%zz", "%-1", "%+1", "% 1"}) {
    EXPECT_EQ(PercentDecode(bad, PercentForm::kStrict), std::nullopt) << bad;
  }
}

TEST(TextTest, Base64EncodesWhatDecodeBase64ReadsBack) {
  EXPECT_EQ(EncodeBase64(""), "");
  EXPECT_EQ(EncodeBase64("f"), "Zg==");
  EXPECT_EQ(EncodeBase64("fo"), "Zm8=");
  EXPECT_EQ(EncodeBase64("foo"), "Zm9v");
  const std::string binary("\x00\xff\x10 \x80", 5);
  auto back = DecodeBase64(EncodeBase64(binary));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, binary);
}

TEST(TextTest, ValidUtf8AcceptsWellFormedTextOnly) {
  for (std::string ok : {"", "ascii", "caf\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                         "\xF4\x8F\xBF\xBF", "\xED\x9F\xBF"}) {
    EXPECT_TRUE(ValidUtf8(ok)) << ok;
  }
  for (std::string bad : {"\x80", "\xC3", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF",
                          "\xED\xA0\x80", "\xF0\x80\x80\xAF", "\xF4\x90\x80\x80",
                          "\xF5\x80\x80\x80", "\xFF", "a\xE2\x82", "\xE2\x28\xA1"}) {
    EXPECT_FALSE(ValidUtf8(bad)) << bad.size();
  }
  EXPECT_TRUE(ValidUtf8(std::string("nul \0 inside", 13)));
}

}  // namespace
}  // namespace idem::internal
