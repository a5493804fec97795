// The end of one delivery attempt: the retry limits, the dead letter, the ack, nak or term.
#include <boost/asio/post.hpp>

#include "core/crash_point.h"
#include "worker/consume_sidecar.h"
#include "worker/dead_letter.h"

namespace idem::worker {

Task<void> Sidecar::Settle(JsMessage& m, Attempt a) {
  Disposition d = a.d;
  GiveUp& give_up = a.give_up;
  std::string term_note;
  give_up.failing_for = failures_.Failed(m.stream_sequence(), std::chrono::steady_clock::now());
  give_up.reason = d == Disposition::kTerm
                       ? GiveUpReason::kRefused
                       : RetryLimitReached(m.delivery_count(), give_up.failing_for,
                                           a.unreachable, limits_);
  if (give_up.reason != GiveUpReason::kNone) {
    give_up.why = a.why;
    if (give_up.reason != GiveUpReason::kRefused) metrics_.Count(ConsumeMetrics::kLimitReached);
    d = co_await DeadLetter(m, give_up, &term_note);
    if (d == Disposition::kTerm) failures_.Forget(m.stream_sequence());
  }
  SettleWithNats(m, d, a.why, a.retry_after, term_note);
  FreeSlots(1);
}

void Sidecar::SettleWithNats(JsMessage& m, Disposition d, const std::string& why,
                             std::optional<Duration> retry_after, const std::string& term_note) {
  // The message, for the log lines (an ack that succeeds logs none).
  auto what = [&m] {
    return "key " + m.key() + " (" + m.stream() + " #" + std::to_string(m.stream_sequence()) +
           ", delivery " + std::to_string(m.delivery_count()) + ")";
  };
  Status s;
  switch (d) {
    case Disposition::kAck:
      internal::CrashPoint("consume.after_response");
      s = m.Ack();
      if (s.ok()) metrics_.Count(ConsumeMetrics::kAcked);
      internal::CrashPoint("consume.after_ack");
      break;
    case Disposition::kNak: {
      uint64_t random;
      {
        MutexLock lock(mu_);
        random = rng_();
      }
      Duration delay = retry_after ? std::min(*retry_after, options_.max_nak_delay)
                                   : NakDelay(m.delivery_count(), options_.nak_delay,
                                              options_.max_nak_delay, random);
      s = m.Nak(delay);
      if (s.ok()) metrics_.Count(ConsumeMetrics::kNaked);
      log_.Warn("nak", what() + ": " + why + "; redelivery in " + Ms(delay));
      break;
    }
    case Disposition::kTerm:
      s = m.Term();
      if (s.ok()) metrics_.Count(ConsumeMetrics::kTermed);
      log_.Error("term", what() + " " + term_note + ", never redelivered: " + why);
      break;
  }
  if (!s.ok()) {
    metrics_.CountError(ConsumeMetrics::kAckFailed);
    log_.Warn("settle", what() + ": " + std::string(DispositionName(d)) + " failed: " +
                            s.ToString() + "; the message will be redelivered after ack_wait");
  }
}
Task<Disposition> Sidecar::DeadLetter(JsMessage& m, const GiveUp& g, std::string* term_note) {
  const std::string given_up =
      GivenUpText(g.reason, m.delivery_count(), g.failing_for, limits_,
                  {"--max-deliver", "--max-retry-time", "the service"});
  if (options_.dead_letter.empty()) {
    metrics_.Count(ConsumeMetrics::kDropped);
    *term_note = given_up + " (no --dead-letter subject: not kept anywhere but stream " +
                 m.stream() + ")";
    co_return Disposition::kTerm;
  }
  co_await asio::post(blocking_, use_awaitable);
  Status dl = PublishDeadLetter(*nats_, options_.dead_letter, m, g);
  co_await asio::post(io_.get_executor(), use_awaitable);
  if (dl.ok()) {
    metrics_.Count(ConsumeMetrics::kDeadLettered);
    *term_note = given_up + " (published to " + options_.dead_letter + ")";
    co_return Disposition::kTerm;
  }
  metrics_.CountError(ConsumeMetrics::kDeadLetterFailed);
  if (RetryDeadLetterByRedelivery(m.delivery_count(), g.failing_for, limits_)) {
    log_.Error("dead_letter", "key " + m.key() + " " + given_up + ": cannot publish to " +
                                  options_.dead_letter + ": " + dl.ToString() +
                                  "; naked, its redelivery tries again");
    co_return Disposition::kNak;
  }
  metrics_.Count(ConsumeMetrics::kDropped);
  *term_note = given_up + ", and its dead letter could not be published to " +
               options_.dead_letter + " (" + dl.ToString() + "): DROPPED, not kept anywhere "
               "but stream " + m.stream() + " at sequence " + std::to_string(m.stream_sequence());
  co_return Disposition::kTerm;
}

}  // namespace idem::worker
