#include "worker/jetstream.h"

#include <charconv>
#include <cstdlib>
#include <iterator>
#include <cstring>

#include "worker/delivery_policy.h"
#include "nats/nats_servers.h"

// nats.c's own free of a message (msg.h: what its collector thread calls on each), exported by
// libnats but not declared in its public header: weak, so that a build of the library without
// it leaves it null and Detached::Free hands the messages to natsMsg_Destroy.
extern "C" void natsMsg_free(void* object) __attribute__((weak));

namespace idem::worker {
namespace {

constexpr int64_t kNanosPerMilli = 1'000'000;

struct OptionsDeleter {
  void operator()(natsOptions* o) const { natsOptions_Destroy(o); }
};

// JetStream API errors that pass (a cluster electing a leader, a stream or consumer moving);
// any other error the server answers a consumer creation with is the configuration's.
bool TransientJsError(jsErrCode e) {
  switch (e) {
    case JSClusterIncompleteErr:
    case JSClusterNoPeersErr:
    case JSClusterNotAssignedErr:
    case JSClusterNotAvailErr:
    case JSClusterNotLeaderErr:
    case JSInsufficientResourcesErr:
    case JSConsumerStoreFailedErr:
    case JSStreamOfflineErr:
    case JSConsumerOfflineErr: return true;
    default: return false;
  }
}

}  // namespace

// --- NatsConnection ----------------------------------------------------------------------------

Result<std::unique_ptr<NatsConnection>> NatsConnection::Connect(const std::string& url,
                                                                const std::string& name,
                                                                Listener listener,
                                                                const internal::NatsAuth& auth) {
  natsOptions* raw = nullptr;
  if (natsStatus s = natsOptions_Create(&raw); s != NATS_OK) return FromNats(s, "nats options");
  std::unique_ptr<natsOptions, OptionsDeleter> opts(raw);
  std::unique_ptr<NatsConnection> c(new NatsConnection());
  c->listener_ = std::move(listener);
  natsStatus s = internal::SetNatsServers(opts.get(), url);
  if (s == NATS_OK) s = natsOptions_SetName(opts.get(), name.c_str());
  if (s == NATS_OK) s = static_cast<natsStatus>(internal::ApplyNatsAuth(opts.get(), auth));
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts.get(), -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts.get(), 250);
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts.get(), 2000);
  if (s == NATS_OK) {
    s = natsOptions_SetRetryOnFailedConnect(opts.get(), true, &NatsConnection::OnReconnected,
                                            c.get());
  }
  if (s == NATS_OK) {
    s = natsOptions_SetDisconnectedCB(opts.get(), &NatsConnection::OnDisconnected, c.get());
  }
  if (s == NATS_OK) {
    s = natsOptions_SetReconnectedCB(opts.get(), &NatsConnection::OnReconnected, c.get());
  }
  if (s == NATS_OK) s = natsOptions_SetClosedCB(opts.get(), &NatsConnection::OnClosed, c.get());
  if (s != NATS_OK) return FromNats(s, "nats options for '" + url + "'");
  s = natsConnection_Connect(&c->conn_, opts.get());
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    return FromNats(s, "connect to " + url).WithContext("nats");
  }
  jsOptions js_opts;
  jsOptions_Init(&js_opts);
  js_opts.Wait = 5000;
  if (natsStatus js = natsConnection_JetStream(&c->js_, c->conn_, &js_opts); js != NATS_OK) {
    return FromNats(js, "jetstream context");
  }
  return c;
}

NatsConnection::~NatsConnection() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (conn_ != nullptr) {
    if (connected()) natsConnection_FlushTimeout(conn_, 2000);
    natsConnection_Close(conn_);
    // nats.c delivers the disconnected and closed callbacks on its own thread after Close
    // returns, with `this` as their closure: wait for the closed one, the last, before the
    // members they read go away.
    MutexLock lock(closed_mu_);
    const auto give_up_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!closed_ && closed_cv_.WaitUntil(lock, give_up_at)) {
    }
    lock.Unlock();
    natsConnection_Destroy(conn_);
  }
}

bool NatsConnection::connected() const {
  return conn_ != nullptr && natsConnection_Status(conn_) == NATS_CONN_STATUS_CONNECTED;
}

