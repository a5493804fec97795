#include "worker/delivery_policy.h"

#include <algorithm>

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
  switch (d) {
    case Disposition::kAck: return "ack";
    case Disposition::kNak: return "nak";
    case Disposition::kTerm: return "term";
  }
  return "?";
}

Disposition ClassifyHttpStatus(int status) {
  if (status >= 200 && status < 300) return Disposition::kAck;
  if (status == 408 || status == 425 || status == 429) return Disposition::kNak;
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
