#include "gateway/prefer.h"

#include <algorithm>
#include <string_view>

#include "core/text.h"

namespace idem::gateway {
namespace {

// Seconds in `value` (digits, optionally in double quotes); nullopt otherwise.
std::optional<Duration> Seconds(std::string_view value) {
  value = internal::TrimOws(value);
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
    value = value.substr(1, value.size() - 2);
  }
  if (value.empty() || value.size() > 12) return std::nullopt;
  int64_t seconds = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    seconds = seconds * 10 + (c - '0');
  }
  return std::chrono::seconds(std::min<int64_t>(seconds, 86400));
}

// The wait preference in one field value; nullopt when it has none usable.
std::optional<Duration> WaitIn(std::string_view field) {
  for (std::string_view preference : internal::ListElements(field)) {
    preference = internal::TrimOws(preference.substr(0, preference.find(';')));  // no parameters
    const size_t eq = preference.find('=');
    if (eq == std::string_view::npos) continue;
    if (!internal::EqualsIgnoreCase(internal::TrimOws(preference.substr(0, eq)), "wait")) continue;
    return Seconds(preference.substr(eq + 1));
  }
  return std::nullopt;
}

}  // namespace

std::optional<Duration> PreferredWait(const Request& request) {
  for (const auto& field : request) {
    if (!internal::EqualsIgnoreCase(field.name_string(), "prefer")) continue;
    const std::string_view value(field.value().data(), field.value().size());
    if (auto wait = WaitIn(value)) return wait;
  }
  return std::nullopt;
}

}  // namespace idem::gateway
