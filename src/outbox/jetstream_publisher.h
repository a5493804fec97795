// The relay's side of NATS: one connection (reconnecting forever), the stream's facts, and
// batches of asynchronous JetStream publishes with a bounded window of unacknowledged ones.
//
// Thread safety: one thread calls the methods; PubAcks arrive on nats.c's thread and meet the
// caller under a mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "idem/status.h"
#include "nats/nats_auth.h"

namespace idem::outbox {

// What the relay needs to know about its stream, read at start and every so often.
struct StreamFacts {
  std::string name;
  std::vector<std::string> subjects;
  std::chrono::milliseconds duplicate_window{0};
  int64_t max_msg_size = -1;  // the stream's max_msg_size; -1: no limit of its own
  int64_t max_payload = 0;    // the server's max_payload (headers + body)
};

struct StreamSpec {  // for --create-stream
  std::string name;
  std::vector<std::string> subjects;
  std::chrono::milliseconds duplicate_window{std::chrono::minutes(2)};
};

// One message to publish.
struct OutMessage {
  std::string msg_id;  // sent as Nats-Msg-Id
  std::string subject;
  std::string payload;
  std::vector<std::pair<std::string, std::string>> headers;
};

struct PublishResult {
  enum class Kind { kAcked, kRejected, kFailed };
  Kind kind = Kind::kFailed;
  uint64_t stream_seq = 0;  // kAcked
  bool duplicate = false;   // kAcked: the stream already had this msg id within its window
  std::string error;        // kRejected (never accepted as it is) or kFailed (try again)
};

// The bytes a message takes against max_payload / max_msg_size: body plus encoded headers.
int64_t EncodedSize(const OutMessage& message);

class JetStreamPublisher {
 public:
  // Connects to `url`; after that nats.c reconnects by itself, forever. kUnavailable when the
  // server cannot be reached now; kFailedPrecondition when it refuses the credentials.
  // `auth`: a token or a credentials file besides what the URL carries.
  static Result<std::unique_ptr<JetStreamPublisher>> Connect(const std::string& url,
                                                             std::chrono::milliseconds ack_timeout,
                                                             const internal::NatsAuth& auth = {});
  ~JetStreamPublisher();

  // The stream's facts. kNotFound (with what to do) when it does not exist, kUnavailable when
  // JetStream does not answer.
  Result<StreamFacts> ReadStream(const std::string& name);
  // Creates the stream unless it exists (an existing one is used as it is), then reads it.
  Result<StreamFacts> EnsureStream(const StreamSpec& spec);

  bool connected() const;

  // Publishes `messages` in order, at most `max_pending` unacknowledged at a time (counting the
  // messages of every batch still in flight), and returns once the last one is handed to
  // nats.c, without waiting for the PubAcks: Wait collects them. Several batches may be in
  // flight, so the stream works on one batch while the caller prepares the next.
  using BatchId = uint64_t;
  BatchId Send(const std::vector<OutMessage>& messages, int max_pending);
  // Waits for every PubAck or error of batch `id` (each bounded by the ack timeout); one result
  // per message, in order. When the wait runs out, every message of every batch still in
  // flight is taken back from nats.c (a late PubAck is dropped) and fails with "no PubAck".
  std::vector<PublishResult> Wait(BatchId id);
  // Send, then Wait.
  std::vector<PublishResult> PublishBatch(const std::vector<OutMessage>& messages,
                                          int max_pending) {
    return Wait(Send(messages, max_pending));
  }

  JetStreamPublisher(const JetStreamPublisher&) = delete;
  JetStreamPublisher& operator=(const JetStreamPublisher&) = delete;

 private:
  struct State;
  explicit JetStreamPublisher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace idem::outbox
