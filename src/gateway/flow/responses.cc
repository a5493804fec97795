#include "gateway/flow/responses.h"

#include <algorithm>
#include <tuple>

#include "core/text.h"
#include "gateway/services.h"

namespace idem::gateway::flow {
namespace {

// Frames a response whose body is whole in memory. A 1xx or 204 response has no content, and
// must not carry Content-Length (RFC 9110 8.6); a 304's Content-Length, when the upstream sent
// one, gives the size of the representation a 200 would have carried, so it stays as sent.
// Every other response gets its body's length.
void FrameBody(Response& res) {
  const http::status status = res.result();
  const bool no_content = http::to_status_class(status) == http::status_class::informational ||
                          status == http::status::no_content;
  if (no_content || status == http::status::not_modified) {
    res.body().clear();
    if (no_content) res.erase(http::field::content_length);
    return;
  }
  PreparePayload(res);
}

}  // namespace

Response ClientResponse(Response upstream, const Request& request) {
  StripHopByHop(upstream.base());
  upstream.version(request.version());
  upstream.keep_alive(request.keep_alive());
  FrameBody(upstream);
  return upstream;
}

Response ReplayResponse(const StoredResponse& stored, const Request& request) {
  // Its header fields take memory where the request's do (its connection's pool).
  Response res(std::piecewise_construct, std::make_tuple(),
               std::make_tuple(request.get_allocator()));
  res.result(static_cast<unsigned>(stored.status));
  res.version(request.version());
  for (const auto& [name, value] : stored.headers) res.insert(name, value);
  res.set(kReplayedHeader, "true");
  res.body() = stored.body;
  res.keep_alive(request.keep_alive());
  FrameBody(res);
  return res;
}

namespace {

// Whether `route` stores the header `name`, or it is among `also`.
bool IsStoredHeader(std::string_view name, const RoutePolicy& route,
                    std::initializer_list<std::string_view> also = {}) {
  const auto same = [&](std::string_view w) { return internal::EqualsIgnoreCase(name, w); };
  return std::any_of(route.stored_headers.begin(), route.stored_headers.end(), same) ||
         std::any_of(also.begin(), also.end(), same);
}

// The headers of `response` whose names `route` stores, or that are among `also`.
std::vector<Header> StoredHeaders(const Response& response, const RoutePolicy& route,
                                  std::initializer_list<std::string_view> also = {}) {
  std::vector<Header> headers;
  for (const auto& field : response) {
    if (IsStoredHeader(field.name_string(), route, also)) {
      headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
  }
  return headers;
}

}  // namespace

StoredResponse ToStored(const Response& response, const RoutePolicy& route, size_t limit) {
  StoredResponse stored;
  ToStored(response, route, limit, stored);
  return stored;
}

void ToStored(const Response& response, const RoutePolicy& route, size_t limit,
              StoredResponse& stored) {
  stored.status = static_cast<int>(response.result_int());
  if (response.body().size() > limit) {
    stored.headers.resize(1);
    stored.headers[0].first.assign(kNotStoredMarker);
    stored.headers[0].second = std::to_string(response.body().size());
    stored.body.clear();
    return;
  }
  size_t count = 0;
  for (const auto& field : response) {
    if (!IsStoredHeader(field.name_string(), route)) continue;
    if (count == stored.headers.size()) stored.headers.emplace_back();
    stored.headers[count].first.assign(field.name_string());
    stored.headers[count].second.assign(field.value());
    ++count;
  }
  stored.headers.resize(count);
  stored.body.assign(response.body());
}

bool IsAccepted(const Response& response, const RoutePolicy& route) {
  return route.long_running && response.result() == http::status::accepted;
}

StoredResponse ToStoredAccepted(const Response& response, const RoutePolicy& route,
                                size_t limit) {
  StoredResponse stored;
  stored.status = static_cast<int>(response.result_int());
  stored.headers = StoredHeaders(response, route, {"Operation-Location", "Retry-After"});
  if (response.body().size() <= limit) stored.body = response.body();
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
