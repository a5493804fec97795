#include "core/transient_status.h"

#include <gtest/gtest.h>

#include "idem/client.h"
#include "worker/delivery_policy.h"

namespace idem::internal {
namespace {

struct Row {
  int status;
  bool common;     // no AlsoTransient
  bool conflict;   // {.conflict = true}
  bool too_early;  // {.too_early = true}
};

// The whole rule, one status per row.
constexpr Row kTable[] = {
    {0, false, false, false},    {99, false, false, false},   {100, false, false, false},
    {200, false, false, false},  {201, false, false, false},  {202, false, false, false},
    {302, false, false, false},  {400, false, false, false},  {401, false, false, false},
    {403, false, false, false},  {404, false, false, false},  {408, true, true, true},
    {409, false, true, false},   {413, false, false, false},  {422, false, false, false},
    {425, false, false, true},   {429, true, true, true},     {499, false, false, false},
    {500, true, true, true},     {502, true, true, true},     {503, true, true, true},
    {504, true, true, true},     {599, true, true, true},     {600, true, true, true},
    {-1, false, false, false},
};

TEST(TransientStatusTest, TheTable) {
  for (const Row& r : kTable) {
    SCOPED_TRACE(r.status);
    EXPECT_EQ(IsTransientHttpStatus(r.status), r.common);
    EXPECT_EQ(IsTransientHttpStatus(r.status, {.conflict = true}), r.conflict);
    EXPECT_EQ(IsTransientHttpStatus(r.status, {.too_early = true}), r.too_early);
    EXPECT_EQ(IsTransientHttpStatus(r.status, {.conflict = true, .too_early = true}),
              r.conflict || r.too_early);
  }
}

// Every status but 409 and 425 is decided the same way whatever a caller adds.
TEST(TransientStatusTest, OnlyTheNamedStatusesDependOnTheCaller) {
  for (int status = -1; status < 1000; ++status) {
    if (status == 409 || status == 425) continue;
    const bool common = IsTransientHttpStatus(status);
    EXPECT_EQ(IsTransientHttpStatus(status, {.conflict = true, .too_early = true}), common)
        << status;
    EXPECT_EQ(common, status >= 500 || status == 408 || status == 429) << status;
  }
}

// The retrying client and the consume loop decide by this rule, each with its named addition.
TEST(TransientStatusTest, TheClientAndTheConsumeLoopFollowIt) {
  for (int status = 100; status < 1000; ++status) {
    EXPECT_EQ(IsRetryableStatus(status), IsTransientHttpStatus(status, {.conflict = true}))
        << status;
    if (status >= 400) {
      EXPECT_EQ(worker::ClassifyHttpStatus(status) == worker::Disposition::kNak,
                IsTransientHttpStatus(status, {.too_early = true}))
          << status;
    }
  }
}

}  // namespace
}  // namespace idem::internal
