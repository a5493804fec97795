// The POSTs to the service: one message as the request's body and headers, or a batch as a JSON
// envelope (batch_envelope.h), and what each answer means for each message.
#include "core/text.h"
#include "worker/batch_envelope.h"
#include "worker/consume_sidecar.h"
#include "worker/dead_letter.h"

namespace idem::worker {
namespace {

// Headers a message may not set on the request: framing, hop-by-hop, and idem's own.
bool ForwardableHeader(std::string_view name, std::string_view value) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    const bool token = std::isalnum(static_cast<unsigned char>(c)) ||
                       std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!token) return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  static constexpr std::string_view kReserved[] = {
      "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
      "trailer", "upgrade", "proxy-connection", "expect", "idempotency-key"};
  for (std::string_view r : kReserved) {
    if (internal::EqualsIgnoreCase(name, r)) return false;
  }
  return !(name.size() >= 5 && internal::EqualsIgnoreCase(name.substr(0, 5), "idem-"));
}

std::optional<Duration> RetryAfter(const Response& res) {
  const auto it = res.find(http::field::retry_after);
  if (it == res.end()) return std::nullopt;
  const std::string_view v = it->value();
  if (v.empty() || v.size() > 6) return std::nullopt;
  int64_t secs = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    secs = secs * 10 + (c - '0');
  }
  return Duration(secs * 1000);
}

}  // namespace

Task<Sidecar::Attempt> Sidecar::Deliver(const JsMessage& m) {
  Request req{http::verb::post, path_, 11};
  bool content_type = false;
  for (const auto& [name, value] : m.headers()) {
    if (!ForwardableHeader(name, value)) continue;
    if (internal::EqualsIgnoreCase(name, "content-type")) content_type = true;
    req.insert(name, value);
  }
  if (!content_type) req.set(http::field::content_type, "application/octet-stream");
  req.set("Idempotency-Key", m.key());
  req.set("Idem-Subject", m.subject());
  req.set("Idem-Delivery-Count", std::to_string(m.delivery_count()));
  req.set("Idem-Stream", m.stream());
  req.set("Idem-Stream-Sequence", std::to_string(m.stream_sequence()));
  if (auto ordering_key = OrderedDelivery::OrderingKey(m)) {
    req.set(kOrderingKeyHeader, *ordering_key);
  }
  req.body() = std::string(m.data());
  const UpstreamResult r = co_await Exchange(req);
  if (r.failure != UpstreamResult::Failure::kNone) co_return FailedExchange(r);
  Attempt a;
  a.give_up.status = r.response.result_int();
  a.give_up.failure = "http";
  a.d = ClassifyHttpStatus(a.give_up.status);
  if (a.d != Disposition::kAck) {  // the reason is logged only for a nak or a term
    a.why = "HTTP " + std::to_string(a.give_up.status);
    if (a.d == Disposition::kNak) a.retry_after = RetryAfter(r.response);
    if (!r.response.body().empty()) a.why += ": " + r.response.body().substr(0, 200);
    a.give_up.error_body = r.response.body().substr(0, kDeadLetterBodyBytes);
  }
  co_return a;
}

Task<std::vector<Sidecar::Attempt>> Sidecar::DeliverBatch(
    const std::vector<std::shared_ptr<JsMessage>>& batch) {
  std::vector<std::optional<std::string>> ordering_keys;
  ordering_keys.reserve(batch.size());
  std::vector<BatchItem> items;
  items.reserve(batch.size());
  std::vector<std::string_view> keys;
  keys.reserve(batch.size());
  for (const auto& m : batch) {
    ordering_keys.push_back(OrderedDelivery::OrderingKey(*m));
    BatchItem item{m->key(), m->subject(), m->stream(), m->stream_sequence(),
                   m->delivery_count(), std::nullopt, {}, m->data()};
    if (ordering_keys.back()) item.ordering_key = *ordering_keys.back();
    for (const auto& [name, value] : m->headers()) {
      if (ForwardableHeader(name, value)) item.headers.emplace_back(name, value);
    }
    items.push_back(std::move(item));
    keys.push_back(m->key());
  }
  Request req{http::verb::post, path_, 11};
  req.set(http::field::content_type, "application/json");
  req.set(kBatchHeader, std::to_string(batch.size()));
  req.body() = EncodeBatch(items);
  const UpstreamResult r = co_await Exchange(req);
  if (r.failure != UpstreamResult::Failure::kNone) {
    co_return std::vector<Attempt>(batch.size(), FailedExchange(r));
  }
  const int status = r.response.result_int();
  const std::string& body = r.response.body();
  const std::string batch_of = "a batch of " + std::to_string(batch.size());
  if (status / 100 != 2) {
    Attempt a;
    a.give_up.status = status;
    a.give_up.failure = "http";
    a.why = batch_of + " answered HTTP " + std::to_string(status);
    if (!body.empty()) a.why += ": " + body.substr(0, 200);
    a.retry_after = RetryAfter(r.response);
    a.give_up.error_body = body.substr(0, kDeadLetterBodyBytes);
    co_return std::vector<Attempt>(batch.size(), a);
  }
  co_return BatchAttempts(r.response, batch_of, keys);
}

