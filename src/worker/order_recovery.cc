#include "worker/order_recovery.h"

namespace idem::worker {

Result<ConsumerProgress> ReadConsumerProgress(NatsConnection& conn, const std::string& stream,
                                              const std::string& consumer) {
  jsConsumerInfo* info = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s =
      js_GetConsumerInfo(&info, conn.js(), stream.c_str(), consumer.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return FromNats(s, "consumer info " + stream + "/" + consumer, jerr);
  ConsumerProgress p;
  if (info->Config != nullptr) {
    p.ack_wait = Duration(info->Config->AckWait / 1'000'000);
    if (info->Config->FilterSubject != nullptr) p.filter_subject = info->Config->FilterSubject;
  }
  p.ack_floor = info->AckFloor.Stream;
  p.delivered = info->Delivered.Stream;
  jsConsumerInfo_Destroy(info);
  return p;
}

bool SubjectMatches(std::string_view filter, std::string_view subject) {
  if (filter.empty()) return true;
  for (;;) {
    const size_t fdot = filter.find('.');
    const size_t sdot = subject.find('.');
    const std::string_view ftok = filter.substr(0, fdot);
    const std::string_view stok = subject.substr(0, sdot);
    if (ftok == ">") return !stok.empty();
    if (ftok != "*" && ftok != stok) return false;
    if (fdot == std::string_view::npos || sdot == std::string_view::npos) {
      return fdot == std::string_view::npos && sdot == std::string_view::npos;
    }
    filter.remove_prefix(fdot + 1);
    subject.remove_prefix(sdot + 1);
  }
}

Result<std::vector<KeyOrder::Keyed>> ReadOrderingKeys(NatsConnection& conn,
                                                      const std::string& stream,
                                                      const std::string& filter_subject,
                                                      uint64_t first, uint64_t last,
                                                      uint64_t limit, uint64_t* read_up_to) {
  std::vector<KeyOrder::Keyed> out;
  const std::string header(kOrderingKeyHeader);
  uint64_t seq = first;
  for (; seq <= last && seq - first < limit; ++seq) {
    natsMsg* msg = nullptr;
    jsErrCode jerr = static_cast<jsErrCode>(0);
    const natsStatus s = js_GetMsg(&msg, conn.js(), stream.c_str(), seq, nullptr, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) continue;  // deleted
    if (s != NATS_OK) {
      return FromNats(s, "read " + stream + " #" + std::to_string(seq), jerr);
    }
    const char* subject = natsMsg_GetSubject(msg);
    const char* key = nullptr;
    if (subject != nullptr && SubjectMatches(filter_subject, subject) &&
        natsMsgHeader_Get(msg, header.c_str(), &key) == NATS_OK && key != nullptr &&
        *key != '\0') {
      out.push_back({key, seq});
    }
    natsMsg_Destroy(msg);
  }
  if (read_up_to != nullptr) *read_up_to = seq - 1;
  return out;
}

}  // namespace idem::worker
