// `idem consume` as a child process for end-to-end tests: started with the flags a test gives
// (plus --nats, --stream, --consumer, --deliver), ready once it has bound to its consumer,
// stopped by PID. An environment entry (IDEM_TEST_CRASH_POINT=...) can be passed for crash
// tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/process.h"
#include "util/temp_dir.h"

namespace idem::testing {

struct ConsumeArgs {
  std::string nats_url;
  std::string stream;
  std::string consumer;
  std::string deliver;
  std::vector<std::string> extra;  // more flags, e.g. {"--timeout", "300ms"}
  std::string crash_point;         // IDEM_TEST_CRASH_POINT for the child; empty: none
  bool admin = true;               // --admin-listen 127.0.0.1:0
};

// The value of `series` (a metric name with its labels) in a Prometheus text body, or -1.
int64_t MetricValue(const std::string& body, const std::string& series);

class ConsumeProcess {
 public:
  ConsumeProcess(std::string binary, ConsumeArgs args);
  // Starts the sidecar and waits until it pulls; "" or what went wrong (with its output).
  std::string Start();
  Process& process() { return *process_; }
  std::string Output() const { return process_->Output(); }
  // "127.0.0.1:PORT" of the admin listener (after Start).
  const std::string& admin() const { return admin_; }

 private:
  std::string binary_;
  ConsumeArgs args_;
  TempDir dir_;
  int launches_ = 0;
  std::string admin_;
  std::unique_ptr<Process> process_;
};

}  // namespace idem::testing
