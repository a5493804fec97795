#include "worker/dead_letter.h"

#include <algorithm>
#include <thread>

#include "core/text.h"
#include "worker/jetstream.h"

namespace idem::worker {

std::string OneLineHeaderValue(std::string_view text, size_t max_bytes) {
  if (text.size() > max_bytes) {
    size_t cut = max_bytes;
    // Back up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut);
  }
  std::string out(text);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return out;
}

MessageHeaders DeadLetterHeaders(const MessageHeaders& original, std::string_view key,
                                 std::string_view subject, std::string_view stream,
                                 uint64_t stream_sequence, uint64_t delivery_count,
                                 const GiveUp& why) {
  static constexpr std::string_view kOwn[] = {
      "Idem-Dead-Reason", "Idem-Failure", "Idem-Status", "Idem-Reason", "Idem-Error-Body",
      "Idem-Delivery-Count", "Idem-Failing-For-Ms", "Idem-Key", "Idem-Subject", "Idem-Stream",
      "Idem-Stream-Sequence", "Idem-Original-Msg-Id"};
  MessageHeaders out;
  std::string msg_id;
  for (const auto& [name, value] : original) {
    if (internal::EqualsIgnoreCase(name, "Nats-Msg-Id")) msg_id = value;
    if (name.size() >= 5 && internal::EqualsIgnoreCase(std::string_view(name).substr(0, 5), "nats-")) {
      continue;
    }
    bool own = false;
    for (std::string_view o : kOwn) own = own || internal::EqualsIgnoreCase(name, o);
    if (!own) out.emplace_back(name, value);
  }
  const std::string where = std::string(stream) + ":" + std::to_string(stream_sequence);
  out.emplace_back("Nats-Msg-Id", "dead:" + where);
  out.emplace_back("Idem-Dead-Reason", std::string(GiveUpReasonName(why.reason)));
  out.emplace_back("Idem-Failure", OneLineHeaderValue(why.failure, 64));
  if (why.status != 0) out.emplace_back("Idem-Status", std::to_string(why.status));
  out.emplace_back("Idem-Reason", OneLineHeaderValue(why.why, 512));
  if (!why.error_body.empty()) {
    out.emplace_back("Idem-Error-Body", OneLineHeaderValue(why.error_body, kDeadLetterBodyBytes));
  }
  out.emplace_back("Idem-Delivery-Count", std::to_string(delivery_count));
  out.emplace_back("Idem-Failing-For-Ms", std::to_string(why.failing_for.count()));
  out.emplace_back("Idem-Key", std::string(key));
  out.emplace_back("Idem-Subject", std::string(subject));
  out.emplace_back("Idem-Stream", std::string(stream));
  out.emplace_back("Idem-Stream-Sequence", std::to_string(stream_sequence));
  if (!msg_id.empty()) out.emplace_back("Idem-Original-Msg-Id", OneLineHeaderValue(msg_id, 1024));
  return out;
}

std::string GivenUpText(GiveUpReason reason, uint64_t delivery_count, Duration failing_for,
                        const RetryLimits& limits, const GiveUpNames& names) {
  switch (reason) {
    case GiveUpReason::kMaxDeliver:
      return "given up after " + std::to_string(delivery_count) + " failed deliveries (" +
             std::string(names.max_deliver) + " " + std::to_string(limits.max_deliver) + ")";
    case GiveUpReason::kMaxRetryTime:
      return "given up after failing for " + std::to_string(failing_for.count()) + " ms (" +
             std::string(names.max_retry_time) + " " +
             std::to_string(limits.max_retry_time.count()) + " ms)";
    default:
      return "refused by " + std::string(names.refuser);
  }
}

namespace {

Status PublishOnce(NatsConnection& nats, const std::string& subject, const JsMessage& m,
                   const MessageHeaders& headers) {
  natsMsg* msg = nullptr;
  const std::string_view data = m.data();
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, data.data(),
                                static_cast<int>(data.size()));
  if (s != NATS_OK) return FromNats(s, "dead-letter message");
  for (const auto& [name, value] : headers) {
    if (s == NATS_OK) s = natsMsgHeader_Add(msg, name.c_str(), value.c_str());
  }
  if (s != NATS_OK) {
    natsMsg_Destroy(msg);
    return FromNats(s, "dead-letter headers");
  }
  jsPubAck* ack = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  s = js_PublishMsg(&ack, nats.js(), msg, nullptr, &jerr);
  natsMsg_Destroy(msg);
  if (ack != nullptr) jsPubAck_Destroy(ack);
  if (s == NATS_NO_RESPONDERS) {
    return UnavailableError("publish to " + subject + ": no stream stores this subject");
  }
  return FromNats(s, "publish to " + subject, jerr);
}

}  // namespace

Status PublishDeadLetter(NatsConnection& nats, const std::string& subject, const JsMessage& m,
                         const GiveUp& why, int attempts) {
  const MessageHeaders headers =
      DeadLetterHeaders(m.headers(), m.key(), m.subject(), m.stream(), m.stream_sequence(),
                        m.delivery_count(), why);
  Status s;
  Duration pause(100);
  for (int i = 0; i < std::max(attempts, 1); ++i) {
    if (i > 0) {
      std::this_thread::sleep_for(pause);
      pause *= 4;
    }
    s = PublishOnce(nats, subject, m, headers);
    if (s.ok()) return s;
  }
  return s;
}

Result<std::string> StreamStoring(NatsConnection& nats, const std::string& subject) {
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Info.SubjectsFilter = subject.c_str();
  jsStreamNamesList* list = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = js_StreamNames(&list, nats.js(), &o, &jerr);
  std::string name;
  if (s == NATS_OK && list != nullptr && list->Count > 0) name = list->List[0];
  if (list != nullptr) jsStreamNamesList_Destroy(list);
  if (!name.empty()) return name;
  if (s == NATS_OK || s == NATS_NOT_FOUND) {
    return FailedPreconditionError("no stream stores subject '" + subject +
                                   "': a dead letter published there would be lost; create one "
                                   "(nats stream add DEAD --subjects '" + subject + "')");
  }
  return FromNats(s, "find the stream storing '" + subject + "'", jerr);
}

}  // namespace idem::worker
