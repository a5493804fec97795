#include "worker/delivery_policy.h"

#include <algorithm>

#include "core/enum_names.h"
#include "core/transient_status.h"
#include "idem/fingerprint.h"

namespace idem::worker {
namespace {

bool ValidKey(std::string_view key) {
  if (key.empty() || key.size() > 255) return false;
  return std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace

std::string MessageKey(std::optional<std::string_view> nats_msg_id, std::string_view stream,
                       uint64_t stream_sequence) {
  if (nats_msg_id && !nats_msg_id->empty()) {
    if (ValidKey(*nats_msg_id)) return std::string(*nats_msg_id);
    auto hex = Sha256Hex(*nats_msg_id);
    if (hex.ok()) return "msgid-sha256:" + *hex;
  }
  return std::string(stream) + ":" + std::to_string(stream_sequence);
}

std::string_view DispositionName(Disposition d) {
  using enum Disposition;
  static constexpr internal::EnumName<Disposition> kNames[] = {
      {kAck, "ack"}, {kNak, "nak"}, {kTerm, "term"}};
  return internal::NameOf(kNames, d, "?");
}

Disposition ClassifyHttpStatus(int status) {
  if (status >= 200 && status < 300) return Disposition::kAck;
  if (internal::IsTransientHttpStatus(status, {.too_early = true})) return Disposition::kNak;
  if (status >= 400 && status < 500) return Disposition::kTerm;
  return Disposition::kNak;
}

Duration NakDelay(uint64_t delivery_count, Duration base, Duration cap, uint64_t random) {
  int64_t delay = std::max<int64_t>(base.count(), 0);
  for (uint64_t i = 1; i < delivery_count && delay < cap.count(); ++i) delay *= 2;
  delay = std::min(delay, cap.count());
  if (delay <= 0) return Duration(0);
  const int64_t jitter = delay / 5;
  if (jitter > 0) delay -= static_cast<int64_t>(random % static_cast<uint64_t>(jitter + 1));
  return Duration(delay);
}

}  // namespace idem::worker

namespace idem::worker {

std::string ValidRetryLimits(const RetryLimits& limits) {
  if (limits.max_retry_time.count() < 0) return "the retry time limit must not be negative";
  if (limits.max_deliver == 0 && limits.max_retry_time.count() == 0) {
    return "a delivery limit and a retry time limit of 0 together would redeliver a poison "
           "message forever; keep at least one";
  }
  return "";
}

std::string_view GiveUpReasonName(GiveUpReason r) {
  using enum GiveUpReason;
  static constexpr internal::EnumName<GiveUpReason> kNames[] = {{kNone, "none"},
                                                                {kRefused, "refused"},
                                                                {kMaxDeliver, "max-deliver"},
                                                                {kMaxRetryTime, "max-retry-time"}};
  return internal::NameOf(kNames, r, "?");
}

GiveUpReason RetryLimitReached(uint64_t delivery_count, Duration failing_for,
                               bool service_unreachable, const RetryLimits& limits) {
  if (service_unreachable) return GiveUpReason::kNone;
  if (limits.max_deliver > 0 && delivery_count >= limits.max_deliver) {
    return GiveUpReason::kMaxDeliver;
  }
  if (limits.max_retry_time.count() > 0 && failing_for >= limits.max_retry_time) {
    return GiveUpReason::kMaxRetryTime;
  }
  return GiveUpReason::kNone;
}

bool RetryDeadLetterByRedelivery(uint64_t delivery_count, Duration failing_for,
                                 const RetryLimits& limits) {
  return RetryLimitReached(delivery_count, failing_for, false, limits) == GiveUpReason::kNone;
}

bool ValidSubject(std::string_view subject, bool wildcards) {
  if (subject.empty()) return false;
  size_t start = 0;
  for (;;) {
    const size_t dot = subject.find('.', start);
    const std::string_view token =
        subject.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (token.empty()) return false;
    for (char c : token) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
    }
    const bool last = dot == std::string_view::npos;
    if (token == "*" && !wildcards) return false;
    if (token == ">" && (!wildcards || !last)) return false;
    if (last) return true;
    start = dot + 1;
  }
}

}  // namespace idem::worker