std::optional<std::string> NatsConnection::GaveUp() const {
  if (conn_ == nullptr) return std::nullopt;
  const char* text = nullptr;
  const natsStatus last = natsConnection_GetLastError(conn_, &text);
  const std::string detail = text != nullptr && *text != '\0' ? text : natsStatus_GetText(last);
  // nats.c drops a server from its pool once it refuses the credentials twice, and closes the
  // connection when its pool is empty; the first refusal is already final for us.
  const bool refused = internal::NatsRefusedCredentials(last, detail);
  if (!refused && !natsConnection_IsClosed(conn_)) return std::nullopt;
  return detail;
}

Status NatsConnection::Flush(Duration timeout) {
  return FromNats(natsConnection_FlushTimeout(conn_, timeout.count()), "nats flush");
}

void NatsConnection::OnDisconnected(natsConnection* nc, void* closure) {
  auto* self = static_cast<NatsConnection*>(closure);
  if (!self->listener_) return;
  natsStatus last = NATS_OK;
  const char* err = nats_GetLastError(&last);
  self->listener_(false, err != nullptr ? err : "");
}

void NatsConnection::OnReconnected(natsConnection* nc, void* closure) {
  auto* self = static_cast<NatsConnection*>(closure);
  if (!self->listener_) return;
  char url[256] = {0};
  natsConnection_GetConnectedUrl(nc, url, sizeof url);
  self->listener_(true, url);
}

void NatsConnection::OnClosed(natsConnection* nc, void* closure) {
  auto* self = static_cast<NatsConnection*>(closure);
  MutexLock lock(self->closed_mu_);
  self->closed_ = true;
  self->closed_cv_.NotifyAll();
}

// --- JsAckSubject ------------------------------------------------------------------------------

