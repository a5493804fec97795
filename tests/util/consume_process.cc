#include "util/consume_process.h"

#include <signal.h>
#include <stdlib.h>

namespace idem::testing {

ConsumeProcess::ConsumeProcess(std::string binary, ConsumeArgs args)
    : binary_(std::move(binary)), args_(std::move(args)) {}

std::string ConsumeProcess::Start() {
  std::vector<std::string> argv = {binary_,         "consume",        "--nats",
                                   args_.nats_url,  "--stream",       args_.stream,
                                   "--consumer",    args_.consumer,   "--deliver",
                                   args_.deliver};
  if (args_.admin) {
    argv.push_back("--admin-listen");
    argv.push_back("127.0.0.1:0");
  }
  argv.insert(argv.end(), args_.extra.begin(), args_.extra.end());
  // The child inherits the environment: set the crash point only around the fork.
  if (!args_.crash_point.empty()) setenv("IDEM_TEST_CRASH_POINT", args_.crash_point.c_str(), 1);
  process_ = std::make_unique<Process>(argv, dir_.File("consume-" + std::to_string(++launches_) + ".log"));
  if (!args_.crash_point.empty()) unsetenv("IDEM_TEST_CRASH_POINT");
  if (args_.admin) {
    const auto listening = process_->WaitForLine("admin on", std::chrono::seconds(10));
    if (!listening) return "idem consume did not start:\n" + process_->Output();
    admin_ = AddressAfter(*listening, "admin on ");
  }
  if (!process_->WaitForLine("pulling from", std::chrono::seconds(15))) {
    return "idem consume did not bind to its consumer:\n" + process_->Output();
  }
  return "";
}

int64_t MetricValue(const std::string& body, const std::string& series) {
  const size_t at = body.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stoll(body.substr(at + series.size() + 2));
}

}  // namespace idem::testing
