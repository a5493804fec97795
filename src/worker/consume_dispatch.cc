// The event loop's path of each message: admitted (or held for its ordering key), delivered
// alone or in a batch, settled, then whatever of its key may go next.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "worker/batch_plan.h"
#include "worker/consume_sidecar.h"

namespace idem::worker {

void Sidecar::AdmitBatch(std::vector<JsMessage> batch) {
  std::vector<std::shared_ptr<JsMessage>> now;
  now.reserve(batch.size());
  for (JsMessage& m : batch) ordered_.Admit(std::make_shared<JsMessage>(std::move(m)), now);
  metrics_.set_held(static_cast<int64_t>(ordered_.held()));
  // The fetch loop counted the whole batch in flight; held messages are not.
  if (const int not_now = static_cast<int>(batch.size()) - static_cast<int>(now.size());
      not_now != 0) {
    {
      MutexLock lock(mu_);
      in_flight_ -= not_now;
    }
    cv_.NotifyAll();
  }
  Start(std::move(now));
}

void Sidecar::Launch(std::vector<std::shared_ptr<JsMessage>> messages) {
  metrics_.set_held(static_cast<int64_t>(ordered_.held()));
  if (messages.empty()) return;
  if (stopping_) {
    for (const auto& m : messages) ordered_.GiveBack(m);
    log_.Info("shutdown", std::to_string(messages.size()) + " message(s) whose predecessor "
                              "just ended given back to NATS, not delivered while stopping");
    return;
  }
  {
    MutexLock lock(mu_);
    in_flight_ += static_cast<int>(messages.size());
  }
  Start(std::move(messages));
}

void Sidecar::Start(std::vector<std::shared_ptr<JsMessage>> messages) {
  for (auto& m : messages) waiting_.push_back(std::move(m));
  Pump();
}

void Sidecar::Pump() {
  if (stopping_) {
    GiveBackWaiting();
    return;
  }
  if (options_.batch_size <= 1) {
    while (!idle_.empty() ||
           deliverers_.size() < static_cast<size_t>(options_.max_in_flight)) {
      std::shared_ptr<JsMessage> m = NextToDeliver();
      if (!m) return;
      if (idle_.empty()) {
        deliverers_.push_back(std::make_unique<DeliverySlot>());
        deliverers_.back()->message = std::move(m);
        asio::co_spawn(io_, Deliverer(*deliverers_.back()), asio::detached);
        continue;
      }
      DeliverySlot* slot = idle_.back();
      idle_.pop_back();
      slot->message = std::move(m);
      // It runs here until its POST waits for the socket, touching nothing of this loop's.
      slot->parked.Wake();
    }
    // Every deliverer is busy: one whose message has just freed its slot of the window (a
    // settle) takes the next one itself.
    return;
  }
  bool more = false;
  while (delivering_ < options_.max_in_flight && !waiting_.empty()) {
    ++delivering_;
    ready_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    more = true;
  }
  if (!more || flush_posted_) return;
  flush_posted_ = true;
  asio::post(io_, [this] { SendReady(); });
}

void Sidecar::GiveBackWaiting() {
  if (waiting_.empty()) return;
  const size_t n = waiting_.size();
  std::deque<std::shared_ptr<JsMessage>> waiting;
  waiting.swap(waiting_);
  for (const auto& m : waiting) ordered_.GiveBack(m);
  metrics_.set_held(static_cast<int64_t>(ordered_.held()));
  log_.Info("shutdown", std::to_string(n) + " message(s) fetched ahead given back to NATS, "
                            "not delivered while stopping");
  FreeSlots(static_cast<int>(n), /*delivered=*/false);
}

void Sidecar::SendReady() {
  flush_posted_ = false;
  std::vector<std::shared_ptr<JsMessage>> ready;
  ready.swap(ready_);
  std::vector<BatchCandidate> candidates;
  candidates.reserve(ready.size());
  for (const auto& m : ready) {
    const std::string* ok = OrderedDelivery::OrderingKey(*m);
    candidates.push_back({m->key(), ok ? std::optional<std::string_view>(*ok) : std::nullopt,
                          m->stream_sequence()});
  }
  for (const auto& plan : PlanBatches(candidates, static_cast<size_t>(options_.batch_size))) {
    std::vector<std::shared_ptr<JsMessage>> batch;
    batch.reserve(plan.size());
    for (size_t i : plan) batch.push_back(ready[i]);
    asio::co_spawn(io_, DispatchBatch(std::move(batch)), asio::detached);
  }
}

std::shared_ptr<JsMessage> Sidecar::NextToDeliver() {
  if (stopping_ || delivering_ >= options_.max_in_flight || waiting_.empty()) return nullptr;
  ++delivering_;
  std::shared_ptr<JsMessage> m = std::move(waiting_.front());
  waiting_.pop_front();
  return m;
}

Task<void> Sidecar::Deliverer(DeliverySlot& slot) {
  for (;;) {
    if (!slot.message) slot.message = NextToDeliver();
    if (!slot.message) {
      idle_.push_back(&slot);
      co_await slot.parked.Wait();  // Pump hands it a message
      continue;
    }
    JsMessage& m = *slot.message;
    slot.request = RequestFor(m, std::move(slot.request));
    co_await service_->Exchange(slot.request, slot.answer);
    Observe(slot.answer);
    Attempt a = AttemptOf(slot.answer);
    if (a.d == Disposition::kAck) {
      QueueAck(std::move(slot.message));
      continue;
    }
    co_await Settle(m, std::move(a));
    AfterSettled(std::move(slot.message));
  }
}

Task<void> Sidecar::DispatchBatch(std::vector<std::shared_ptr<JsMessage>> batch) {
  for (const auto& m : batch) working_.emplace(m.get(), m);
  std::vector<Attempt> attempts = co_await DeliverBatch(batch);
  bool acked = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    // An ack needs no coroutine of its own (nor a frame per message).
    if (attempts[i].d == Disposition::kAck) {
      QueueAck(std::move(batch[i]));
      acked = true;
    } else {
      asio::co_spawn(io_, Finish(std::move(batch[i]), std::move(attempts[i])), asio::detached);
    }
  }
  if (acked) Pump();  // their slots of the window are free
}