std::optional<JsAckSubject> ParseJsAckSubject(std::string_view reply) {
  constexpr std::string_view kPrefix = "$JS.ACK.";
  if (reply.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view tokens[11];  // the first ones; n counts them all
  size_t n = 0;
  for (size_t start = 0;; ++n) {
    const size_t dot = reply.find('.', start);
    if (n < std::size(tokens)) {
      tokens[n] = reply.substr(start, dot == std::string_view::npos ? dot : dot - start);
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  ++n;
  size_t at;  // the stream's token
  if (n == 9) {
    at = 2;
  } else if (n >= 11) {
    at = 4;
  } else {
    return std::nullopt;
  }
  auto number = [](std::string_view t, uint64_t* v) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return !t.empty() && ec == std::errc() && end == t.data() + t.size();
  };
  JsAckSubject m;
  m.stream = tokens[at];
  if (m.stream.empty() || !number(tokens[at + 2], &m.delivered) ||
      !number(tokens[at + 3], &m.stream_sequence)) {
    return std::nullopt;
  }
  return m;
}

// --- JsMessage ---------------------------------------------------------------------------------

Result<JsMessage> JsMessage::Read(natsMsg* msg) {
  JsMessage m;
  m.msg_.reset(msg);
  const char* reply = natsMsg_GetReply(msg);
  if (auto parsed = ParseJsAckSubject(reply != nullptr ? reply : "")) {
    m.stream_ = parsed->stream;
    m.stream_sequence_ = parsed->stream_sequence;
    m.delivery_count_ = parsed->delivered;
  } else {
    jsMsgMetaData* meta = nullptr;
    if (natsStatus s = natsMsg_GetMetaData(&meta, msg); s != NATS_OK) {
      return FromNats(s, "message metadata").WithContext("not a JetStream message");
    }
    m.stream_ = meta->Stream != nullptr ? meta->Stream : "";
    m.stream_sequence_ = meta->Sequence.Stream;
    m.delivery_count_ = meta->NumDelivered;
    jsMsgMetaData_Destroy(meta);
  }
  const char* subject = natsMsg_GetSubject(msg);
  m.subject_ = subject != nullptr ? subject : "";

  const char** keys = nullptr;
  int nkeys = 0;
  if (natsMsgHeader_Keys(msg, &keys, &nkeys) == NATS_OK) {
    for (int i = 0; i < nkeys; ++i) {
      const char** values = nullptr;
      int nvalues = 0;
      if (natsMsgHeader_Values(msg, keys[i], &values, &nvalues) == NATS_OK) {
        for (int j = 0; j < nvalues; ++j) {
          m.headers_.emplace_back(keys[i], values[j] != nullptr ? values[j] : "");
        }
        free(static_cast<void*>(values));
      }
    }
    free(static_cast<void*>(keys));
  }
  // Nats-Msg-Id's first value (what natsMsgHeader_Get gives), from the copy just made rather
  // than another lookup in nats.c's table: a key's values are read together, in order.
  std::optional<std::string_view> msg_id;
  for (const auto& [name, value] : m.headers_) {
    if (name != "Nats-Msg-Id") continue;
    if (!value.empty()) {
      msg_id = value;
      m.has_msg_id_ = true;
    }
    break;
  }
  m.key_ = MessageKey(msg_id, m.stream_, m.stream_sequence_);
  return m;
}

std::string_view JsMessage::data() const {
  if (!msg_) return {};
  const char* d = natsMsg_GetData(msg_.get());
  return d == nullptr ? std::string_view() : std::string_view(d, natsMsg_GetDataLength(msg_.get()));
}

JsMessage::Detached JsMessage::Detach(std::vector<std::shared_ptr<JsMessage>>& messages) {
  Detached out;
  out.msgs_.reserve(messages.size());
  for (auto& m : messages) {
    if (m.use_count() == 1 && m->msg_) out.msgs_.push_back(m->msg_.release());
  }
  messages.clear();
  return out;
}

void JsMessage::Detached::Free() {
  // natsMsg_Destroy queues each message for nats.c's collector thread and wakes it whenever it
  // sleeps; that thread, quicker to free one message than the caller is to queue the next, is
  // woken again and again (and meets the caller on the queue's lock): a wake-up per few
  // messages. These messages are idem's alone (fetched, settled, never marked for nats.c to
  // destroy), so freeing them here is what the collector would do, without the hand-over.
  for (natsMsg* m : msgs_) {
    if (natsMsg_free != nullptr) {
      natsMsg_free(m);
    } else {
      natsMsg_Destroy(m);
    }
  }
  msgs_.clear();
}

// The status text ("ack KEY: ...") is built only for a failure: these run once per message.
Status JsMessage::Ack() {
  const natsStatus s = natsMsg_Ack(msg_.get(), nullptr);
  if (s != NATS_OK) return FromNats(s, "ack " + key_);
  settled_ = Settled::kAcked;
  return Status::Ok();
}

Status JsMessage::Nak(Duration delay) {
  const natsStatus s = natsMsg_NakWithDelay(msg_.get(), delay.count(), nullptr);
  if (s != NATS_OK) return FromNats(s, "nak " + key_);
  settled_ = Settled::kNaked;
  return Status::Ok();
}

Status JsMessage::Term() {
  const natsStatus s = natsMsg_Term(msg_.get(), nullptr);
  if (s != NATS_OK) return FromNats(s, "term " + key_);
  settled_ = Settled::kTermed;
  return Status::Ok();
}

Status JsMessage::InProgress() {
  const natsStatus s = natsMsg_InProgress(msg_.get(), nullptr);
  return s == NATS_OK ? Status::Ok() : FromNats(s, "in-progress " + key_);
}

// --- PullSubscription --------------------------------------------------------------------------

Result<std::unique_ptr<PullSubscription>> PullSubscription::Bind(NatsConnection& conn,
                                                                const PullConsumerConfig& config,
                                                                std::string* warning) {
  if (config.stream.empty() || config.consumer.empty()) {
    return InvalidArgumentError("a stream and a consumer name are required");
  }
  if (config.consumer.find_first_of(". *>") != std::string::npos) {
    return InvalidArgumentError("consumer name '" + config.consumer +
                                "' must not contain '.', ' ', '*' or '>'");
  }
  const std::string where = "consumer " + config.stream + "/" + config.consumer;
  jsConsumerInfo* info = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetConsumerInfo(&info, conn.js(), config.stream.c_str(),
                                    config.consumer.c_str(), nullptr, &jerr);
  if (jerr == JSStreamNotFoundErr) {
    return NotFoundError("stream '" + config.stream +
                         "' does not exist on the NATS server; check the name, or create it "
                         "(nats stream add " + config.stream + " --subjects 'SUBJECT.>')");
  }
  if (s == NATS_NOT_FOUND) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = config.consumer.c_str();
    cc.AckPolicy = js_AckExplicit;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckWait = config.ack_wait.count() * kNanosPerMilli;
    cc.MaxAckPending = config.max_ack_pending;
    cc.MaxDeliver = -1;
    if (!config.filter_subject.empty()) cc.FilterSubject = config.filter_subject.c_str();
    jerr = static_cast<jsErrCode>(0);
    s = js_AddConsumer(&info, conn.js(), config.stream.c_str(), &cc, nullptr, &jerr);
    if (s != NATS_OK && jerr != 0 && !TransientJsError(jerr)) {
      // The server refused the configuration (a filter subject outside the stream's, ...).
      return FailedPreconditionError(FromNats(s, "create " + where, jerr).message() +
                                     (config.filter_subject.empty()
                                          ? std::string()
                                          : " (filter subject '" + config.filter_subject + "')"));
    }
    if (s != NATS_OK) return FromNats(s, "create " + where, jerr);
    if (warning != nullptr) *warning = "created " + where;
  } else if (s != NATS_OK) {
    return FromNats(s, "look up " + where, jerr);
  } else if (warning != nullptr && info->Config != nullptr) {
    const int64_t ack_wait_ms = info->Config->AckWait / kNanosPerMilli;
    if (ack_wait_ms != config.ack_wait.count() ||
        info->Config->MaxAckPending != config.max_ack_pending) {
      *warning = "using existing " + where + " with ack_wait " + std::to_string(ack_wait_ms) +
                 " ms and max_ack_pending " + std::to_string(info->Config->MaxAckPending) +
                 " (its settings win over the flags; delete the consumer to change them)";
    }
    const int64_t server_max = info->Config->MaxDeliver;
    if (server_max > 0 && (config.max_deliver == 0 ||
                           static_cast<uint64_t>(server_max) <= config.max_deliver)) {
      *warning += std::string(warning->empty() ? "" : "; ") + where + " has max_deliver " +
                  std::to_string(server_max) +
                  " on the server: NATS stops delivering a message after that many deliveries, "
                  "silently, before idem's own limit (" + std::to_string(config.max_deliver) +
                  ") can dead-letter it; recreate the consumer without max_deliver";
    }
  }
  if (info != nullptr && info->Config != nullptr && info->Config->AckPolicy != js_AckExplicit) {
    jsConsumerInfo_Destroy(info);
    return FailedPreconditionError(where + " exists without explicit acks; idem needs them");
  }
  if (info != nullptr) jsConsumerInfo_Destroy(info);

  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = config.stream.c_str();
  so.Consumer = config.consumer.c_str();
  so.ManualAck = true;
  std::unique_ptr<PullSubscription> sub(new PullSubscription());
  jerr = static_cast<jsErrCode>(0);
  s = js_PullSubscribe(&sub->sub_, conn.js(), "", config.consumer.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK) return FromNats(s, "bind to " + where, jerr);
  return sub;
}

PullSubscription::~PullSubscription() {
  if (sub_ != nullptr) natsSubscription_Destroy(sub_);
}

Result<std::vector<JsMessage>> PullSubscription::Fetch(int batch, Duration wait) {
  natsMsgList list{};
  jsErrCode jerr = static_cast<jsErrCode>(0);
  const natsStatus s = natsSubscription_Fetch(&list, sub_, batch, wait.count(), &jerr);
  std::vector<JsMessage> out;
  out.reserve(list.Count > 0 ? list.Count : 0);
  Status first_error;
  for (int i = 0; i < list.Count; ++i) {
    natsMsg* m = list.Msgs[i];
    list.Msgs[i] = nullptr;  // ours now, whatever Read says
    auto read = JsMessage::Read(m);
    if (read.ok()) out.push_back(std::move(*read));
    else if (first_error.ok()) first_error = read.status();
  }
  natsMsgList_Destroy(&list);
  if (!out.empty()) return out;
  if (s == NATS_OK || s == NATS_TIMEOUT) {
    if (!first_error.ok()) return first_error;
    return out;
  }
  return FromNats(s, "fetch", jerr);
}

}  // namespace idem::worker
