#include "core/response_codec.h"

#include <gtest/gtest.h>

namespace idem::internal {
namespace {

TEST(ResponseCodecTest, RoundTripsAnyBytesInOrder) {
  const std::vector<Header> headers = {{"Content-Type", "application/json"},
                                       {"Set-Cookie", "a=1"},
                                       {"Set-Cookie", "b=2"},
                                       {"X-Bin", std::string("\0\xff\n", 3)},
                                       {"Empty", ""}};
  auto decoded = DecodeHeaders(EncodeHeaders(headers));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, headers);
  EXPECT_TRUE(EncodeHeaders({}).empty());
  EXPECT_TRUE(DecodeHeaders("")->empty());
}

TEST(ResponseCodecTest, TruncatedInputIsDataLossNotACrash) {
  const std::string encoded = EncodeHeaders({{"Name", "value"}});
  for (size_t n = 1; n < encoded.size(); ++n) {
    auto decoded = DecodeHeaders(std::string_view(encoded).substr(0, n));
    ASSERT_FALSE(decoded.ok()) << n;
    EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss);
  }
  EXPECT_EQ(DecodeHeaders("\xff\xff\xff\xff").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace idem::internal
