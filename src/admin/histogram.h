// A latency histogram in Prometheus text format (the buckets every idem daemon uses, from
// 100 us to 5 s). Debian ships no C++ Prometheus client; the text format is a few lines.
//
// Thread safety: Observe and Write may be called from any thread (relaxed atomics: a scrape
// may see a count and a sum that differ by the observations in progress).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "idem/clock.h"

namespace idem::admin {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                     0.005,  0.01,    0.025,  0.05,  0.1,
                                                     0.25,   0.5,     1,      5};
  void Observe(Duration d);
  void Observe(double seconds);
  void Write(std::string& out, std::string_view name, std::string_view help) const;

 private:
  // The count is the buckets' sum, added up when written: one atomic add fewer per observation,
  // and a _count that always equals the +Inf bucket.
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_micros_{0};
};

}  // namespace idem::admin
