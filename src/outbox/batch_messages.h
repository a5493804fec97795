// Turns a locked batch's rows into the messages the relay publishes: a row on a subject the
// stream does not take is left pending, a row too large for the stream is parked, and every
// message carries its row's ordering key as Idem-Ordering-Key.
//
// Thread safety: the relay's loop only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "log/event_log.h"
#include "outbox/jetstream_publisher.h"
#include "outbox/outbox_db.h"
#include "outbox/relay_metrics.h"

namespace idem::outbox {

// What BatchMessages::Make made of a batch's rows.
struct BatchToPublish {
  std::vector<OutMessage> messages;
  std::vector<int64_t> ids;    // the rows published, in publish order
  std::vector<size_t> sent;    // the same rows, by index into the batch's rows
  std::vector<int64_t> keyed;  // the ids of the rows published that have an ordering key
  size_t left = 0;             // rows on subjects the stream does not take (left pending)
};

class BatchMessages {
 public:
  // Both references must outlive this.
  BatchMessages(RelayMetrics& metrics, logging::Log& log) : metrics_(metrics), log_(log) {}

  // The messages for `rows` (their payloads and headers are moved into them) on stream
  // `facts`. Rows too large for the stream are parked in `db`'s transaction (the batch's).
  BatchToPublish Make(std::vector<ClaimedRow>& rows, OutboxDb& db, const StreamFacts& facts);

 private:
  // A row the lock took on a subject the stream does not take (its subjects changed under
  // --subjects): logged at most once a minute.
  void WarnNotTaken(const ClaimedRow& row, const StreamFacts& facts);
  // A row that set Idem-Ordering-Key itself: logged at most once a minute.
  void NoteOwnKeyHeader(const ClaimedRow& row);
  // Parks `row` (its message of `size` bytes is over `limit`) in `db`'s transaction.
  void ParkTooLarge(const ClaimedRow& row, OutboxDb& db, const StreamFacts& facts, int64_t size,
                    int64_t limit);

  RelayMetrics& metrics_;
  logging::Log& log_;
  std::optional<std::chrono::steady_clock::time_point> not_taken_warned_;
  std::optional<std::chrono::steady_clock::time_point> own_key_header_noted_;
};

}  // namespace idem::outbox
