// The latency histogram's Prometheus text: each observation counted in the first bucket whose
// bound it does not exceed, buckets cumulative, and _count equal to the +Inf bucket.
#include "admin/histogram.h"

#include <gtest/gtest.h>

#include <string>

namespace idem::admin {
namespace {

std::string Text(const Histogram& h) {
  std::string out;
  h.Write(out, "t_seconds", "help");
  return out;
}

TEST(HistogramTest, CountsEachObservationInItsBucketCumulatively) {
  Histogram h;
  h.Observe(0.00005);  // under the first bound
  h.Observe(0.0001);   // on the first bound: still the first bucket
  h.Observe(0.002);    // the 0.0025 bucket
  h.Observe(7.0);      // over the last bound: only +Inf
  const std::string text = Text(h);
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.0001\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.001\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"0.0025\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"5\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum 7.00215\n"), std::string::npos) << text;
}

TEST(HistogramTest, AnEmptyHistogramCountsNothing) {
  const std::string text = Text(Histogram{});
  EXPECT_NE(text.find("t_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum 0\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace idem::admin
