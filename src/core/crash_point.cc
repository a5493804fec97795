#include "core/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <vector>

namespace idem::internal {
namespace {

constexpr const char* kVariable = "IDEM_TEST_CRASH_POINT";

// Standard error, unbuffered: the line is out before the signal.
void Say(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

const CrashPointSpec* Load() {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || *value == '\0') return nullptr;
  std::optional<CrashPointSpec> spec = ParseCrashPoint(value);
  if (!spec) {
    Say(std::string(kVariable) + "=" + value +
        ": not NAME, NAME:N, NAME:stop or NAME:N:stop; no crash point is armed");
    return nullptr;
  }
  return new CrashPointSpec(std::move(*spec));  // lives for the process
}

}  // namespace

std::optional<CrashPointSpec> ParseCrashPoint(std::string_view value) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t colon = value.find(':', start);
    parts.push_back(value.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  CrashPointSpec spec;
  spec.name = std::string(parts[0]);
  if (spec.name.empty()) return std::nullopt;
  if (parts.size() > 1 && parts.back() == "stop") {
    spec.stop = true;
    parts.pop_back();
  }
  if (parts.size() > 2) return std::nullopt;
  if (parts.size() == 2) {
    const std::string_view n = parts[1];
    auto [end, error] = std::from_chars(n.data(), n.data() + n.size(), spec.nth);
    if (n.empty() || error != std::errc() || end != n.data() + n.size() || spec.nth < 1) {
      return std::nullopt;
    }
  }
  return spec;
}

void CrashPoint(std::string_view name) {
  static const CrashPointSpec* const armed = Load();
  static std::atomic<long> hits{0};
  if (armed == nullptr || name != armed->name) return;
  const long hit = hits.fetch_add(1) + 1;
  // A killed process reaches no point again; a stopped one stops at the N-th time only.
  if (hit < armed->nth || (armed->stop && hit != armed->nth)) return;
  Say("crash point " + armed->name + " reached (time " + std::to_string(hit) + "): " +
      (armed->stop ? "SIGSTOP" : "SIGKILL"));
  raise(armed->stop ? SIGSTOP : SIGKILL);
}

}  // namespace idem::internal
