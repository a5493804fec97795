#include "idem/status.h"

#include <gtest/gtest.h>

namespace idem {
namespace {

TEST(StatusTest, OkByDefaultAndPrintsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeMessageAndContext) {
  Status s = UnavailableError("database is locked").WithContext("sqlite begin");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "sqlite begin: database is locked");
  EXPECT_EQ(s.ToString(), "UNAVAILABLE: sqlite begin: database is locked");
  EXPECT_TRUE(Status().WithContext("ignored").ok());
}

TEST(StatusTest, EveryCodeHasAName) {
  for (StatusCode c : {StatusCode::kInvalidArgument, StatusCode::kDeadlineExceeded,
                       StatusCode::kNotFound, StatusCode::kAlreadyExists,
                       StatusCode::kResourceExhausted,
                       StatusCode::kFailedPrecondition, StatusCode::kAborted,
                       StatusCode::kInternal, StatusCode::kUnavailable, StatusCode::kDataLoss}) {
    EXPECT_NE(StatusCodeName(c), "UNKNOWN");
    EXPECT_NE(StatusCodeName(c), "OK");
  }
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

Status Chain(int x, int& out) {
  auto h = Half(x);
  IDEM_RETURN_IF_ERROR(h.status());
  out = *h;
  return Status::Ok();
}

TEST(ResultTest, HoldsAValueOrAnError) {
  auto good = Half(4);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 2);
  EXPECT_TRUE(good.status().ok());
  auto bad = Half(3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  int out = 0;
  EXPECT_EQ(Chain(3, out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Chain(8, out).ok());
  EXPECT_EQ(out, 4);
}

}  // namespace
}  // namespace idem
