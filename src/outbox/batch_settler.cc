#include "outbox/batch_settler.h"

#include <fmt/format.h>

#include "core/crash_point.h"
#include "outbox/post_for_result.h"
#include "outbox/relay_text.h"

namespace idem::outbox {
namespace {

constexpr int kMaxLoggedPerBatch = 10;

}  // namespace

BatchSettler::~BatchSettler() {
  // Its tasks use this object's members: let them finish while those exist.
  settler_.join();
}

BatchSettler::Sorted BatchSettler::Sort(InFlightBatch& batch,
                                        const std::vector<PublishResult>& results,
                                        const StreamFacts& facts) {
  const bool db_usable = batch.db != nullptr && batch.db->healthy();
  Sorted sorted;
  int beyond_logged = 0;
  sorted.acked.reserve(results.size());
  for (size_t i = 0; i < results.size() && i < batch.sent.size(); ++i) {
    const PublishResult& r = results[i];
    const ClaimedRow& row = batch.rows[batch.sent[i]];
    switch (r.kind) {
      case PublishResult::Kind::kAcked:
        sorted.acked.push_back({row.id, row.day, r.stream_seq, r.duplicate});
        if (r.duplicate) ++sorted.duplicates;
        // Counted when the stream took the copy, not when the row was claimed: an attempt that
        // failed (NATS away) and was given back is tried again, and is one republish, not two.
        if (row.attempts > 1 && facts.duplicate_window.count() > 0 &&
            row.first_attempt_age_ms > facts.duplicate_window.count()) {
          metrics_.beyond_window.fetch_add(1);
          if (beyond_logged++ < kMaxLoggedPerBatch) {
            log_.Warn("relay",
                      fmt::format(
                          "event {} was published again {} ms after its first attempt, "
                          "beyond stream {}'s duplicate window of {} ms: the broker cannot drop a "
                          "copy it may already hold; consumers' inboxes must",
                          row.event_id, row.first_attempt_age_ms, facts.name,
                          facts.duplicate_window.count()));
          }
        }
        break;
      case PublishResult::Kind::kRejected: {
        metrics_.CountParked(ParkReason::kRejected);
        const std::string why = "rejected by stream " + facts.name + ": " + r.error;
        log_.Error("relay",
                   fmt::format("parked event {} (outbox id {}): {}", row.event_id, row.id, why));
        if (db_usable) {
          auto parked = batch.db->Park(row, why);
          if (!parked.ok())
            log_.Warn("relay",
                      fmt::format("parking event {}: {}", row.event_id, parked.ToString()));
        } else {
          log_.Warn("relay",
                    fmt::format("parking event {}: postgresql unreachable (the row is tried again)",
                                row.event_id));
        }
        break;
      }
      case PublishResult::Kind::kFailed:
        sorted.failed.push_back({row.id, row.day});
        if (sorted.first_error.empty()) sorted.first_error = r.error;
        break;
    }
  }
  if (beyond_logged > kMaxLoggedPerBatch) {
    log_.Warn("relay", fmt::format("{} events of this batch were beyond the duplicate window",
                                   beyond_logged));
  }
  return sorted;
}

BatchSettler::Outcome BatchSettler::Settle(InFlightBatch& batch,
                                           const std::vector<PublishResult>& results,
                                           const StreamFacts& facts) {
  Sorted sorted = Sort(batch, results, facts);
  // Published, never marked: killed here, or hung here holding the rows (core/crash_point.h).
  if (!sorted.acked.empty()) internal::CrashPoint("relay.after_publish");
  Outcome outcome{sorted.failed.size(), sorted.first_error};
  settling_keyed_.clear();
  for (size_t i = 0; i < results.size() && i < batch.sent.size(); ++i) {
    const ClaimedRow& row = batch.rows[batch.sent[i]];
    if (row.keyed && results[i].kind == PublishResult::Kind::kAcked) {
      settling_keyed_.push_back(row.id);
    }
  }
  SettleInBackground(std::move(batch.db), std::move(batch.token), std::move(sorted));
  return outcome;
}

void BatchSettler::SettleInBackground(std::unique_ptr<OutboxDb> db, std::string token,
                                      Sorted sorted) {
  Finish();
  marking_ = PostForResult(settler_, [this, db = std::move(db), token = std::move(token),
                                      sorted = std::move(sorted)]() mutable {
    if (db == nullptr) {
      MarkFailed(sorted.acked.size(), UnavailableError("the batch's connection is gone"));
      return;
    }
    auto settled = db->SettleBatch(token, sorted.acked, sorted.failed, sorted.first_error);
    if (!settled.ok()) {
      MarkFailed(sorted.acked.size(), settled.status());
    } else {
      metrics_.published.fetch_add(sorted.acked.size());
      metrics_.duplicates.fetch_add(sorted.duplicates);
    }
    connections_.Return(std::move(db));
  });
}

void BatchSettler::MarkFailed(size_t rows, const Status& status) {
  // Published but not marked: the transaction holding the rows is gone, so they are free and
  // go out again at once; within the duplicate window the stream drops the copies (PubAck
  // duplicate: true).
  metrics_.postgres_errors.fetch_add(1);
  metrics_.postgres_up.store(false);
  log_.Warn("relay",
            fmt::format("{} events published but not marked ({}); they will be republished, "
                        "as duplicates the stream drops",
                        rows, OneLine(status.ToString())));
}

void BatchSettler::Finish() {
  if (marking_.valid()) marking_.get();
}

}  // namespace idem::outbox
