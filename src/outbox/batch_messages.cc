#include "outbox/batch_messages.h"

#include <fmt/format.h>

#include "idem/outbox.h"
#include "outbox/ordering_key_header.h"
#include "outbox/relay_connections.h"
#include "outbox/relay_text.h"
#include "outbox/subject_match.h"

namespace idem::outbox {
namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr auto kLogEvery = std::chrono::minutes(1);

}  // namespace

BatchToPublish BatchMessages::Make(std::vector<ClaimedRow>& rows, OutboxDb& db,
                                   const StreamFacts& facts) {
  const int64_t limit = RelayConnections::MessageLimit(facts);
  BatchToPublish out;
  out.messages.reserve(rows.size());
  out.ids.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    ClaimedRow& row = rows[i];
    if (!AnySubjectMatches(facts.subjects, row.subject)) {
      // The lock takes only rows on this relay's subjects, which lie within the stream's; a
      // row outside them is left as it is, pending, without an attempt: the batch's settle
      // does not touch it.
      WarnNotTaken(row, facts);
      ++out.left;
      continue;
    }
    if (row.attempts > 1) metrics_.reclaimed.fetch_add(1);
    // The row's ordering key as Idem-Ordering-Key, replacing a header of that name the row
    // set itself (the key wins; rows without a key carry none).
    if (SetOrderingKeyHeader(row.headers, row.ordering_key)) NoteOwnKeyHeader(row);
    OutMessage m{row.event_id, row.subject, std::move(row.payload), std::move(row.headers)};
    if (const int64_t size = EncodedSize(m); limit > 0 && size > limit) {
      ParkTooLarge(row, db, facts, size, limit);
      continue;
    }
    out.messages.push_back(std::move(m));
    out.ids.push_back(row.id);
    out.sent.push_back(i);
    if (row.keyed) out.keyed.push_back(row.id);
  }
  return out;
}

void BatchMessages::WarnNotTaken(const ClaimedRow& row, const StreamFacts& facts) {
  const auto now = SteadyClock::now();
  if (not_taken_warned_ && now - *not_taken_warned_ < kLogEvery) return;
  not_taken_warned_ = now;
  log_.Warn("relay",
            fmt::format("event {} (outbox id {}) on subject '{}' is not covered by stream "
                        "{} (subjects {}): left pending, not published",
                        row.event_id, row.id, row.subject, facts.name, Join(facts.subjects)));
}

void BatchMessages::NoteOwnKeyHeader(const ClaimedRow& row) {
  const auto now = SteadyClock::now();
  if (own_key_header_noted_ && now - *own_key_header_noted_ < kLogEvery) return;
  own_key_header_noted_ = now;
  log_.Info(
      "relay",
      fmt::format("event {} (outbox id {}) set the header {} itself: dropped, the "
                  "relay sets it from the row's ordering key ({}) (logged at most once a "
                  "minute)",
                  row.event_id, row.id, kOrderingKeyHeader,
                  row.ordering_key ? "it has one" : "it has none, so the message carries none"));
}

void BatchMessages::ParkTooLarge(const ClaimedRow& row, OutboxDb& db, const StreamFacts& facts,
                                 int64_t size, int64_t limit) {
  const std::string park = "message of " + std::to_string(size) +
                           " bytes exceeds the largest stream " + facts.name + " accepts (" +
                           std::to_string(limit) + " bytes)";
  metrics_.CountParked(ParkReason::kTooLarge);
  log_.Error("relay",
             fmt::format("parked event {} (outbox id {}): {}", row.event_id, row.id, park));
  auto parked = db.Park(row, park);
  if (!parked.ok())
    log_.Warn("relay", fmt::format("parking event {}: {}", row.event_id, parked.ToString()));
}

}  // namespace idem::outbox
