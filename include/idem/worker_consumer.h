// idem::worker::JetStreamConsumer: the worker layer's consume loop in-process, for C++
// services whose effects live in PostgreSQL. For every message of a durable JetStream pull
// consumer:
//
//   BEGIN; claimed = idem.inbox_claim(inbox_consumer, message key);   -- one round trip
//                                        (the SQL function worker.h's InboxClaim calls)
//   if claimed: handler(conn, message);  -- the business statements, on the same connection
//   COMMIT;
//   ack                                   -- only after the COMMIT succeeded
//
// so a message's effects and the record that it was applied commit together. By default
// messages of one fetched batch share round trips, never transactions: a message's COMMIT is
// sent in the same query as the next message's BEGIN and claim (each statement answers
// separately, so the ack still waits for that COMMIT's own success); the batch's last COMMIT
// goes on its own. A crash at any point is safe: before the COMMIT nothing remains and NATS
// redelivers; after the COMMIT and before the ack, the redelivery's claim returns false and it
// is acked without running the handler; after the ack there is nothing left to do.
//
// Options::messages_per_transaction > 1 groups up to that many messages of a batch into one
// transaction, for throughput: BEGIN and all their claims in one round trip, each claimed
// message's handler in turn, one COMMIT, then the acks. The commit and the claims' per-
// transaction cost are paid once per group. Everything above still holds per message (claim
// and effects commit together, ack after the commit). If anything in a group fails (a claim,
// a handler, the COMMIT), the group is rolled back and applied again one message per
// transaction, so one bad message neither blocks nor takes down the others; a handler may
// therefore run again for a message whose first run was rolled back (it always could: NATS
// redelivers). The group holds its row locks until its COMMIT.
//
// The message key is the producer's Nats-Msg-Id, else "<stream>:<stream sequence>" (the same
// key `idem consume` sends as Idempotency-Key, so the two can be swapped).
//
//   idem::worker::JetStreamConsumer::Options o;
//   o.nats_url = "nats://127.0.0.1:4222"; o.stream = "PAYMENTS"; o.consumer = "ledger";
//   auto consumer = idem::worker::JetStreamConsumer::Create(o, "host=... dbname=...");
//   (*consumer)->Run([](PGconn* conn, const idem::worker::ConsumedMessage& m) -> idem::Status {
//     auto appended = idem::worker::LedgerAppend(conn, account, txn, amount);
//     return appended.status();
//   });
//
// Handler contract: run statements on `conn` only inside the open transaction (never COMMIT or
// ROLLBACK it, and with groups do not assume the transaction holds only this message's
// statements); return OK to commit. A non-OK status rolls the transaction back and settles the
// message: kInvalidArgument means "this message can never succeed" and gives it up at once;
// any other code naks it for redelivery after a backoff.
//
// Poison messages end: a message whose handler (or COMMIT) still fails at its max_deliver-th
// delivery, or after failing for max_retry_time, is given up too. A given-up message is
// published to `dead_letter` (headers say why, see docs/worker.md "Poison messages") and then
// terminated, never redelivered; without `dead_letter`, or when that publish keeps failing
// at the limit, it is terminated, logged as an error and counted (Stats::dropped). PostgreSQL
// being unreachable (the claim cannot run) never gives a message up.
//
// Thread safety: Run on one thread; Stop and stats from any. One consumer owns one NATS
// connection and one PostgreSQL connection and handles one message at a time; for more
// throughput run several on the same durable consumer (threads or processes): NATS spreads
// the messages, the inbox keeps concurrent redeliveries apart.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "idem/status.h"

typedef struct pg_conn PGconn;  // libpq-fe.h

namespace idem::worker {

// One message, as the handler sees it. Views are valid during the handler call only.
struct ConsumedMessage {
  std::string_view key;      // the idempotency key (see above)
  std::string_view subject;
  std::string_view data;
  std::span<const std::pair<std::string, std::string>> headers;
  std::string_view stream;
  uint64_t stream_sequence = 0;
  uint64_t delivery_count = 0;  // 1 on the first delivery

  // The first header named `name` (case-insensitive), or "".
  std::string_view Header(std::string_view name) const;
};

using MessageHandler = std::function<Status(PGconn* conn, const ConsumedMessage& message)>;

class JetStreamConsumer {
 public:
  struct Options {
    std::string nats_url = "nats://127.0.0.1:4222";
    std::string stream;
    std::string consumer;        // durable pull consumer, created (explicit ack) when missing
    std::string filter_subject;  // only when the consumer is created
    // The inbox's consumer name: claims are unique per (inbox_consumer, key). Default: the
    // durable consumer's name. Consumers applying different effects need different names.
    std::string inbox_consumer;
    // false skips the inbox claim (for measuring its cost; effects are then at-least-once).
    bool inbox = true;
    int batch = 64;                                  // messages per fetch
    // Messages of a fetched batch applied in one transaction (see above); 1 = one each.
    int messages_per_transaction = 1;
    std::chrono::milliseconds fetch_wait{1000};      // a fetch's wait for the first message
    std::chrono::milliseconds ack_wait{30000};       // only when the consumer is created
    int64_t max_ack_pending = 1000;                  // only when the consumer is created
    std::chrono::milliseconds nak_delay{1000};       // first redelivery delay, then doubled
    std::chrono::milliseconds max_nak_delay{60000};
    // Give a failing message up at this delivery (JetStream's count; 0: no delivery limit) or
    // once it has failed for max_retry_time, measured from its first failed delivery this
    // consumer saw (0: no time limit); not both 0. With the default backoff, 10 deliveries
    // take about 4 minutes.
    uint64_t max_deliver = 10;
    std::chrono::milliseconds max_retry_time{30 * 60 * 1000};
    // Subject a given-up message is published to before it is terminated; a stream must store
    // it (Run checks). Empty: it is only logged and counted.
    std::string dead_letter;
    // Where log lines go (level is "info", "warn" or "error"). Default: standard error.
    std::function<void(std::string_view level, std::string_view line)> log;
  };

  struct Stats {
    uint64_t fetched = 0;
    uint64_t applied = 0;     // handler ran, committed, acked
    uint64_t duplicates = 0;  // claim returned false: acked without running the handler
    uint64_t naked = 0;
    uint64_t termed = 0;
    uint64_t errors = 0;      // database or NATS calls that failed
    uint64_t limit_reached = 0;   // given up at max_deliver or max_retry_time
    uint64_t dead_lettered = 0;   // published to dead_letter (then terminated)
    uint64_t dead_letter_failures = 0;  // dead-letter publishes that failed
    uint64_t dropped = 0;         // terminated without a dead letter
  };

  // Checks the options and starts connecting to NATS (a server not up yet is retried).
  // `pg_conninfo` is a libpq connection string or URI; the connection is made (and remade
  // after a failure) by Run. kInvalidArgument for bad options (a malformed subject, both retry
  // limits 0) or a malformed conninfo.
  static Result<std::unique_ptr<JetStreamConsumer>> Create(Options options,
                                                           std::string pg_conninfo);
  ~JetStreamConsumer();

  // Pulls and applies messages until Stop(); finishes the batch in hand, then returns OK.
  // NATS or PostgreSQL being down is logged and retried, never returned. Before the first
  // message, what cannot work is returned: kNotFound when the stream does not exist,
  // kFailedPrecondition when the server refuses to create the consumer or no stream stores
  // `dead_letter`.
  Status Run(const MessageHandler& handler);
  void Stop();

  Stats stats() const;

 private:
  class Impl;
  explicit JetStreamConsumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::worker
