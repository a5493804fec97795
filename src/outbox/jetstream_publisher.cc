#include "outbox/jetstream_publisher.h"

#include <nats/nats.h>

#include <map>
#include <unordered_map>

#include "core/mutex.h"
#include "nats/nats_servers.h"
#include "nats/nats_status.h"

namespace idem::outbox {
namespace {

// JetStream errors that say this message will never be stored as it is.
bool IsPermanent(natsStatus s, jsErrCode code) {
  return s == NATS_MAX_PAYLOAD || code == JSStreamMessageExceedsMaximumErr ||
         code == JSStreamMismatchErr;
}

}  // namespace

int64_t EncodedSize(const OutMessage& message) {
  // "NATS/1.0\r\n", each "Name: value\r\n", the final "\r\n", Nats-Msg-Id among them.
  int64_t size = static_cast<int64_t>(message.payload.size()) + 12 +
                 static_cast<int64_t>(std::string("Nats-Msg-Id: \r\n").size() + message.msg_id.size());
  for (const auto& [name, value] : message.headers) {
    size += static_cast<int64_t>(name.size() + value.size() + 4);
  }
  return size;
}

struct JetStreamPublisher::State {
  natsConnection* conn = nullptr;
  jsCtx* js = nullptr;
  std::chrono::milliseconds ack_timeout{5000};
  // Whether Send ever published: until then nats.c has no table of pending messages, and its
  // js_PublishAsyncGetPendingList must not be called.
  bool published = false;

  Mutex mu;
  CondVar cv;
  // The batches in flight, by id, with how many of their messages still await an answer.
  struct Batch {
    std::vector<PublishResult> results;
    size_t waiting = 0;
  };
  std::map<BatchId, Batch> batches IDEM_GUARDED_BY(mu);
  // Every message in flight: message pointer -> its batch and index.
  std::unordered_map<const natsMsg*, std::pair<BatchId, size_t>> in_flight IDEM_GUARDED_BY(mu);
  BatchId next_batch IDEM_GUARDED_BY(mu) = 1;
  // Whether Send waits for a free slot in the window. An answer wakes the sender only then,
  // and Wait only when it completes a batch: a wake-up per PubAck cost more CPU than the rest
  // of the relay's publishing path.
  bool sender_waiting IDEM_GUARDED_BY(mu) = false;

  // Records the answer for message `it` and forgets it. Returns whether a thread waits for
  // this answer (a sender for a slot, or Wait for the batch it completes).
  bool Settle(std::unordered_map<const natsMsg*, std::pair<BatchId, size_t>>::iterator it,
              PublishResult result) IDEM_REQUIRES(mu) {
    bool wake = sender_waiting;
    auto b = batches.find(it->second.first);
    if (b != batches.end()) {
      b->second.results[it->second.second] = std::move(result);
      if (--b->second.waiting == 0) wake = true;
    }
    in_flight.erase(it);
    return wake;
  }

  ~State() {
    if (js != nullptr && published) {
      // OnAck runs on nats.c's thread and uses this State until it returns, also after the
      // answer it records woke Wait. Take the unanswered messages back (their handler is then
      // never called) and wait for a handler still running: nats.c counts a message as pending
      // until its handler has returned.
      natsMsgList pending{};
      if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK) natsMsgList_Destroy(&pending);
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MaxWait = 5000;
      js_PublishAsyncComplete(js, &po);
    }
    if (js != nullptr) jsCtx_Destroy(js);
    if (conn != nullptr) {
      natsConnection_Close(conn);
      natsConnection_Destroy(conn);
    }
  }

  static void OnAck(jsCtx*, natsMsg* msg, jsPubAck* ack, jsPubAckErr* err, void* closure) {
    auto* self = static_cast<State*>(closure);
    bool wake = false;
    {
      MutexLock lock(self->mu);
      auto it = self->in_flight.find(msg);
      if (it != self->in_flight.end()) {
        PublishResult r;
        r.error = "no PubAck";
        if (ack != nullptr) {
          r.kind = PublishResult::Kind::kAcked;
          r.stream_seq = ack->Sequence;
          r.duplicate = ack->Duplicate;
          r.error.clear();
        } else if (err != nullptr) {
          r.kind = IsPermanent(err->Err, err->ErrCode) ? PublishResult::Kind::kRejected
                                                       : PublishResult::Kind::kFailed;
          r.error = internal::NatsErrorText(err->Err, err->ErrCode,
                                            err->ErrText != nullptr ? err->ErrText : "");
        }
        wake = self->Settle(it, std::move(r));
      }
    }
    if (wake) self->cv.NotifyAll();
    natsMsg_Destroy(msg);
  }
};

