// Per-key order in `idem consume`: decides, for each fetched message, whether it is delivered
// now or held until the earlier messages of its ordering key are settled, and keeps the held
// messages (KeyOrder does the bookkeeping; this class owns the messages and talks to NATS
// about them). docs/worker.md, "Order", says what is ordered and what is not.
//
// Thread safety: none; the sidecar's event loop owns an instance.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "idem/clock.h"
#include "log/event_log.h"
#include "worker/jetstream.h"
#include "worker/key_order.h"

namespace idem::worker {

class OrderedDelivery {
 public:
  using Message = std::shared_ptr<JsMessage>;
  struct Options {
    // Messages held in memory, at most; a message that would be held beyond it is naked back
    // to JetStream (redelivered after `give_back_delay`) and waits there instead.
    size_t max_held = 1000;
    Duration give_back_delay{5000};
  };

  OrderedDelivery(logging::Log& log, Options options) : log_(log), options_(options) {}

  // The value of the message's Idem-Ordering-Key header, in `m`'s headers (no copy); null when
  // it has none (or an empty one).
  static const std::string* OrderingKey(const JsMessage& m);

  // A fetched message: appends to `now` the messages to deliver now, the message itself or
  // nothing (it waits for an earlier message of its key, or it is a second copy of a message
  // already here).
  void Admit(Message m, std::vector<Message>& now);

  // After `m` was delivered and its settle tried (m.settled() says what succeeded): the next
  // message of its key to deliver now, if any. An ack or a term ends the message; anything else
  // leaves it outstanding, its successors held until it comes back and ends.
  std::vector<Message> AfterSettle(const JsMessage& m);

  // Stream sequences an earlier process may have left unsettled (ReadOrderingKeys): later
  // messages of their keys wait until they come back and end, or the ack floor passes them.
  void LearnOutstanding(const std::vector<KeyOrder::Keyed>& outstanding);

  // Every message at or below `floor` is settled: the messages that may go now.
  std::vector<Message> AdvanceAckFloor(uint64_t floor);

  // Tells JetStream every held message is still being worked on. Returns how many failed.
  size_t TouchHeld();

  // A message Admit or AfterSettle returned for delivery that will not be delivered (the
  // sidecar is stopping): naked back at once, still outstanding for its key.
  void GiveBack(const Message& m);

  // At shutdown: naks every held message so the next process gets them at once. Returns how
  // many. The instance is not used afterwards.
  size_t GiveBackAllHeld();

  size_t held() const { return held_.size(); }
  size_t awaiting() const { return order_.awaiting(); }

 private:
  // The held message at `seq`, which KeyOrder has just put in flight, taken out of held_.
  std::vector<Message> Take(const std::string& key, std::optional<uint64_t> seq);

  logging::Log& log_;
  const Options options_;
  KeyOrder order_;
  std::unordered_map<uint64_t, Message> held_;  // by stream sequence
  bool over_limit_ = false;                      // for one log line per episode
};

}  // namespace idem::worker
