#include "worker/ordered_delivery.h"

#include "core/text.h"

namespace idem::worker {
namespace {

std::string Where(const JsMessage& m) {
  return m.stream() + " #" + std::to_string(m.stream_sequence());
}

}  // namespace

const std::string* OrderedDelivery::OrderingKey(const JsMessage& m) {
  for (const auto& [name, value] : m.headers()) {
    if (name.size() == kOrderingKeyHeader.size() && !value.empty() &&
        internal::EqualsIgnoreCase(name, kOrderingKeyHeader)) {
      return &value;
    }
  }
  return nullptr;
}

void OrderedDelivery::Admit(Message m, std::vector<Message>& now) {
  const std::string* const key = OrderingKey(*m);
  if (key == nullptr) {
    now.push_back(std::move(m));
    return;
  }
  const uint64_t seq = m->stream_sequence();
  switch (order_.Add(*key, seq)) {
    case KeyOrder::Admit::kDeliverNow:
      now.push_back(std::move(m));
      return;
    case KeyOrder::Admit::kAlreadyHeld:
      held_[seq] = std::move(m);  // the newer copy: its acks reach the server for sure
      return;
    case KeyOrder::Admit::kAlreadyInFlight:
      // JetStream redelivered a message still being delivered (its in-progress acks did not
      // get through in time); the copy in flight settles it.
      log_.Warn("order", "ordering key " + *key + ": " + Where(*m) +
                             " came again while in flight; the copy is dropped");
      return;
    case KeyOrder::Admit::kHold:
      break;
  }
  if (held_.size() < options_.max_held) {
    if (over_limit_) {
      log_.Info("order", "held messages below " + std::to_string(options_.max_held) +
                             " again; holding in memory");
      over_limit_ = false;
    }
    held_[seq] = std::move(m);
    return;
  }
  if (!over_limit_) {
    log_.Warn("order", std::to_string(options_.max_held) +
                           " messages held for earlier ones of their ordering keys; later "
                           "ones are naked back and come again in " +
                           std::to_string(options_.give_back_delay.count()) + " ms");
    over_limit_ = true;
  }
  // `key` points into m's headers: released before m is.
  for (Message& next : Take(*key, order_.Release(*key, seq))) now.push_back(std::move(next));
  if (Status s = m->Nak(options_.give_back_delay); !s.ok()) {
    log_.Warn("order", "give back " + Where(*m) + ": " + s.ToString() +
                           "; it comes back after ack_wait");
  }
}

std::vector<OrderedDelivery::Message> OrderedDelivery::AfterSettle(const JsMessage& m) {
  const std::string* const key = OrderingKey(m);
  if (key == nullptr) return {};
  const uint64_t seq = m.stream_sequence();
  switch (m.settled()) {
    case JsMessage::Settled::kAcked:
    case JsMessage::Settled::kTermed:
      return Take(*key, order_.Finish(*key, seq));
    case JsMessage::Settled::kNaked:
    case JsMessage::Settled::kNone:
      break;
  }
  std::vector<Message> now = Take(*key, order_.Release(*key, seq));
  if (const size_t waiting = order_.HeldOf(*key); waiting > 0) {
    log_.Info("order", "ordering key " + *key + ": " + std::to_string(waiting) +
                           " later message(s) wait until " + Where(m) +
                           " comes back and is acked or terminated");
  }
  return now;
}

void OrderedDelivery::LearnOutstanding(const std::vector<KeyOrder::Keyed>& outstanding) {
  for (const KeyOrder::Keyed& k : outstanding) order_.AddAwaiting(k.key, k.seq);
}

std::vector<OrderedDelivery::Message> OrderedDelivery::AdvanceAckFloor(uint64_t floor) {
  std::vector<Message> now;
  for (const KeyOrder::Keyed& k : order_.AdvanceAckFloor(floor)) {
    for (Message& m : Take(k.key, k.seq)) now.push_back(std::move(m));
  }
  return now;
}

size_t OrderedDelivery::TouchHeld() {
  size_t failed = 0;
  for (auto& [seq, m] : held_) failed += m->InProgress().ok() ? 0 : 1;
  return failed;
}

void OrderedDelivery::GiveBack(const Message& m) {
  (void)m->Nak(Duration(0));
  if (const std::string* key = OrderingKey(*m)) {
    for (const Message& next : Take(*key, order_.Release(*key, m->stream_sequence()))) {
      GiveBack(next);
    }
  }
}

size_t OrderedDelivery::GiveBackAllHeld() {
  const size_t n = held_.size();
  for (auto& [seq, m] : held_) (void)m->Nak(Duration(0));
  held_.clear();
  return n;
}

std::vector<OrderedDelivery::Message> OrderedDelivery::Take(const std::string& key,
                                                            std::optional<uint64_t> seq) {
  if (!seq) return {};
  auto it = held_.find(*seq);
  if (it == held_.end()) {  // cannot happen: every held sequence has its message here
    log_.Error("order", "ordering key " + key + ": #" + std::to_string(*seq) +
                            " is due but not held; it comes back after ack_wait");
    (void)order_.Release(key, *seq);
    return {};
  }
  Message m = std::move(it->second);
  held_.erase(it);
  return {std::move(m)};
}

}  // namespace idem::worker
