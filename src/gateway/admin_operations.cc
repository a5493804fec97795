#include "gateway/admin_operations.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <string>

#include "core/text.h"
#include "idem/fingerprint.h"

namespace idem::gateway {
namespace {

using nlohmann::json;

constexpr int64_t kMaxTtlSeconds = int64_t{10} * 366 * 24 * 3600;  // ten years

Status FieldError(std::string_view field, std::string_view what) {
  return InvalidArgumentError("field \"" + std::string(field) + "\" " + std::string(what));
}

// Headers a replay must not carry from the job: the gateway frames every response itself, and
// hop-by-hop headers describe one connection, not the response.
constexpr std::array<std::string_view, 11> kRefusedHeaders = {
    "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection",
    "TE",             "Trailer",           "Upgrade",    "Proxy-Authenticate",
    "Proxy-Authorization", "Idempotent-Replayed"};

Result<FencingToken> ParseToken(const json& value) {
  if (value.is_number_unsigned()) {
    const auto token = value.get<uint64_t>();
    if (token > 0) return token;
  } else if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    FencingToken token = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), token);
    if (ec == std::errc() && end == text.data() + text.size() && token > 0) return token;
  }
  return FieldError("token",
                    "must be the positive integer the upstream received in "
                    "Idempotency-Fencing-Token (a number or its decimal string)");
}

Status ParseHeaders(const json& value, std::vector<Header>& out) {
  if (!value.is_array()) return FieldError("headers", "must be an array of [name, value] pairs");
  for (size_t i = 0; i < value.size(); ++i) {
    const json& pair = value[i];
    const std::string where = "headers[" + std::to_string(i) + "]";
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string()) {
      return FieldError(where, "must be a [name, value] pair of strings");
    }
    const auto& name = pair[0].get_ref<const std::string&>();
    const auto& field_value = pair[1].get_ref<const std::string&>();
    if (name.empty() || !std::all_of(name.begin(), name.end(), internal::IsHttpTokenChar)) {
      return FieldError(where, "has a name that is not an HTTP field name");
    }
    if (field_value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      return FieldError(where, "has a value with CR, LF or NUL");
    }
    for (std::string_view refused : kRefusedHeaders) {
      if (internal::EqualsIgnoreCase(name, refused)) {
        return FieldError(where, "names " + std::string(refused) +
                                     ", which the gateway sets itself when it replays");
      }
    }
    out.emplace_back(name, field_value);
  }
  return Status::Ok();
}

Result<std::string> TenantOf(const json& body) {
  const bool has_digest = body.contains("tenant_digest");
  const bool has_tenant = body.contains("tenant");
  if (has_digest && has_tenant) {
    return InvalidArgumentError("give \"tenant_digest\" or \"tenant\", not both");
  }
  if (has_digest) {
    if (!body["tenant_digest"].is_string()) return FieldError("tenant_digest", "must be a string");
    return body["tenant_digest"].get<std::string>();
  }
  if (has_tenant) {
    if (!body["tenant"].is_string()) return FieldError("tenant", "must be a string");
    // As the gateway does: a header sent empty is a tenant too (the digest of ""), and a failure
    // is never the anonymous tenant.
    return Sha256Hex(body["tenant"].get_ref<const std::string&>());
  }
  return std::string();  // the anonymous tenant
}

}  // namespace

Result<OperationCall> ParseOperationCall(std::string_view text, OperationEnd end,
                                         Duration default_ttl) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return InvalidArgumentError("the body must be a JSON object");
  }
  const bool complete = end == OperationEnd::kComplete;
  for (const auto& [name, value] : body.items()) {
    static constexpr std::string_view kBoth[] = {"key", "tenant_digest", "tenant", "token"};
    static constexpr std::string_view kCompleteOnly[] = {"status", "headers", "body",
                                                         "ttl_seconds"};
    const bool known =
        std::find(std::begin(kBoth), std::end(kBoth), name) != std::end(kBoth) ||
        (complete && std::find(std::begin(kCompleteOnly), std::end(kCompleteOnly), name) !=
                         std::end(kCompleteOnly));
    if (!known) return FieldError(name, "is not a field of this endpoint");
  }

  OperationCall call;
  if (!body.contains("key") || !body["key"].is_string()) {
    return FieldError("key", "is required: the request's Idempotency-Key, a string");
  }
  call.scope.key = body["key"].get<std::string>();
  if (Status valid = ValidateKey(call.scope.key); !valid.ok()) {
    return FieldError("key", "is not a valid Idempotency-Key: " + valid.message());
  }
  auto tenant = TenantOf(body);
  if (!tenant.ok()) return tenant.status();
  call.scope.tenant = std::move(*tenant);
  if (call.scope.tenant.size() > kMaxScopePartLength ||
      call.scope.tenant.find('\0') != std::string::npos) {
    return FieldError("tenant_digest", "is not a tenant digest");
  }
  if (!body.contains("token")) return FieldError("token", "is required");
  auto token = ParseToken(body["token"]);
  if (!token.ok()) return token.status();
  call.token = *token;
  if (!complete) return call;

  if (!body.contains("status") || !body["status"].is_number_integer() ||
      body["status"].get<int64_t>() < 200 || body["status"].get<int64_t>() > 599) {
    return FieldError("status", "is required: the final response's HTTP status, 200 to 599");
  }
  call.response.status = body["status"].get<int>();
  if (body.contains("headers")) {
    IDEM_RETURN_IF_ERROR(ParseHeaders(body["headers"], call.response.headers));
  }
  if (body.contains("body")) {
    if (!body["body"].is_string()) return FieldError("body", "must be a base64 string");
    auto decoded = internal::DecodeBase64(body["body"].get_ref<const std::string&>());
    if (!decoded.ok()) return FieldError("body", "is not base64: " + decoded.status().message());
    call.response.body = std::move(*decoded);
  }
  call.ttl = default_ttl;
  if (body.contains("ttl_seconds")) {
    const json& ttl = body["ttl_seconds"];
    if (!ttl.is_number_integer() || ttl.get<int64_t>() <= 0 ||
        ttl.get<int64_t>() > kMaxTtlSeconds) {
      return FieldError("ttl_seconds", "must be a positive whole number of seconds (at most "
                                       "ten years)");
    }
    call.ttl = std::chrono::seconds(ttl.get<int64_t>());
  }
  return call;
}

Duration DefaultOperationTtl(const GatewayOptions& options) {
  Duration ttl{0};
  for (const RoutePolicy& route : options.routes) {
    if (route.long_running) ttl = std::max(ttl, route.retention);
  }
  return ttl > Duration(0) ? ttl : std::chrono::hours(24);
}

}  // namespace idem::gateway