std::vector<Sidecar::Attempt> Sidecar::BatchAttempts(const Response& response,
                                                     const std::string& batch_of,
                                                     const std::vector<std::string_view>& keys) {
  const int status = response.result_int();
  const std::string& body = response.body();
  const size_t n = keys.size();
  auto results = DecodeBatchResults(body, keys);
  if (!results.ok()) {
    metrics_.CountError(ConsumeMetrics::kBatchResponse);
    log_.Warn("batch", batch_of + " answered HTTP " + std::to_string(status) + " with a body " +
                           "that cannot be used (" + results.status().message() +
                           "); every message of it is naked");
    Attempt a;
    a.give_up.status = status;
    a.give_up.failure = "batch-response";
    a.why = "unusable batch response: " + results.status().message();
    a.give_up.error_body = body.substr(0, kDeadLetterBodyBytes);
    return std::vector<Attempt>(n, a);
  }
  const std::optional<Duration> retry_after = RetryAfter(response);
  std::vector<Attempt> out(n);
  for (size_t i = 0; i < n; ++i) {
    ItemResult& item = (*results)[i];
    Attempt& a = out[i];
    a.give_up.status = status;
    a.give_up.failure = "batch-item";
    const std::string error = item.error.empty() ? "" : ": " + item.error.substr(0, 200);
    switch (item.outcome) {
      case ItemResult::Outcome::kAck:
        a.d = Disposition::kAck;
        break;
      case ItemResult::Outcome::kRetry:
        a.d = Disposition::kNak;
        a.retry_after = item.retry_after ? item.retry_after : retry_after;
        a.why = "the service answered retry" + error;
        break;
      case ItemResult::Outcome::kReject:
        a.d = Disposition::kTerm;
        a.why = "the service answered reject" + error;
        break;
      case ItemResult::Outcome::kMissing:
        a.d = Disposition::kNak;
        a.retry_after = retry_after;
        a.give_up.failure = "batch-response";
        a.why = "left out of the answer to " + batch_of;
        break;
    }
    a.give_up.error_body = std::move(item.error);
    if (a.give_up.error_body.size() > kDeadLetterBodyBytes) {
      a.give_up.error_body.resize(kDeadLetterBodyBytes);
    }
  }
  return out;
}

Task<UpstreamResult> Sidecar::Exchange(Request& req) {
  const auto start = std::chrono::steady_clock::now();
  UpstreamResult r = co_await upstream_->Exchange(req, options_.timeout);
  metrics_.delivery_seconds().Observe(std::chrono::duration<double>(
      std::chrono::steady_clock::now() - start).count());
  co_return r;
}

Sidecar::Attempt Sidecar::FailedExchange(const UpstreamResult& r) {
  Attempt a;
  switch (r.failure) {
    case UpstreamResult::Failure::kTimeout:
      metrics_.CountError(ConsumeMetrics::kTimeout);
      a.why = "no answer within " + Ms(options_.timeout) + " (" + r.detail + ")";
      a.give_up.failure = "timeout";
      break;
    case UpstreamResult::Failure::kConnect:
      metrics_.CountError(ConsumeMetrics::kConnect);
      a.why = r.detail;
      a.give_up.failure = "connect";
      a.unreachable = true;
      break;
    case UpstreamResult::Failure::kTooLarge:
      metrics_.CountError(ConsumeMetrics::kTooLarge);
      a.why = "answer larger than 16 MiB (" + r.detail + ")";
      a.give_up.failure = "too-large";
      break;
    default:
      metrics_.CountError(ConsumeMetrics::kBroken);
      a.why = r.detail;
      a.give_up.failure = "broken";
      break;
  }
  return a;
}

}  // namespace idem::worker
