#include "worker/crash_point.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace idem::worker {
namespace {

struct Config {
  std::string name;
  long nth = 1;
};

const Config* LoadConfig() {
  const char* env = std::getenv("IDEM_TEST_CRASH_POINT");
  if (env == nullptr || *env == '\0') return nullptr;
  auto* c = new Config;  // lives for the process
  std::string value = env;
  const size_t colon = value.find(':');
  c->name = value.substr(0, colon);
  if (colon != std::string::npos) c->nth = std::max(1L, std::strtol(value.c_str() + colon + 1, nullptr, 10));
  return c;
}

}  // namespace

void CrashPoint(std::string_view name) {
  static const Config* config = LoadConfig();
  static std::atomic<long> hits{0};
  if (config == nullptr || name != config->name) return;
  if (hits.fetch_add(1) + 1 >= config->nth) raise(SIGKILL);
}

}  // namespace idem::worker
