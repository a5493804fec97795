#include "gateway/flow/admit.h"

#include "core/text.h"
#include "gateway/key_guard.h"
#include "gateway/route_matcher.h"
#include "gateway/services.h"

namespace idem::gateway::flow {
namespace {

Admission Refuse(Admission admission, Cause cause, std::string client_detail,
                 std::string detail) {
  admission.kind = Admission::Kind::kRefused;
  admission.refusal = {&AnswerFor(cause), std::move(client_detail), std::move(detail), ""};
  return admission;
}

// A failure of the gateway's own hashing (ProblemFor: 500 internal-error), logged.
Admission Fail(Admission admission, const Status& status, std::string_view what) {
  admission.kind = Admission::Kind::kRefused;
  const std::string detail = status.ToString();
  admission.refusal = {&ProblemFor(status), std::string(what), detail,
                       std::string(what) + ": " + detail};
  return admission;
}

Cause CauseOf(KeyAgeVerdict verdict) {
  switch (verdict) {
    case KeyAgeVerdict::kWrongFormat:
      return Cause::kKeyWrongFormat;
    case KeyAgeVerdict::kExpired:
      return Cause::kKeyExpired;
    default:
      return Cause::kKeyInFuture;
  }
}

}  // namespace

Admission Admit(const GatewayOptions& options, Request& request, TimePoint now,
                TenantDigester* tenants) {
  Admission admission;
  const std::string_view target = request.target();
  admission.route =
      &MatchRoute(options, std::string_view(request.method_string()), TargetPath(target));
  const RoutePolicy& route = *admission.route;

  StripHopByHop(request.base(), {kKeyHeader, options.tenant_header, kFencingTokenHeader});
  // One pass over the fields (Beast's lookups by name search its index comparing strings):
  // a fencing token the client sent is dropped (only the gateway sets one), and the key and
  // the tenant's credential are found (the first of each; the request checks refused more).
  auto key_field = request.end();
  auto tenant_field = request.end();
  for (auto it = request.begin(); it != request.end();) {
    const std::string_view name = it->name_string();
    if (internal::EqualsIgnoreCase(name, kFencingTokenHeader)) {
      it = request.erase(it);
      continue;
    }
    if (key_field == request.end() && internal::EqualsIgnoreCase(name, kKeyHeader)) {
      key_field = it;
    } else if (tenant_field == request.end() && !options.tenant_header.empty() &&
               internal::EqualsIgnoreCase(name, options.tenant_header)) {
      tenant_field = it;
    }
    ++it;
  }

  if (route.key == KeyRequirement::kOff ||
      (key_field == request.end() && route.key == KeyRequirement::kOptional)) {
    admission.kind = Admission::Kind::kPassthrough;
    return admission;
  }
  if (key_field == request.end()) {
    return Refuse(std::move(admission), Cause::kKeyMissing,
                  "this route requires an Idempotency-Key header; generate one per operation "
                  "(a UUID) and reuse it on every retry",
                  "");
  }
  auto key = ParseIdempotencyKey(key_field->value());
  if (!key.ok()) {
    const std::string message = key.status().message();
    return Refuse(std::move(admission), Cause::kKeyMalformed, message, message);
  }
  // The retention guard: a key older than the route's retention may have lost its record.
  if (const KeyAgeCheck check = CheckKeyAge(route, *key, now);
      check.verdict != KeyAgeVerdict::kAccepted) {
    return Refuse(std::move(admission), CauseOf(check.verdict), check.detail, check.detail);
  }

  // The tenant is a digest of the credential: a key never crosses tenants, and the store never
  // holds a credential.
  std::string tenant;
  if (tenant_field != request.end()) {
    const std::string_view credential = tenant_field->value();
    auto digest = tenants != nullptr ? tenants->DigestOf(credential) : Sha256Hex(credential);
    // Never fall back to the anonymous tenant: that would let a key cross tenants.
    if (!digest.ok()) return Fail(std::move(admission), digest.status(), "cannot digest the tenant");
    tenant = std::move(*digest);
  }
  admission.scope = Scope{std::move(tenant), "", std::move(*key)};

  RequestParts parts;
  parts.method = request.method_string();
  parts.path = TargetPath(target);
  parts.query = TargetQuery(target);
  parts.body = request.body();
  if (!route.fingerprint.headers.empty()) {  // only a policy naming headers reads them
    for (const auto& field : request) {
      parts.headers.emplace_back(field.name_string(), field.value());
    }
  }
  auto fingerprint = ComputeFingerprint(route.fingerprint, parts);
  if (!fingerprint.ok()) {
    return Fail(std::move(admission), fingerprint.status(), "cannot fingerprint the request");
  }
  admission.fingerprint = *fingerprint;
  admission.kind = Admission::Kind::kAdmitted;
  return admission;
}

}  // namespace idem::gateway::flow