Task<void> Sidecar::Finish(std::shared_ptr<JsMessage> m, Attempt a) {
  co_await Settle(*m, std::move(a));
  AfterSettled(std::move(m));
}

void Sidecar::QueueAck(std::shared_ptr<JsMessage> m) {
  --delivering_;
  acks_.push_back(std::move(m));
  if (acks_posted_) return;
  acks_posted_ = true;
  asio::post(io_, [this] { AckQueued(); });
}

void Sidecar::AckQueued() {
  acks_posted_ = false;
  std::vector<std::shared_ptr<JsMessage>> acks;
  acks.swap(acks_);
  for (const auto& m : acks) {
    failures_.Forget(m->stream_sequence());
    SettleWithNats(*m, Disposition::kAck, "", std::nullopt, "");
  }
  FreeSlots(static_cast<int>(acks.size()), /*delivered=*/false);
  for (auto& m : acks) AfterSettled(std::move(m));
}

void Sidecar::AfterSettled(std::shared_ptr<JsMessage> m) {
  if (!working_.empty()) working_.erase(m.get());
  Launch(ordered_.AfterSettle(*m));
  Bury(std::move(m));
}

void Sidecar::FreeSlots(int n, bool delivered) {
  if (delivered) delivering_ -= n;
  bool wake;
  {
    MutexLock lock(mu_);
    const int before = in_flight_;
    in_flight_ -= n;
    // The fetch loop waits for a quarter of its capacity to free up, and Drain for none in
    // flight: wake them at those two points only, not at every settled message.
    wake = (before > RefetchAt() && in_flight_ <= RefetchAt()) || in_flight_ == 0;
  }
  if (wake) cv_.NotifyAll();
  if (delivered) Pump();
}

void Sidecar::Bury(std::shared_ptr<JsMessage> m) {
  finished_bytes_ += m->data().size();
  finished_.push_back(std::move(m));
  if (finished_.size() >= kBuryGroup || finished_bytes_ >= kBuryBytes || delivering_ == 0) {
    DestroyFinished();
  }
}

void Sidecar::DestroyFinished() {
  finished_bytes_ = 0;
  if (finished_.empty()) return;
  asio::post(freeing_, [detached = JsMessage::Detach(finished_)]() mutable { detached.Free(); });
}

}  // namespace idem::worker
