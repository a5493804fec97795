// PreferredWait: the `wait` preference of RFC 7240's Prefer header, as the gateway reads it.
#include "gateway/prefer.h"

#include <gtest/gtest.h>

namespace idem::gateway {
namespace {

using namespace std::chrono_literals;

std::optional<Duration> WaitOf(std::initializer_list<std::string> fields) {
  Request req{http::verb::post, "/", 11};
  for (const std::string& f : fields) req.insert("Prefer", f);
  return PreferredWait(req);
}

TEST(PreferTest, ReadsWaitAmongOtherPreferencesAndParameters) {
  EXPECT_EQ(WaitOf({"wait=10"}), Duration(10s));
  EXPECT_EQ(WaitOf({"respond-async, wait=5"}), Duration(5s));
  EXPECT_EQ(WaitOf({"WAIT = 7 ; foo=bar, return=minimal"}), Duration(7s));
  EXPECT_EQ(WaitOf({"wait=\"3\""}), Duration(3s));
  EXPECT_EQ(WaitOf({"return=minimal", "wait=2"}), Duration(2s)) << "a later Prefer field";
  EXPECT_EQ(WaitOf({"wait=0"}), Duration(0s));
  EXPECT_EQ(WaitOf({"wait=99999999"}), Duration(24h)) << "capped at a day";
}

TEST(PreferTest, IgnoresWhatIsNotAWaitInSeconds) {
  EXPECT_EQ(WaitOf({}), std::nullopt);
  EXPECT_EQ(WaitOf({"respond-async"}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait"}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait="}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait=-1"}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait=1.5"}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait=soon"}), std::nullopt);
  EXPECT_EQ(WaitOf({"waiting=5"}), std::nullopt);
  EXPECT_EQ(WaitOf({"wait=1234567890123"}), std::nullopt) << "too many digits";
}

}  // namespace
}  // namespace idem::gateway
