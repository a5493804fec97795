#include "gateway/key_guard.h"

namespace idem::gateway {
namespace {

std::string Seconds(Duration d) { return std::to_string(d.count() / 1000) + " s"; }

}  // namespace

KeyAgeCheck CheckKeyAge(const RoutePolicy& route, std::string_view key, TimePoint now) {
  if (route.key_format == KeyFormat::kAny) return {};
  const std::string format(KeyFormatName(route.key_format));
  auto time = KeyTime(route.key_format, key);
  if (!time.ok()) {
    return {KeyAgeVerdict::kWrongFormat,
            "this route requires " + format + " keys: " + time.status().message()};
  }
  if (*time < now - route.retention) {
    return {KeyAgeVerdict::kExpired,
            "this " + format + " key was made " + Seconds(now - *time) +
                " ago; this route keeps records for " + Seconds(route.retention) +
                ", so a retry this late could run the operation again. If it is a new "
                "operation, send it with a new key"};
  }
  if (*time > now + route.max_key_future_skew) {
    return {KeyAgeVerdict::kInFuture,
            "this " + format + " key's time is " + Seconds(*time - now) +
                " ahead of the gateway's clock (at most " + Seconds(route.max_key_future_skew) +
                " allowed); check the client's clock"};
  }
  return {};
}

}  // namespace idem::gateway
