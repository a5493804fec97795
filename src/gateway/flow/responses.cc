#include "gateway/flow/responses.h"

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
