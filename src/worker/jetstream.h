// nats.c underneath idem's consumers: a reconnecting connection, a durable pull consumer bound
// (and created when missing), messages read into plain values. Its errors become a Status
// through nats/nats_status.h, as the relay's do.
//
// Thread safety: a NatsConnection and a PullSubscription may be used from several threads
// (nats.c locks internally); a JsMessage belongs to one thread at a time.
#pragma once

#include <nats/nats.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idem/clock.h"
#include "core/mutex.h"
#include "idem/status.h"
#include "nats/nats_auth.h"
#include "nats/nats_status.h"

namespace idem::worker {

using internal::FromNats;  // the consumers' calls convert their errors with it

class NatsConnection {
 public:
  // Called from a nats.c thread when the connection is lost (false) or made again (true).
  using Listener = std::function<void(bool connected, const std::string& detail)>;

  // Connects to `url` ("nats://HOST:PORT", several separated by commas). A server that is not
  // up yet is not an error: the connection keeps trying (forever, every 250 ms) and so does it
  // after every later disconnect. kInvalidArgument for a malformed URL. `auth`: a token or a
  // credentials file besides what the URL carries.
  static Result<std::unique_ptr<NatsConnection>> Connect(const std::string& url,
                                                         const std::string& name,
                                                         Listener listener = nullptr,
                                                         const internal::NatsAuth& auth = {});
  // Flushes (up to 2 s: pending acks reach the server), closes, and waits (up to 5 s) for
  // nats.c's closed callback, the last one it delivers, so no callback runs on a destroyed
  // connection.
  ~NatsConnection();

  bool connected() const;
  // Set when the connection will never be made as it stands: the server refused its
  // credentials (none, or wrong ones), or nats.c gave up and closed it. nats.c's text for the
  // last error. A caller that has never been connected should stop and say so.
  std::optional<std::string> GaveUp() const;
  natsConnection* get() { return conn_; }
  jsCtx* js() { return js_; }
  // Sends what is buffered (acks) and waits for the server's answer, up to `timeout`.
  Status Flush(Duration timeout);

 private:
  NatsConnection() = default;
  static void OnDisconnected(natsConnection* nc, void* closure);
  static void OnReconnected(natsConnection* nc, void* closure);
  static void OnClosed(natsConnection* nc, void* closure);

  natsConnection* conn_ = nullptr;
  jsCtx* js_ = nullptr;
  Listener listener_;
  Mutex closed_mu_;
  CondVar closed_cv_;
  bool closed_ IDEM_GUARDED_BY(closed_mu_) = false;
};

// A durable, explicitly acked pull consumer on a stream.
struct PullConsumerConfig {
  std::string stream;
  std::string consumer;          // the durable name (no '.')
  std::string filter_subject;    // only when the consumer is created; empty: the whole stream
  Duration ack_wait{30000};      // only when created: unacked messages come back after this
  int64_t max_ack_pending = 1000;  // only when created
  // idem's own delivery limit (0: none), only to warn about an existing consumer whose server-
  // side max_deliver would stop a message first. A created consumer gets no server-side limit:
  // it stops deliveries silently, where idem's dead-letters and logs them.
  uint64_t max_deliver = 0;
};

// What JsMessage keeps of the JetStream metadata a message's reply subject carries.
struct JsAckSubject {
  std::string_view stream;  // a view into the subject parsed
  uint64_t stream_sequence = 0;
  uint64_t delivered = 0;  // the delivery count
};
// The metadata of a JetStream ack subject, read in place: "$JS.ACK.<stream>.<consumer>.
// <delivered>.<stream seq>.<consumer seq>.<time>.<pending>" (9 tokens), or the form with a
// domain and an account hash after "$JS.ACK." (11 tokens or more), read as nats.c reads them
// (natsMsg_GetMetaData, which allocates all of it, then is freed, for each message). nullopt
// for anything else: JsMessage::Read then asks nats.c, whose error says what is wrong.
std::optional<JsAckSubject> ParseJsAckSubject(std::string_view reply);

// One message as the consume loop needs it. Owns the natsMsg until acked or destroyed.
class JsMessage {
 public:
  JsMessage() = default;
  // Takes ownership of `msg`. Fails (kInvalidArgument) when it carries no JetStream metadata.
  static Result<JsMessage> Read(natsMsg* msg);

  const std::string& key() const { return key_; }  // see MessageKey
  const std::string& subject() const { return subject_; }
  std::string_view data() const;
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }
  bool has_msg_id() const { return has_msg_id_; }
  const std::string& stream() const { return stream_; }
  uint64_t stream_sequence() const { return stream_sequence_; }
  uint64_t delivery_count() const { return delivery_count_; }

  Status Ack();
  Status Nak(Duration delay);
  Status Term();
  // Tells JetStream the message is still being worked on: its ack_wait starts again.
  Status InProgress();
  // Which of Ack, Nak or Term last succeeded on this copy (kNone: none yet).
  enum class Settled { kNone, kAcked, kNaked, kTermed };
  Settled settled() const { return settled_; }

  // The nats.c messages of settled messages, taken out to be freed together, on whichever thread
  // calls Free (or destroys this): freeing is left to the caller rather than to nats.c's
  // collector thread, which natsMsg_Destroy wakes for message after message (jetstream.cc).
  class Detached {
   public:
    Detached() = default;
    Detached(Detached&& other) noexcept : msgs_(std::move(other.msgs_)) { other.msgs_.clear(); }
    Detached& operator=(Detached&&) = delete;
    ~Detached() { Free(); }
    void Free();
    size_t size() const { return msgs_.size(); }

   private:
    friend class JsMessage;
    std::vector<natsMsg*> msgs_;
  };
  // Destroys what idem holds of `messages` (clearing the vector) and returns their nats.c
  // messages. A message still shared elsewhere is only released, and stays whole.
  static Detached Detach(std::vector<std::shared_ptr<JsMessage>>& messages);

 private:
  struct Destroy {
    void operator()(natsMsg* m) const { natsMsg_Destroy(m); }
  };
  std::unique_ptr<natsMsg, Destroy> msg_;
  std::string key_;
  std::string subject_;
  std::vector<std::pair<std::string, std::string>> headers_;
  bool has_msg_id_ = false;
  std::string stream_;
  uint64_t stream_sequence_ = 0;
  uint64_t delivery_count_ = 0;
  Settled settled_ = Settled::kNone;
};

class PullSubscription {
 public:
  // Binds to the durable consumer `config.consumer` on `config.stream`, creating it (explicit
  // ack, deliver all) when it does not exist. kNotFound when the stream does not exist;
  // kFailedPrecondition when the server refuses to create the consumer as configured (a filter
  // subject outside the stream's, ...); kUnavailable while NATS cannot be reached. An existing consumer keeps its settings; a
  // difference from `config` is reported in `*warning`.
  static Result<std::unique_ptr<PullSubscription>> Bind(NatsConnection& conn,
                                                        const PullConsumerConfig& config,
                                                        std::string* warning = nullptr);
  ~PullSubscription();

  // Up to `batch` messages, waiting up to `wait` for the first. An empty vector when none came
  // in time; kUnavailable while disconnected; kNotFound when the consumer has gone.
  Result<std::vector<JsMessage>> Fetch(int batch, Duration wait);

 private:
  PullSubscription() = default;
  natsSubscription* sub_ = nullptr;
};

}  // namespace idem::worker
