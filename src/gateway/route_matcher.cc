#include "gateway/route_matcher.h"

#include <algorithm>

#include "core/text.h"
#include "gateway/http.h"

namespace idem::gateway {
namespace {

// Every %XX decoded once ('+' stays '+': it is a space only in queries), and '\' read as '/'.
std::string DecodeAll(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size() && internal::HexValue(path[i + 1]) >= 0 &&
        internal::HexValue(path[i + 2]) >= 0) {
      out.push_back(static_cast<char>(internal::HexValue(path[i + 1]) * 16 +
                                      internal::HexValue(path[i + 2])));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  std::replace(out.begin(), out.end(), '\\', '/');
  return out;
}

// Path parameters removed from every segment: "/a;x/b;y=1" -> "/a/b".
std::string StripParameters(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  bool in_parameter = false;
  for (char c : path) {
    if (c == '/') in_parameter = false;
    if (c == ';') in_parameter = true;
    if (!in_parameter) out.push_back(c);
  }
  return out;
}

int Demand(const RoutePolicy& route) {
  switch (route.key) {
    case KeyRequirement::kRequired: return 2;
    case KeyRequirement::kOptional: return 1;
    case KeyRequirement::kOff: return 0;
  }
  return 0;
}

}  // namespace

std::vector<std::string> RoutingReadings(std::string_view path) {
  std::vector<std::string> readings;
  auto add = [&readings](std::string reading) {
    if (std::find(readings.begin(), readings.end(), reading) == readings.end()) {
      readings.push_back(std::move(reading));
    }
  };
  const std::string decoded = DecodeAll(path);
  for (const std::string_view base : {path, std::string_view(decoded)}) {
    add(NormalizePathForRouting(base));
    add(StripParameters(NormalizePathForRouting(base)));
    add(NormalizePathForRouting(StripParameters(base)));
  }
  add(std::string(path));
  return readings;
}

bool IsOnlyReading(std::string_view path) {
  if (path.empty() || path.front() != '/') return false;
  // One pass (find_first_of would look each byte up in the set with a call of its own).
  for (const char c : path) {
    if (c == '%' || c == '\\' || c == ';') return false;
  }
  std::string_view rest = path.substr(1);
  while (!rest.empty()) {
    const size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    if (segment.empty() || segment == "." || segment == "..") return false;
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);  // empty after a trailing '/': kept by every reading
  }
  return true;
}

const RoutePolicy& MatchRoute(const GatewayOptions& options, std::string_view method,
                              std::string_view path) {
  if (IsOnlyReading(path)) return options.Match(method, path);
  const RoutePolicy* best = nullptr;
  for (const std::string& reading : RoutingReadings(path)) {
    const RoutePolicy& route = options.Match(method, reading);
    if (best == nullptr || Demand(route) > Demand(*best)) best = &route;
  }
  return *best;
}

}  // namespace idem::gateway