JetStreamPublisher::JetStreamPublisher(std::unique_ptr<State> state) : state_(std::move(state)) {}
JetStreamPublisher::~JetStreamPublisher() = default;

Result<std::unique_ptr<JetStreamPublisher>> JetStreamPublisher::Connect(
    const std::string& url, std::chrono::milliseconds ack_timeout,
    const internal::NatsAuth& auth) {
  auto state = std::make_unique<State>();
  state->ack_timeout = ack_timeout;
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = internal::SetNatsServers(opts, url);
  if (s == NATS_OK) s = natsOptions_SetTimeout(opts, 2000);
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts, 250);
  if (s == NATS_OK) s = natsOptions_SetName(opts, "idem relay");
  if (s == NATS_OK) s = static_cast<natsStatus>(internal::ApplyNatsAuth(opts, auth));
  if (s == NATS_OK) s = natsConnection_Connect(&state->conn, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    Status failed = internal::FromNats(s, "nats connect to " + url);
    // Before any server answered, nats.c's generic error is the URL's or the options'.
    if (s == NATS_ERR) return InvalidArgumentError(std::string(failed.message()));
    if (internal::NatsRefusedCredentials(s, failed.message())) {
      return FailedPreconditionError(std::string(failed.message()));
    }
    return failed;
  }
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  jo.PublishAsync.MaxPending = 1'000'000;  // the relay keeps its own, smaller window
  jo.PublishAsync.AckHandler = &State::OnAck;
  jo.PublishAsync.AckHandlerClosure = state.get();
  s = natsConnection_JetStream(&state->js, state->conn, &jo);
  if (s != NATS_OK) return internal::FromNats(s, "nats jetstream context");
  return std::unique_ptr<JetStreamPublisher>(new JetStreamPublisher(std::move(state)));
}

bool JetStreamPublisher::connected() const {
  return natsConnection_Status(state_->conn) == NATS_CONN_STATUS_CONNECTED;
}

Result<StreamFacts> JetStreamPublisher::ReadStream(const std::string& name) {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&info, state_->js, name.c_str(), nullptr, &code);
  if (s == NATS_NOT_FOUND || code == JSStreamNotFoundErr) {
    return NotFoundError("stream '" + name +
                         "' does not exist on the NATS server; create it (nats stream add, or "
                         "idem relay --create-stream " + name +
                         " --subjects 'SUBJECT.>' --duplicate-window 10m)");
  }
  if (s == NATS_NO_RESPONDERS) {
    return UnavailableError("stream '" + name +
                            "': JetStream does not answer; is the server started with JetStream "
                            "(nats-server -js)?");
  }
  if (s != NATS_OK) return internal::FromNats(s, "stream '" + name + "' info", code);
  StreamFacts facts;
  facts.name = name;
  for (int i = 0; i < info->Config->SubjectsLen; ++i) facts.subjects.emplace_back(info->Config->Subjects[i]);
  if (facts.subjects.empty()) facts.subjects.push_back(name);  // a stream without subjects takes its name
  facts.duplicate_window =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::nanoseconds(info->Config->Duplicates));
  facts.max_msg_size = info->Config->MaxMsgSize > 0 ? info->Config->MaxMsgSize : -1;
  facts.max_payload = natsConnection_GetMaxPayload(state_->conn);
  jsStreamInfo_Destroy(info);
  return facts;
}

