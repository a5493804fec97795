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
    if (!internal::IsHttpTokenChar(c)) return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  static constexpr std::string_view kReserved[] = {
      "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
      "trailer", "upgrade", "proxy-connection", "expect", "idempotency-key"};
  for (std::string_view r : kReserved) {
    if (name.size() == r.size() && internal::EqualsIgnoreCase(name, r)) return false;
  }
  return !(name.size() >= 5 && internal::EqualsIgnoreCase(name.substr(0, 5), "idem-"));
}

// Retry-After in seconds (an HTTP date is not followed).
std::optional<Duration> RetryAfter(std::string_view v) {
  if (v.empty() || v.size() > 6) return std::nullopt;
  int64_t secs = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    secs = secs * 10 + (c - '0');
  }
  return Duration(secs * 1000);
}

}  // namespace

std::string Sidecar::RequestFor(const JsMessage& m, std::string buffer) {
  // The request as one string, written once: headers and body in one buffer.
  HttpRequestText req("POST", path_, service_->authority(), 384 + m.data().size(),
                      std::move(buffer));
  bool content_type = false;
  for (const auto& [name, value] : m.headers()) {
    if (!ForwardableHeader(name, value)) continue;
    if (name.size() == 12 && internal::EqualsIgnoreCase(name, "content-type")) {
      content_type = true;
    }
    req.Field(name, value);
  }
  if (!content_type) req.Field("Content-Type", "application/octet-stream");
  req.Field("Idempotency-Key", m.key());
  req.Field("Idem-Subject", m.subject());
  req.Field("Idem-Delivery-Count", m.delivery_count());
  req.Field("Idem-Stream", m.stream());
  req.Field("Idem-Stream-Sequence", m.stream_sequence());
  if (const std::string* ordering_key = OrderedDelivery::OrderingKey(m)) {
    req.Field(kOrderingKeyHeader, *ordering_key);
  }
  return std::move(req).Finish(m.data());
}

Sidecar::Attempt Sidecar::AttemptOf(const ServiceAnswer& r) {
  if (r.failure != ServiceAnswer::Failure::kNone) return FailedExchange(r);
  Attempt a;
  a.d = ClassifyHttpStatus(r.status);
  // The reason and what a dead letter would say, only for a nak or a term (an ack needs none).
  if (a.d != Disposition::kAck) {
    a.give_up.status = r.status;
    a.give_up.failure = "http";
    a.why = "HTTP " + std::to_string(a.give_up.status);
    if (a.d == Disposition::kNak) a.retry_after = RetryAfter(r.retry_after);
    if (!r.body.empty()) a.why += ": " + r.body.substr(0, 200);
    a.give_up.error_body = r.body.substr(0, kDeadLetterBodyBytes);
  }
  return a;
}

Task<std::vector<Sidecar::Attempt>> Sidecar::DeliverBatch(
    const std::vector<std::shared_ptr<JsMessage>>& batch) {
  std::vector<BatchItem> items;
  items.reserve(batch.size());
  std::vector<std::string_view> keys;
  keys.reserve(batch.size());
  for (const auto& m : batch) {
    BatchItem item{m->key(), m->subject(), m->stream(), m->stream_sequence(),
                   m->delivery_count(), std::nullopt, {}, m->data()};
    if (const std::string* ok = OrderedDelivery::OrderingKey(*m)) item.ordering_key = *ok;
    for (const auto& [name, value] : m->headers()) {
      if (ForwardableHeader(name, value)) item.headers.emplace_back(name, value);
    }
    items.push_back(std::move(item));
    keys.push_back(m->key());
  }
  const std::string body_sent = EncodeBatch(items);
  HttpRequestText req("POST", path_, service_->authority(), 256 + body_sent.size());
  req.Field("Content-Type", "application/json");
  req.Field(kBatchHeader, static_cast<uint64_t>(batch.size()));
  const std::string request = std::move(req).Finish(body_sent);
  ServiceAnswer r;
  co_await service_->Exchange(request, r);
  Observe(r);
  if (r.failure != ServiceAnswer::Failure::kNone) {
    co_return std::vector<Attempt>(batch.size(), FailedExchange(r));
  }
  const int status = r.status;
  const std::string& body = r.body;
  const std::string batch_of = "a batch of " + std::to_string(batch.size());
  if (status / 100 != 2) {
    Attempt a;
    a.give_up.status = status;
    a.give_up.failure = "http";
    a.why = batch_of + " answered HTTP " + std::to_string(status);
    if (!body.empty()) a.why += ": " + body.substr(0, 200);
    a.retry_after = RetryAfter(r.retry_after);
    a.give_up.error_body = body.substr(0, kDeadLetterBodyBytes);
    co_return std::vector<Attempt>(batch.size(), a);
  }
  co_return BatchAttempts(r, batch_of, keys);
}

std::vector<Sidecar::Attempt> Sidecar::BatchAttempts(const ServiceAnswer& answer,
                                                     const std::string& batch_of,
                                                     const std::vector<std::string_view>& keys) {
  const int status = answer.status;
  const std::string& body = answer.body;
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
  const std::optional<Duration> retry_after = RetryAfter(answer.retry_after);
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

void Sidecar::Observe(const ServiceAnswer& r) {
  metrics_.delivery_seconds().Observe(std::chrono::duration<double>(r.elapsed).count());
}

Sidecar::Attempt Sidecar::FailedExchange(const ServiceAnswer& r) {
  Attempt a;
  switch (r.failure) {
    case ServiceAnswer::Failure::kTimeout:
      metrics_.CountError(ConsumeMetrics::kTimeout);
      a.why = "no answer within " + Ms(options_.timeout) + " (" + r.detail + ")";
      a.give_up.failure = "timeout";
      break;
    case ServiceAnswer::Failure::kConnect:
      metrics_.CountError(ConsumeMetrics::kConnect);
      a.why = r.detail;
      a.give_up.failure = "connect";
      a.unreachable = true;
      break;
    case ServiceAnswer::Failure::kTooLarge:
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
