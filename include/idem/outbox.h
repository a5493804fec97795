// The transactional outbox: record an event in the same PostgreSQL transaction as the business
// write; `idem relay` publishes it to NATS JetStream later, with the event id as the broker's
// dedup id (Nats-Msg-Id). A service must never publish directly after its commit (a crash in
// between loses the event) nor before it (a failed commit invents one).
//
//   BEGIN;                                             -- on the service's own PGconn
//   INSERT INTO payments ...;                          -- the business write
//   auto queued = idem::outbox::Enqueue(conn, {.event_id = "payment-42.captured",
//                                              .subject = "payments.captured",
//                                              .payload = json, .ordering_key = "account-7"});
//   COMMIT;                                            -- event and payment, or neither
//
// The same call from any language: SELECT idem.outbox_enqueue(event_id, subject, payload,
// headers, ordering_key). docs/emit.md explains the guarantees.
//
// REQUIRES for Enqueue: `conn` is connected, inside a transaction block (BEGIN), on a database
// whose schema `idem migrate` (or opening a PostgreSQL store, or starting `idem relay`) has
// brought to the current version. Otherwise kFailedPrecondition. Errors are Statuses as in
// store.h; after an error the caller's transaction is aborted and must be rolled back. Any
// isolation level works; above READ COMMITTED a concurrent duplicate is a serialization
// failure, and a deadlock between two transactions taking ordering keys in opposite orders is
// possible at any level: both are kUnavailable (SQLSTATE 40001 / 40P01 in the message): retry
// the whole transaction.
//
// Thread safety: as libpq's — one thread at a time per PGconn.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "idem/status.h"

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::outbox {

// The header `idem relay` puts on every message of a row that has an ordering key: its value
// is the key (control characters, which keys enqueued before schema version 20 may hold, and
// '%' percent-encoded then). A row without a key gets none, and a header of this name among a
// row's own headers is dropped: the row's key wins. `idem consume` orders by it.
inline constexpr const char kOrderingKeyHeader[] = "Idem-Ordering-Key";

struct Event {
  // Unique per event, 1 to 255 characters, stable across re-runs of the producer: derive it
  // from the business operation ("payment-42.captured"), never generate it per attempt.
  std::string event_id;
  // The NATS subject to publish to ("payments.captured"); no wildcards. The relay's stream
  // must cover it, or the relay parks the row.
  std::string subject;
  // The message body, any bytes.
  std::string payload;
  // Extra message headers (name, value); Nats-Msg-Id is added by the relay, and
  // Idem-Ordering-Key (kOrderingKeyHeader) from `ordering_key`, replacing one set here.
  std::vector<std::pair<std::string, std::string>> headers;
  // Events with the same key are published in enqueue order; enqueues of one key are
  // serialised until COMMIT (an advisory lock per distinct key, so keep the distinct keys of
  // one transaction within the server's max_locks_per_transaction budget, and take them in a
  // consistent order). No key: no order guarantee, no serialisation, no lock. At most 1,024
  // bytes, without control characters (line breaks, tabs, ...): the relay sends it as the
  // message header Idem-Ordering-Key.
  std::optional<std::string> ordering_key;
};

// Records `event` in the caller's open transaction. True when recorded; false when an event
// with this id is already in the outbox (enqueueing is idempotent: a re-run of the producer
// finds its event there for the retention horizon, default 30 days after enqueue). A
// concurrent Enqueue of the same id on another connection waits until this transaction ends.
// kInvalidArgument for an empty or over-long id, a subject with spaces or wildcards, a bad
// header name, or an ordering key over 1,024 bytes or with a control character; the
// transaction is then aborted.
Result<bool> Enqueue(PGconn* conn, const Event& event);

}  // namespace idem::outbox
