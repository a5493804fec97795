#include "util/js_client.h"

namespace idem::testing {
namespace {

std::string Error(const char* what, natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  return std::string(what) + ": " + natsStatus_GetText(s) +
         (jerr != 0 ? " [JetStream " + std::to_string(jerr) + "]" : "");
}

}  // namespace

JsClient::~JsClient() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (conn_ != nullptr) {
    natsConnection_Close(conn_);
    natsConnection_Destroy(conn_);
  }
}

std::string JsClient::Connect(const std::string& url) {
  natsOptions* opts = nullptr;
  natsOptions_Create(&opts);
  natsOptions_SetURL(opts, url.c_str());
  natsOptions_SetMaxReconnect(opts, -1);
  natsOptions_SetReconnectWait(opts, 100);
  natsStatus s = natsConnection_Connect(&conn_, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) return Error("connect", s);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 10000;
  s = natsConnection_JetStream(&js_, conn_, &jo);
  return s == NATS_OK ? "" : Error("jetstream", s);
}

std::string AddStream(jsCtx* js, const std::string& name, const std::vector<std::string>& subjects,
                      std::chrono::milliseconds duplicate_window, int32_t max_msg_size) {
  jsStreamConfig cfg;
  jsStreamConfig_Init(&cfg);
  cfg.Name = name.c_str();
  std::vector<const char*> subs;
  for (const auto& s : subjects) subs.push_back(s.c_str());
  cfg.Subjects = subs.data();
  cfg.SubjectsLen = static_cast<int>(subs.size());
  cfg.Storage = js_FileStorage;
  cfg.Duplicates = duplicate_window.count() * 1'000'000;
  cfg.MaxMsgSize = max_msg_size;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  jsStreamInfo* si = nullptr;
  const natsStatus s = js_AddStream(&si, js, &cfg, nullptr, &jerr);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  return s == NATS_OK ? "" : Error("add stream", s, jerr);
}

std::string JsClient::AddStream(const std::string& name, const std::vector<std::string>& subjects,
                                int64_t duplicate_window_ms) {
  return testing::AddStream(js_, name, subjects, std::chrono::milliseconds(duplicate_window_ms));
}

std::string JsClient::Publish(const std::string& subject, const std::string& data,
                              const std::string& msg_id,
                              const std::vector<std::pair<std::string, std::string>>& headers,
                              bool* duplicate) {
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject.c_str(), nullptr, data.data(),
                                static_cast<int>(data.size()));
  if (s != NATS_OK) return Error("message", s);
  for (const auto& [k, v] : headers) natsMsgHeader_Add(msg, k.c_str(), v.c_str());
  jsPubOptions po;
  jsPubOptions_Init(&po);
  if (!msg_id.empty()) po.MsgId = msg_id.c_str();
  jsPubAck* ack = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  s = js_PublishMsg(&ack, js_, msg, &po, &jerr);
  natsMsg_Destroy(msg);
  if (s == NATS_OK && duplicate != nullptr) *duplicate = ack->Duplicate;
  if (ack != nullptr) jsPubAck_Destroy(ack);
  return s == NATS_OK ? "" : Error("publish", s, jerr);
}

std::string JsClient::Counts(const std::string& stream, const std::string& consumer,
                             ConsumerCounts* out) {
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetConsumerInfo(&ci, js_, stream.c_str(), consumer.c_str(), nullptr, &jerr);
  if (s != NATS_OK) return Error("consumer info", s, jerr);
  out->ack_pending = ci->NumAckPending;
  out->pending = ci->NumPending;
  out->redelivered = ci->NumRedelivered;
  jsConsumerInfo_Destroy(ci);
  return "";
}

uint64_t JsClient::StreamMessages(const std::string& stream) {
  jsStreamInfo* si = nullptr;
  if (js_GetStreamInfo(&si, js_, stream.c_str(), nullptr, nullptr) != NATS_OK) return 0;
  const uint64_t n = si->State.Msgs;
  jsStreamInfo_Destroy(si);
  return n;
}

StoredMessage JsClient::Get(const std::string& stream, uint64_t sequence) {
  StoredMessage out;
  natsMsg* msg = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetMsg(&msg, js_, stream.c_str(), sequence, nullptr, &jerr);
  if (s != NATS_OK) {
    out.error = std::string("js_GetMsg: ") + natsStatus_GetText(s);
    return out;
  }
  out.data.assign(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  const char** keys = nullptr;
  int n = 0;
  if (natsMsgHeader_Keys(msg, &keys, &n) == NATS_OK) {
    for (int i = 0; i < n; ++i) {
      const char* v = nullptr;
      if (natsMsgHeader_Get(msg, keys[i], &v) == NATS_OK) out.headers[keys[i]] = v ? v : "";
    }
    free(static_cast<void*>(keys));
  }
  natsMsg_Destroy(msg);
  return out;
}

}  // namespace idem::testing
