#include "gateway/flow/responses.h"

#include <algorithm>

#include "core/text.h"
#include "gateway/services.h"

namespace idem::gateway::flow {

Response ClientResponse(Response upstream, const Request& request) {
  StripHopByHop(upstream.base());
  upstream.version(request.version());
  upstream.keep_alive(request.keep_alive());
  upstream.prepare_payload();
  return upstream;
}

Response ReplayResponse(const StoredResponse& stored, const Request& request) {
  Response res{static_cast<http::status>(stored.status), request.version()};
  for (const auto& [name, value] : stored.headers) res.insert(name, value);
  res.set(kReplayedHeader, "true");
  res.body() = stored.body;
  res.keep_alive(request.keep_alive());
  res.prepare_payload();
  return res;
}

StoredResponse ToStored(const Response& response, const RoutePolicy& route, size_t limit) {
  StoredResponse stored;
  stored.status = static_cast<int>(response.result_int());
  for (const auto& field : response) {
    for (const std::string& wanted : route.stored_headers) {
      if (internal::EqualsIgnoreCase(field.name_string(), wanted)) {
        stored.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        break;
      }
    }
  }
  if (response.body().size() > limit) {
    stored.headers = {{std::string(kNotStoredMarker), std::to_string(response.body().size())}};
    return stored;
  }
  stored.body = response.body();
  return stored;
}

bool IsAccepted(const Response& response, const RoutePolicy& route) {
  return route.long_running && response.result() == http::status::accepted;
}

StoredResponse ToStoredAccepted(const Response& response, const RoutePolicy& route,
                                size_t limit) {
  RoutePolicy with_operation_headers = route;
  for (std::string_view name : {"Operation-Location", "Retry-After"}) {
    const bool listed =
        std::any_of(route.stored_headers.begin(), route.stored_headers.end(),
                    [&](const std::string& h) { return internal::EqualsIgnoreCase(h, name); });
    if (!listed) with_operation_headers.stored_headers.emplace_back(name);
  }
  StoredResponse stored = ToStored(response, with_operation_headers,
                                   std::max(limit, response.body().size()));
  if (stored.body.size() > limit) stored.body.clear();
  return stored;
}

Response AcceptedReplayResponse(const StoredResponse& accepted, const Request& request) {
  Response res = ReplayResponse(accepted, request);
  if (res.find(http::field::retry_after) == res.end()) res.set(http::field::retry_after, "1");
  return res;
}

StoredResponse OversizedAnswer() {
  return StoredResponse{502, {{std::string(kNotStoredMarker), "oversized"}}, ""};
}

std::optional<std::string> NotStoredMarker(const StoredResponse& stored) {
  for (const auto& [name, value] : stored.headers) {
    if (name == kNotStoredMarker) return value;
  }
  return std::nullopt;
}

}  // namespace idem::gateway::flow