Result<StreamFacts> JetStreamPublisher::EnsureStream(const StreamSpec& spec) {
  auto existing = ReadStream(spec.name);
  if (existing.ok() || existing.status().code() != StatusCode::kNotFound) return existing;
  std::vector<const char*> subjects;
  for (const auto& s : spec.subjects) subjects.push_back(s.c_str());
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = spec.name.c_str();
  config.Subjects = subjects.data();
  config.SubjectsLen = static_cast<int>(subjects.size());
  config.Storage = js_FileStorage;
  config.Duplicates =
      std::chrono::duration_cast<std::chrono::nanoseconds>(spec.duplicate_window).count();
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_AddStream(&info, state_->js, &config, nullptr, &code);
  if (info != nullptr) jsStreamInfo_Destroy(info);
  if (s != NATS_OK && code != JSStreamNameExistErr) {
    Status failed = internal::FromNats(s, "create stream '" + spec.name + "'", code);
    if (code == JSStreamSubjectOverlapErr || code == JSStreamInvalidConfig) {
      return InvalidArgumentError(std::string(failed.message()));
    }
    return failed;
  }
  return ReadStream(spec.name);
}

JetStreamPublisher::BatchId JetStreamPublisher::Send(const std::vector<OutMessage>& messages,
                                                     int max_pending) {
  State& st = *state_;
  BatchId id = 0;
  State::Batch* batch = nullptr;  // std::map: stable while the entry exists
  {
    MutexLock lock(st.mu);
    id = st.next_batch++;
    batch = &st.batches[id];
    batch->results.resize(messages.size());
    for (auto& r : batch->results) r.error = "no PubAck";
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = st.ack_timeout.count();
  for (size_t i = 0; i < messages.size(); ++i) {
    const OutMessage& m = messages[i];
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, m.subject.c_str(), nullptr, m.payload.data(),
                                  static_cast<int>(m.payload.size()));
    for (const auto& [name, value] : m.headers) {
      if (s == NATS_OK) s = natsMsgHeader_Add(msg, name.c_str(), value.c_str());
    }
    po.MsgId = m.msg_id.c_str();
    if (s == NATS_OK) {
      // The window: wait for a free slot, at most the ack timeout (acks or errors free them).
      MutexLock lock(st.mu);
      if (static_cast<int>(st.in_flight.size()) >= max_pending) {
        st.sender_waiting = true;
        const auto give_up_at = std::chrono::steady_clock::now() + st.ack_timeout;
        while (static_cast<int>(st.in_flight.size()) >= max_pending &&
               st.cv.WaitUntil(lock, give_up_at)) {
        }
        st.sender_waiting = false;
      }
      st.in_flight.emplace(msg, std::make_pair(id, i));
      ++batch->waiting;
    }
    natsMsg* sent = msg;
    if (s == NATS_OK) s = js_PublishMsgAsync(st.js, &msg, &po);
    if (s == NATS_OK) st.published = true;
    if (s != NATS_OK) {
      PublishResult r;
      r.kind = IsPermanent(s, static_cast<jsErrCode>(0)) ? PublishResult::Kind::kRejected
                                                         : PublishResult::Kind::kFailed;
      r.error = internal::NatsErrorText(s);
      MutexLock lock(st.mu);
      auto it = st.in_flight.find(sent);
      if (it != st.in_flight.end()) {
        st.Settle(it, std::move(r));
      } else {
        batch->results[i] = std::move(r);
      }
    }
    natsMsg_Destroy(msg);  // no-op when the library took it
  }
  return id;
}

std::vector<PublishResult> JetStreamPublisher::Wait(BatchId id) {
  State& st = *state_;
  MutexLock lock(st.mu);
  auto b = st.batches.find(id);
  if (b == st.batches.end()) return {};
  const auto give_up_at = std::chrono::steady_clock::now() + st.ack_timeout + std::chrono::seconds(1);
  while (b->second.waiting > 0 && st.cv.WaitUntil(lock, give_up_at)) {
  }
  if (b->second.waiting > 0) {
    // Whatever is still unanswered, in any batch: take it back from the library (late acks are
    // then dropped) and fail it.
    lock.Unlock();
    natsMsgList pending{};
    if (st.published && js_PublishAsyncGetPendingList(&pending, st.js) == NATS_OK) {
      natsMsgList_Destroy(&pending);
    }
    lock.Lock();
    while (!st.in_flight.empty()) {
      PublishResult r;
      r.error = "no PubAck within " + std::to_string(st.ack_timeout.count()) + " ms";
      st.Settle(st.in_flight.begin(), std::move(r));
    }
  }
  std::vector<PublishResult> results = std::move(b->second.results);
  st.batches.erase(b);
  return results;
}

}  // namespace idem::outbox
